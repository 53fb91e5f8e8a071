"""The status cache's one writer. Runtimes observe (the local operator its processes, the
cluster watchers their clusters) and report each graph's Observation here; this module alone
writes the observed side of the cache: Deployment's state, message, endpoint and observed
time, its Pod rows and its Events. Pages and the API read the cache, never a runtime."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from .models import Deployment, Event, Pod
from .runtimes.base import POD_COLUMNS, Observation, PodStatus
from .status_version import moved

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


# The deployment's columns an observation writes that the status shows (not its observed time).
OBSERVED_SHOWN = ("state", "message", "endpoint", "observed_generation", "runtime_info")


def _comparable(value):
    """A column's value as the runtime reports it and as the database returns it, alike."""
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, tuple):
        return list(value)
    return value


def _pods_shown(rows) -> dict[str, tuple]:
    return {row["name"]: tuple(_comparable(row[c]) for c in POD_COLUMNS) for row in rows}


def observation_record(deployment: Deployment, observation: Observation, *, observed_generation: int,
                       merge_events: bool = False, runtime_info: dict | None = None) -> None:
    """Write what a runtime saw of one graph, in one transaction: its pods replace the last
    set, its events are added (``merge_events``: one row per object, reason and message, its
    time moved on when it repeats, as Kubernetes events do), and the graph's state follows
    (``runtime_info``: what a Dynamo tool needs to attach to the graph; None leaves it as is).
    The graph's status version moves only when the look changed what the status shows: a
    runtime reports every pod on every look, most of them as they were."""
    rows = [pod_row(p) for p in observation.pods]
    with transaction.atomic():
        before = _pods_shown(Pod.objects.filter(deployment=deployment).values(*POD_COLUMNS))
        after = _pods_shown(rows)
        shown = Deployment.objects.filter(pk=deployment.pk).values_list(*OBSERVED_SHOWN).first()
        if gone := set(before) - set(after):
            Pod.objects.filter(deployment=deployment, name__in=gone).delete()
        # Only the pods that changed are written (a runtime reports every pod on every look, most
        # as they were): a pod's updated_at is when its runtime last reported a change to it.
        if changed := [row for row in rows if before.get(row["name"]) != after[row["name"]]]:
            Pod.objects.bulk_create(
                [Pod(deployment=deployment, **row) for row in changed],
                update_conflicts=True, unique_fields=["deployment", "name"], update_fields=POD_FIELDS,
            )
        events_moved = bool(observation.events) and not merge_events
        if merge_events:
            for e in observation.events:
                key = {"graph_id": deployment.graph_id, "object": e.object[:253], "reason": e.reason,
                       "message": e.message[:2000]}
                # A repeat moves the row's time on; one seen before at the same time changes nothing.
                if not Event.objects.filter(**key, at=e.at, type=e.type).exists():
                    Event.objects.update_or_create(**key, defaults={"at": e.at, "type": e.type})
                    events_moved = True
        elif observation.events:
            Event.objects.bulk_create([Event(graph_id=deployment.graph_id, at=e.at, type=e.type, reason=e.reason,
                                             object=e.object[:253], message=e.message[:2000])
                                       for e in observation.events])
        now_shown = (observation.state, observation.message[:2000], observation.endpoint, observed_generation,
                     shown[-1] if runtime_info is None and shown else runtime_info)
        Deployment.objects.filter(pk=deployment.pk).update(
            observed_at=timezone.now(), **dict(zip(OBSERVED_SHOWN[:-1], now_shown[:-1], strict=True)),
            **({} if runtime_info is None else {"runtime_info": runtime_info}))
        if events_moved or shown != now_shown or gone or changed:
            moved(deployment.graph_id)


def state_record(deployment: Deployment, *, state: str, message: str) -> None:
    """The graph's state alone, when its runtime cannot be observed (its cluster does not
    answer): pods and the observed time stay as last seen."""
    if Deployment.objects.filter(pk=deployment.pk).exclude(state=state, message=message[:2000]).update(
            state=state, message=message[:2000]):
        moved(deployment.graph_id)
