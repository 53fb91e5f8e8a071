"""The local runtime, control side: records the desired state of a graph in its Deployment
row. The local operator process (graphs.runtimes.local.operator, ``manage.py runoperator``)
reconciles that state into real Dynamo processes and reports them back as pods, the way the
Dynamo operator reconciles a DGD on a cluster."""

from __future__ import annotations

import difflib
import json
import threading
import time
from collections import deque
from pathlib import Path

from django.conf import settings

from core.specio import dump_yaml
from jobs.runner import JobFailed

from ...companions import local_note
from ...models import Deployment, GraphState, Pod
from ..base import ApplyResult, Target
from .capacity import local_capacity_check

LOG_DIR_NAME = "logs"
SCALE_LOOK_S = 0.2  # how often a scale reads what the local operator last reported


def graph_dir(graph_name: str) -> Path:
    return Path(settings.LOCAL_RUNTIME_DIR) / "graphs" / graph_name


def _sorted(obj):
    return json.loads(json.dumps(obj, sort_keys=True))


def pod_log_path(graph_name: str, pod: str) -> Path:
    return graph_dir(graph_name) / LOG_DIR_NAME / f"{pod}.log"


def wait_scaled(deployment_pk: int, *, generation: int, service: str, replicas: int, timeout: float,
                stop: threading.Event | None = None) -> tuple[int | None, str]:
    """Read what the local operator reports (the status cache) until it has seen ``generation``
    and runs ``replicas`` of ``service``: (the pods running, ""); or, at the deadline, (None, the
    deployment's message). JobFailed when the operator reports that it cannot run them."""
    deadline = time.monotonic() + timeout
    while True:
        observed, state, message = Deployment.objects.filter(pk=deployment_pk).values_list(
            "observed_generation", "state", "message").first() or (-1, "", "the graph is no longer deployed")
        if observed >= generation:
            if state == GraphState.FAILED and message:
                raise JobFailed(f"{service}: the runtime cannot run {replicas} replica(s): {message}")
            phases = list(Pod.objects.filter(deployment_id=deployment_pk, service=service)
                          .values_list("phase", flat=True))
            if len(phases) == replicas and all(phase == "Running" for phase in phases):
                return replicas, ""
        if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            return None, message
        time.sleep(SCALE_LOOK_S)


class LocalRuntime:
    kind = "local"

    # The operations' questions (runtimes/base.py states them).
    def admit_apply(self, *, graph, deployment, revision, cluster: str, namespace: str, dry_run: bool, force: bool,
                    recreate: bool, confirm: str) -> dict:
        """This host must have room for the revision's processes; the local runtime has one
        place, and its rules carry a change on from where a rollout stands (rollout.py)."""
        if not dry_run:
            spec = revision.graph_spec
            local_capacity_check(graph=graph, deployment=deployment, spec=spec,
                                 replicas={s.name: s.effective_replicas for s in spec.services})
        return {}

    def admit_scale(self, *, graph, deployment, spec, service: str, replicas: int) -> None:
        local_capacity_check(graph=graph, deployment=deployment, spec=spec,
                             replicas={**deployment.desired_replicas(spec), service: replicas}, changed=service)

    def change_refused(self, deployment) -> str:
        return ""

    def apply_target(self, deployment, params: dict) -> tuple[Target, dict]:
        return Target(kind=self.kind, cluster=deployment.cluster_name, namespace=deployment.namespace), {}

    def settle_scale(self, runner, *, target: Target, spec, deployment, service: str, replicas: int, before: int,
                     text: str) -> str:
        """Wait, with no transaction open and the lease kept by the heartbeat, until the local
        operator runs the new count, as a cluster's scale waits for the cluster
        (kubernetes/admission.settle_scale); else fail saying what was asked and what the runtime
        reports. The operator reads the desired state from the Deployment row: it is written
        first (OperationRunner.publish)."""
        runner.publish()
        timeout = settings.OPERATION_OBSERVE_SECONDS
        running, reported = wait_scaled(deployment.pk, generation=deployment.generation, service=service,
                                        replicas=replicas, timeout=timeout,
                                        stop=runner.heartbeat.lost if runner.heartbeat else None)
        if running is not None:
            return f"{text} ({running} running, observed)"
        message = (f"the local runtime did not run {replicas} replica(s) of {service} within {timeout:g} s "
                   f"(setting OPERATION_OBSERVE_SECONDS)" + (f"; it reports: {reported}" if reported else ""))
        runner.event = ("ScaleNotObserved", service, message, "Warning")
        raise JobFailed(message)

    def apply(self, *, target: Target, spec, manifest: dict, dry_run: bool = False, deployment, revision):
        live = deployment.manifest if deployment.active else None
        # Keys in one order on both sides: PostgreSQL's jsonb gives the stored manifest back with
        # its keys reordered, which would show as a change of every line.
        before = dump_yaml(_sorted(live)).splitlines(keepends=True) if live else []
        after = dump_yaml(_sorted(manifest)).splitlines(keepends=True)
        diff = "".join(difflib.unified_diff(before, after, fromfile="live", tofile=f"revision {revision.number}"))
        changed = bool(diff) or bool(deployment.replicas) or not deployment.active
        # The file's ConfigMaps, PVCs and DRA claims are a cluster's: said, never silently dropped.
        note = local_note(revision.companions)
        warnings = [note] if note else []
        resets = self.replica_resets(spec, deployment)
        if resets:
            # A scale since the last apply lives beside the manifest, not in it: the diff cannot show
            # that the apply sets those pools back to the revision's counts, so it is said here.
            warnings.append("replicas set by a scale since the last apply go back to the revision's: "
                            + ", ".join(resets))
        if dry_run or not changed:
            return ApplyResult(changed=changed, diff=diff, warnings=warnings)
        deployment.runtime = self.kind
        deployment.revision = revision
        deployment.manifest = manifest
        deployment.api_version = manifest["apiVersion"]
        deployment.replicas = {}  # an apply sets every pool to the revision's replicas, as kubectl apply does
        deployment.active = True
        deployment.generation += 1
        deployment.state = GraphState.PROGRESSING
        deployment.message = f"revision {revision.number} applied; waiting for the local operator"
        if note:
            deployment.message += f" ({note})"
        return ApplyResult(changed=True, diff=diff, warnings=warnings)

    @staticmethod
    def replica_resets(spec, deployment) -> list[str]:
        """["decode: 3 → 1"]: pools a scale set since the last apply, and the count this apply gives them."""
        if not deployment.active or not deployment.replicas:
            return []
        declared = {s.name: s.effective_replicas for s in spec.services}
        return [f"{name}: {now} → {declared[name]}" for name, now in sorted(deployment.replicas.items())
                if name in declared and now != declared[name]]

    def scale(self, *, target: Target, spec, service: str, replicas: int, deployment) -> None:
        overrides = dict(deployment.replicas or {})
        overrides[service] = replicas
        deployment.replicas = overrides
        deployment.generation += 1

    def delete(self, *, target: Target, spec, deployment) -> None:
        deployment.active = False
        deployment.generation += 1
        deployment.state = GraphState.DELETING
        deployment.message = "stopping every process"

    def pod_log(self, *, deployment, pod: str, lines: int = 200) -> str:
        path = pod_log_path(deployment.graph.name, pod)
        if not path.exists():
            return ""
        with open(path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
