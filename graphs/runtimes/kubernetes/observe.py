"""Pure translations of what a cluster reports into the status cache's terms: a Dynamo pod
into a PodStatus (the kubectl columns plus GPUs and /dev/shm), a DGD's status into a graph
state, and a core Event into an EventRecord (free GPUs: clusters/gpus.py).
No network, no database: watch.py feeds it plain dicts."""

from __future__ import annotations

import datetime as dt

from clusters.gpus import condition, pod_gpus, quantity_count

from ...models import GraphState
from ..base import EventRecord, PodStatus

DGD_LABEL = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT_LABEL = "nvidia.com/dynamo-component"
COMPONENT_TYPE_LABEL = "nvidia.com/dynamo-component-type"
SUB_COMPONENT_TYPE_LABEL = "nvidia.com/dynamo-sub-component-type"
SHM_PATH = "/dev/shm"
SHM_VOLUME = "shared-memory"  # the operator's emptyDir (internal/dynamo/shared_memory.go)
# Without a memory-backed volume on /dev/shm a container gets the runtime's 64 MB default.
CONTAINER_SHM_DEFAULT = 64 * 2**20
STUCK_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError", "Unschedulable")


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def pod_shm_bytes(pod: dict) -> int | None:
    """Size of /dev/shm: the sizeLimit of the emptyDir mounted there (the operator's
    ``shared-memory`` volume), None when it has no limit (node memory), 64 MiB without one."""
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    mounted = [m.get("name") for c in spec.get("containers") or [] for m in c.get("volumeMounts") or []
               if m.get("mountPath") == SHM_PATH]
    volume = next((volumes[n] for n in mounted if n in volumes), volumes.get(SHM_VOLUME))
    if volume is None or "emptyDir" not in volume:
        return CONTAINER_SHM_DEFAULT
    limit = (volume.get("emptyDir") or {}).get("sizeLimit")
    return quantity_count(limit) if limit else None


def pod_status(pod: dict) -> PodStatus:
    """A pod as kubectl get pods shows it: STATUS is the waiting reason when a container is
    stuck (CrashLoopBackOff, ImagePullBackOff...), Terminating while it is deleted."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    kind, sub = labels.get(COMPONENT_TYPE_LABEL, ""), labels.get(SUB_COMPONENT_TYPE_LABEL, "")
    role = sub if kind == "worker" and sub in ("prefill", "decode") else (kind or "other")
    containers = status.get("containerStatuses") or []
    phase, reason, message = status.get("phase") or "Pending", "", ""
    waiting = next(((c.get("state") or {}).get("waiting") for c in containers
                    if ((c.get("state") or {}).get("waiting") or {}).get("reason")), None)
    terminated = next(((c.get("state") or {}).get("terminated") for c in containers
                       if (c.get("state") or {}).get("terminated")), None)
    last = next(((c.get("lastState") or {}).get("terminated") for c in containers
                 if (c.get("lastState") or {}).get("terminated")), None)
    scheduled = condition(status.get("conditions"), "PodScheduled")
    if waiting:
        phase = reason = waiting["reason"]
        message = waiting.get("message") or ""
    elif terminated:
        phase = reason = terminated.get("reason") or "Error"
        message = terminated.get("message") or f"exit code {terminated.get('exitCode')}"
    elif scheduled and scheduled.get("status") == "False":
        reason, message = scheduled.get("reason") or "Unschedulable", scheduled.get("message") or ""
    if last and not terminated:
        if last.get("reason") == "OOMKilled" and reason in ("", "CrashLoopBackOff"):
            reason = "OOMKilled"
        message = (message + " " if message else "") + (
            f"(last exit code {last.get('exitCode')}: {last.get('reason') or 'Error'})")
    if meta.get("deletionTimestamp"):
        phase = "Terminating"
    ready_condition = condition(status.get("conditions"), "Ready")
    port = next((p.get("containerPort") for c in spec.get("containers") or [] for p in c.get("ports") or []), None)
    main = main_container(pod)
    return PodStatus(
        name=meta.get("name", ""), service=labels.get(COMPONENT_LABEL, ""), role=role, phase=phase,
        ready=bool(ready_condition and ready_condition.get("status") == "True"),
        restarts=sum(int(c.get("restartCount") or 0) for c in containers),
        started_at=parse_time(meta.get("creationTimestamp")), node=spec.get("nodeName") or "",
        gpus=pod_gpus(pod), shm_bytes=pod_shm_bytes(pod), shm_source="pod volumes", port=port, reason=reason,
        message=message, command=[str(t) for t in main.get("command") or []],
        args=[str(t) for t in main.get("args") or []])


def main_container(pod: dict) -> dict:
    """The container the operator names ``main``, else the pod's first."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return next((c for c in containers if c.get("name") == "main"), containers[0] if containers else {})


def caught_up(dgd: dict | None) -> bool:
    """The operator has reconciled the DGD's current spec (status.observedGeneration)."""
    if dgd is None:
        return False
    observed = (dgd.get("status") or {}).get("observedGeneration")
    generation = (dgd.get("metadata") or {}).get("generation")
    # Operators before 0.6 report no observedGeneration: nothing to wait for then.
    return observed is None or generation is None or int(observed) >= int(generation)


def _declared_command_lines(dgd: dict) -> dict[str, list[str]]:
    """Component name -> its main container's command and args as the DGD declares them now
    (v1beta1 podTemplate, v1alpha1 extraPodSpec.mainContainer); only components that declare some."""
    spec = dgd.get("spec") or {}
    out: dict[str, list[str]] = {}
    if isinstance(spec.get("components"), list):
        items = [(c.get("name"), c) for c in spec["components"] if isinstance(c, dict)]
    else:
        items = list((spec.get("services") or {}).items()) if isinstance(spec.get("services"), dict) else []
    for name, component in items:
        if not isinstance(component, dict):
            continue
        if "podTemplate" in component:
            containers = ((component.get("podTemplate") or {}).get("spec") or {}).get("containers") or []
            main = next((c for c in containers if isinstance(c, dict) and c.get("name") == "main"), {})
        else:
            main = (component.get("extraPodSpec") or {}).get("mainContainer") or {}
        line = [str(t) for t in (main.get("command") or []) + (main.get("args") or [])]
        if line and isinstance(name, str):
            out[name] = line
    return out


def _contains(line: list[str], part: list[str]) -> bool:
    return any(line[i:i + len(part)] == part for i in range(len(line) - len(part) + 1))


def previous_generation(dgd: dict, pods: list[PodStatus]) -> dict[str, tuple[int, int]]:
    """Component -> (pods still running an earlier spec, its pods): a pod whose command line
    lacks the one the DGD declares now was made from an earlier generation (the operator may
    add flags; it keeps what the DGD says)."""
    declared = _declared_command_lines(dgd)
    out: dict[str, tuple[int, int]] = {}
    for component, line in declared.items():
        mine = [p for p in pods if p.service == component and p.phase != "Terminating"]
        stale = sum(not _contains(p.command + p.args, line) for p in mine)
        if stale:
            out[component] = (stale, len(mine))
    return out


def generation_pools(dgd: dict | None, pods: list[PodStatus], *, changed: bool = False) -> list[dict]:
    """While a pool rolls (pods of an earlier spec remain, or pods are terminating; or, after a
    change to a graph that ran, ``changed``, it has pods and none ready): per component, its pods of
    the current spec (and how many are ready), those of an earlier one, and those terminating,
    beside the replicas the DGD asks for. [] when nothing rolls."""
    if dgd is None:
        return []
    declared = _declared_command_lines(dgd)
    spec = dgd.get("spec") or {}
    items = ([(c.get("name"), c) for c in spec.get("components") or [] if isinstance(c, dict)]
             if isinstance(spec.get("components"), list) else list((spec.get("services") or {}).items()))
    out = []
    for component, body in items:
        mine = [p for p in pods if p.service == component]
        live = [p for p in mine if p.phase != "Terminating"]
        line = declared.get(component)
        new = [p for p in live if line is None or _contains(p.command + p.args, line)]
        entry = {"pool": component, "desired": (body or {}).get("replicas", 1) if isinstance(body, dict) else 1,
                 "new": len(new), "new_routable": sum(p.ready for p in new), "old": len(live) - len(new),
                 "draining": len(mine) - len(live),
                 "ready": sum(p.ready for p in live)}  # 0: nothing to route to (Grove's maxUnavailable 1)
        if entry["old"] or entry["draining"] or (changed and mine and not entry["ready"]):
            out.append(entry)
    return out


def graph_state(*, active: bool, dgd: dict | None, pods: list[PodStatus], name: str, namespace: str,
                awaiting: bool = False) -> tuple[str, str]:
    """GraphState and message from the DGD's ``state`` and ``Ready`` condition, refined by
    what its pods show (a stuck pod fails the graph unless a frontend still serves).
    ``awaiting``: an apply of ours has not been seen yet (a missing DGD is just late)."""
    if not active:
        if dgd is None and not pods:
            return GraphState.NOT_DEPLOYED, "deleted: the DynamoGraphDeployment and its pods are gone"
        return GraphState.DELETING, f"deleting: {len(pods)} pod(s) left"
    if dgd is None:
        if awaiting:
            return GraphState.PROGRESSING, f"waiting for DynamoGraphDeployment {namespace}/{name} to appear"
        return GraphState.FAILED, (f"DynamoGraphDeployment {namespace}/{name} is not on the cluster "
                                   "(deleted outside the control plane?): apply again to recreate it")
    status = dgd.get("status") or {}
    ready = condition(status.get("conditions"), "Ready")
    state = status.get("state") or ""
    if state == "failed" and ready is not None and ready.get("status") != "True":
        # A failed reconcile leaves observedGeneration behind on purpose (the controller advances
        # it only on success: internal/controller/dynamographdeployment_controller.go), so the
        # error is the news, not the generation it has not reached.
        generation = (dgd.get("metadata") or {}).get("generation")
        return GraphState.FAILED, (f"the Dynamo operator failed to reconcile generation {generation} "
                                   f"({ready.get('reason', '')}): {ready.get('message', '')} · DGD state failed")
    if ready is not None and not caught_up(dgd):
        generation = (dgd.get("metadata") or {}).get("generation")
        return GraphState.PROGRESSING, f"the Dynamo operator has not reconciled generation {generation} yet"
    if ready is None:
        return GraphState.PROGRESSING, "waiting for the Dynamo operator to report status" + (
            f" (state {state})" if state else "")
    text = f"Ready={ready.get('status')} ({ready.get('reason', '')}): {ready.get('message', '')}".strip()
    message = f"{text} · DGD state {state or 'unknown'}"
    if ready.get("status") == "True":
        # The DGD can say Ready while pods of the spec it replaced still carry the count
        # (ai-dynamo/dynamo#3567): the rollout is not over until they are gone.
        stale = previous_generation(dgd, pods)
        if stale:
            listed = ", ".join(f"{n} of {total} {component} pods" for component, (n, total) in sorted(stale.items()))
            return GraphState.PROGRESSING, (f"rolling out: {listed} still run the previous spec, although the "
                                            f"DynamoGraphDeployment reports Ready (ai-dynamo/dynamo#3567) · {message}")
        return GraphState.READY, message
    if state == "failed":
        return GraphState.FAILED, message
    serving = any(p.ready for p in pods if p.role == "frontend")
    if any(p.phase in STUCK_REASONS or p.reason in STUCK_REASONS for p in pods):
        return (GraphState.DEGRADED if serving else GraphState.FAILED), message
    return (GraphState.DEGRADED if serving and not all(p.ready for p in pods) else GraphState.PROGRESSING), message


def event_record(event: dict) -> EventRecord:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    meta = event.get("metadata") or {}
    at = (parse_time(event.get("lastTimestamp")) or parse_time(event.get("eventTime"))
          or parse_time(event.get("firstTimestamp")) or parse_time(meta.get("creationTimestamp"))
          or dt.datetime.now(dt.UTC))
    message = event.get("message") or event.get("note") or ""
    return EventRecord(at=at, type=event.get("type") or "Normal", reason=(event.get("reason") or "")[:60],
                       object=involved.get("name", ""), message=message)


def concerned_graphs(kind: str, obj: dict, before: dict | None, dgds: dict[str, dict],
                     pods: dict[str, dict]) -> set[str] | None:
    """Which DGDs a watch event's object of ``kind`` concerns, by name (``before``: the object as
    the watcher held it; ``dgds``, ``pods``: the namespace's, by name); None for an event of an
    object that names no graph (events of other objects are matched to graphs by name prefix
    when the graphs are written: concerns)."""
    if kind == "dgds":
        names = {(obj.get("metadata") or {}).get("name")}
    elif kind == "dgdsas":
        names = {((o.get("spec") or {}).get("dgdRef") or {}).get("name") for o in (obj, before) if o}
    elif kind == "pods":
        names = {((o.get("metadata") or {}).get("labels") or {}).get(DGD_LABEL) for o in (obj, before) if o}
    else:
        involved = (obj.get("involvedObject") or obj.get("regarding") or {}).get("name", "")
        pod = pods.get(involved)
        if involved in dgds:
            names = {involved}
        elif pod is not None:
            names = {((pod.get("metadata") or {}).get("labels") or {}).get(DGD_LABEL)}
        else:
            return None
    return {name for name in names if name}


def concerns(event: dict, dgd: str, pods: set[str]) -> bool:
    involved = (event.get("involvedObject") or event.get("regarding") or {}).get("name", "")
    return involved == dgd or involved in pods or involved.startswith(f"{dgd}-")


def dgd_name(manifest: dict | None, graph_name: str) -> str:
    """The name of the DGD a deployment applied (its manifest's), or the graph's before any."""
    return ((manifest or {}).get("metadata") or {}).get("name") or graph_name
