"""Whether a scale on a cluster has happened: the pool's replicas as the cluster observes them
(the DGD's status for the component, its scaling adapter's status, the pods), after a scale
patch was accepted. A patch accepted is only a wish: the operator may be behind, and the pods
may wait for GPUs that no node has free. The scale operation waits on :func:`wait_scaled`
until the cluster runs what it asked for, or fails saying what it sees and why.

Reads only: no database writes, no transaction. The status cache is still fed by the
watchers (watch.py); this reads the cluster directly because the operation must not depend on
a watcher running to finish."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from clusters.kubernetes import DGD, DGDSA, KubeFailure, connect
from clusters.resources import adapter_name, core_path, custom_path

from ..base import PodStatus, Target
from .observe import COMPONENT_LABEL, DGD_LABEL, caught_up, pod_status

FIRST_POLL = 0.1  # seconds; doubled after each look, up to MAX_POLL
MAX_POLL = 2.0


@dataclass
class PoolSeen:
    """One look at a pool on the cluster."""

    done: bool
    observed: str  # in words: what the cluster reports for the pool
    pods: list[PodStatus] = field(default_factory=list)  # the pool's pods, for the diagnosis
    condition: str = ""  # the DGD's Ready condition, in words


def _component_status(dgd: dict, service: str) -> dict | None:
    """The DGD's status entry for one component: ``status.components`` (v1beta1) or
    ``status.services`` (v1alpha1), a map by name (or a list of entries naming it)."""
    status = dgd.get("status") or {}
    for key in ("components", "services"):
        entries = status.get(key)
        if isinstance(entries, dict) and service in entries:
            return entries[service] or {}
        if isinstance(entries, list):
            found = next((e for e in entries if isinstance(e, dict)
                          and service in (e.get("name"), e.get("componentName"))), None)
            if found is not None:
                return found
    return None


def pool_seen(*, dgd: dict | None, adapter: dict | None, pods: list[dict], service: str,
              replicas: int) -> PoolSeen:
    """Pure: whether the cluster runs ``replicas`` of ``service``: the operator has reconciled
    the DGD's spec, reports that many replicas and that many ready, the adapter (if any) agrees,
    and exactly that many pods of the pool are ready and no other is left running (pods
    terminating after a scale down are not waited for: they are on their way out)."""
    statuses = [pod_status(p) for p in pods]
    live = [p for p in statuses if p.phase != "Terminating"]
    ready = sum(1 for p in live if p.ready)
    if dgd is None:
        return PoolSeen(False, "the DynamoGraphDeployment is not on the cluster", statuses)
    entry = _component_status(dgd, service)
    ready_cond = next((c for c in (dgd.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
    condition = (f"Ready={ready_cond.get('status')} ({ready_cond.get('reason', '')}): {ready_cond.get('message', '')}"
                 if ready_cond else "")
    phases: dict[str, int] = {}
    for p in live:
        key = p.phase if not p.reason or p.reason == p.phase else f"{p.phase} ({p.reason})"
        phases[key] = phases.get(key, 0) + 1
    pods_text = ", ".join(f"{n} {k}" for k, n in sorted(phases.items())) or "none"
    gone = len(statuses) - len(live)
    pods_text += f", {gone} Terminating" if gone else ""
    if entry is None:
        seen = f"no status for {service} yet; {ready} of {replicas} pods ready (pods: {pods_text})"
        return PoolSeen(False, seen, statuses, condition)
    reported, reported_ready = entry.get("replicas"), int(entry.get("readyReplicas") or 0)
    seen = (f"{reported_ready} of {replicas} replicas ready (DGD status: replicas {reported}, readyReplicas "
            f"{reported_ready}; pods: {pods_text})")
    if not caught_up(dgd):
        seen += (f"; the Dynamo operator has not reconciled generation {dgd['metadata'].get('generation')} "
                 f"(observed {(dgd.get('status') or {}).get('observedGeneration')})")
    adapter_replicas = ((adapter or {}).get("status") or {}).get("replicas") if adapter is not None else replicas
    if adapter is not None and adapter_replicas != replicas:
        seen += f"; its scaling adapter reports {adapter_replicas}"
    done = (caught_up(dgd) and reported == replicas and reported_ready == replicas and adapter_replicas == replicas
            and ready == replicas and len(live) == replicas)
    return PoolSeen(done, seen, statuses, condition)


def look(*, target: Target, name: str, api_version: str, service: str, replicas: int) -> PoolSeen:
    """Read the pool once from the cluster (DGD, adapter, pods)."""
    namespace = target.namespace
    what = f"observe {service} of {namespace}/{name} on cluster {target.cluster}"
    with connect(target.cluster) as kube:
        dgd = kube.get(custom_path(api_version, DGD, namespace, name), what=what)
        try:
            adapter = kube.get(custom_path(api_version, DGDSA, namespace, adapter_name(name, service)), what=what)
        except KubeFailure as exc:  # no DGDSA CRD served on an older release: no adapter
            if exc.status not in (403, 404):
                raise
            adapter = None
        pods = kube.list(core_path("pods", namespace), what=what,
                         label_selector=f"{DGD_LABEL}={name},{COMPONENT_LABEL}={service}").get("items") or []
    return pool_seen(dgd=dgd, adapter=adapter, pods=pods, service=service, replicas=replicas)


def wait_scaled(*, target: Target, name: str, api_version: str, service: str, replicas: int, timeout: float,
                stop: threading.Event | None = None) -> PoolSeen:
    """Look at the pool until it runs ``replicas`` or ``timeout`` seconds pass (or ``stop`` is
    set: the operation was ended elsewhere); the last look. A cluster that does not answer for
    one look is looked at again; its failure is the answer only at the deadline."""
    deadline = time.monotonic() + timeout
    delay = FIRST_POLL
    while True:
        try:
            seen = look(target=target, name=name, api_version=api_version, service=service, replicas=replicas)
        except KubeFailure as exc:
            if not exc.transient:
                raise
            seen = PoolSeen(False, f"the cluster did not answer: {exc}")
        if seen.done or time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            return seen
        time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
        delay = min(delay * 2, MAX_POLL)
