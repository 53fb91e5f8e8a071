"""The status cache's one writer. Runtimes observe (the local operator its processes, the
cluster watchers their clusters) and report each graph's Observation here; this module alone
writes the observed side of the cache: Deployment's state, message, endpoint and observed
time, its Pod rows and its Events. Pages and the API read the cache, never a runtime."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from .models import Deployment, Event, GraphState, Operation, OperationState, Pod
from .runtimes.base import POD_COLUMNS, Observation, PodStatus

# An upsert rewrites every column a runtime reports (runtimes.base.POD_COLUMNS), and the time.
POD_FIELDS = [*(c for c in POD_COLUMNS if c != "name"), "updated_at"]
# Text kept of the unbounded columns: the end of a log, the start of a message.
LAST_LOG_CHARS, MESSAGE_CHARS = 4000, 2000


BOUNDED = {f.name: f.max_length for f in Pod._meta.concrete_fields if f.name in POD_COLUMNS and f.max_length}


def pod_row(pod: PodStatus) -> dict:
    """A reported pod as its row's columns, each text cut to what its column holds."""
    row = {c: getattr(pod, c) for c in POD_COLUMNS}
    for name, limit in BOUNDED.items():
        row[name] = row[name][:limit]
    row["message"] = pod.message[:MESSAGE_CHARS]
    row["last_log"] = pod.last_log[-LAST_LOG_CHARS:]
    return row

# Readings of live pods that apps above the graph store add to the pod table, registered in
# their AppConfig.ready (metrics adds each pod's GPU memory and utilisation from Prometheus):
# functions (deployment, pods) -> {pod name: {"gpu_memory_bytes": ..., "gpu_util": ...}}.
POD_READINGS: list = []
# Where a graph's routable-workers chart comes from when its runtime does not keep one itself
# (metrics adds a Kubernetes graph's, from its frontend's series in Prometheus): functions
# (deployment) -> {"points": [[t, {pool: n}], ...], "note": str, "error": str}, or None.
ROUTABLE_READINGS: list = []
# How far back that chart reaches; the local runtime keeps as much (rollout.timeline_add).
TIMELINE_SECONDS = 600


def observation_record(deployment: Deployment, observation: Observation, *, observed_generation: int,
                       merge_events: bool = False, runtime_info: dict | None = None) -> None:
    """Write what a runtime saw of one graph, in one transaction: its pods replace the last
    set, its events are added (``merge_events``: one row per object, reason and message, its
    time moved on when it repeats, as Kubernetes events do), and the graph's state follows
    (``runtime_info``: what a Dynamo tool needs to attach to the graph; None leaves it as is)."""
    pods = observation.pods
    with transaction.atomic():
        Pod.objects.filter(deployment=deployment).exclude(name__in=[p.name for p in pods]).delete()
        if pods:
            Pod.objects.bulk_create(
                [Pod(deployment=deployment, **pod_row(p)) for p in pods],
                update_conflicts=True, unique_fields=["deployment", "name"], update_fields=POD_FIELDS,
            )
        if merge_events:
            for e in observation.events:
                Event.objects.update_or_create(graph_id=deployment.graph_id, object=e.object[:253], reason=e.reason,
                                               message=e.message[:2000], defaults={"at": e.at, "type": e.type})
        elif observation.events:
            Event.objects.bulk_create([Event(graph_id=deployment.graph_id, at=e.at, type=e.type, reason=e.reason,
                                             object=e.object[:253], message=e.message[:2000])
                                       for e in observation.events])
        Deployment.objects.filter(pk=deployment.pk).update(
            state=observation.state, message=observation.message[:2000], observed_at=timezone.now(),
            endpoint=observation.endpoint, observed_generation=observed_generation,
            **({} if runtime_info is None else {"runtime_info": runtime_info}))
        scales_settle(deployment, observation, observed_generation)


def scales_settle(deployment: Deployment, observation: Observation, observed_generation: int) -> None:
    """Finish the scale operations that wait for this observation (operations.operation_run
    leaves a local scale running with ``params["await"]``): succeeded once the pool runs the
    replicas asked for, failed when the runtime reports it cannot run them. What is not seen by
    the deadline, the sweep fails (OperationRunner.lost)."""
    waiting = Operation.objects.filter(graph_id=deployment.graph_id, state=OperationState.RUNNING,
                                       params__has_key="await")
    for op in waiting:
        want = op.params["await"]
        if observed_generation < want["generation"]:
            continue
        service, replicas = want["service"], want["replicas"]
        asked = {k: v for k, v in op.params.items() if k != "await"}  # the request, as it was made
        pods = [p for p in observation.pods if p.service == service]
        running = sum(1 for p in pods if p.phase == "Running")
        if observation.state == GraphState.FAILED and observation.message:
            Operation.finish(op.pk, OperationState.FAILED, params=asked,
                             result=f"{service}: the runtime cannot run {replicas} replica(s): {observation.message}")
        elif len(pods) == replicas and running == replicas:
            Operation.finish(op.pk, OperationState.SUCCEEDED, params=asked,
                             result=f"{service}: {op.before.get('replicas')} → {replicas} replicas "
                                    f"({running} running, observed)")


def state_record(deployment: Deployment, *, state: str, message: str) -> None:
    """The graph's state alone, when its runtime cannot be observed (its cluster does not
    answer): pods and the observed time stay as last seen."""
    Deployment.objects.filter(pk=deployment.pk).update(state=state, message=message[:2000])
