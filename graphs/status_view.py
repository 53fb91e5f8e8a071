"""What a graph's status shows (the status fragment of its page, polled every few seconds, and
the page itself): the deployment, its pods with their GPU and /dev/shm readings, operations,
events, the Planner's decisions and, on Kubernetes, the scaling changes others made."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.template.loader import render_to_string

from core.dgd import topology

from . import fragments
from .models import ACTIVE_STATES, Deployment, Event, Graph, Operation, PlannerDecision, Pod, ReplicaChange
from .runtimes.registry import on_cluster
from .status_cache import POD_READINGS, ROUTABLE_READINGS, TIMELINE_SECONDS
from .templatetags.graphs_extras import age


def deployment_of(graph: Graph) -> Deployment | None:
    try:
        return graph.deployment
    except Deployment.DoesNotExist:
        return None


# What the status needs of a graph's deployment, read with the graph (one query for both). Its
# revision comes along too unless the caller reads the graph's head (usually the same row: see
# status_context).
WITH_DEPLOYMENT = ("deployment__revision", "deployment__cluster")
WITH_HEAD_AND_DEPLOYMENT = ("head", "deployment", "deployment__cluster")
WITH_STAMP = ("status_stamp",)  # read with the graph: its status version (graphs.status_version)
_READ = object()


@dataclass(frozen=True)
class StatusRows:
    """The rows a graph's status shows: its deployment's pods, its last operations (each with
    the Planner decision it executes, if any), events and, on Kubernetes, the scaling changes
    others made."""

    pods: list[Pod]
    operations: list[Operation]
    events: list[Event]
    replica_changes: list[ReplicaChange]


def _on_kubernetes(deployment: Deployment | None) -> bool:
    """Whether the graph runs on a cluster (its status then shows the scaling changes others made)."""
    return on_cluster(deployment) and deployment.active


def status_rows(graph: Graph, deployment: Deployment | None) -> StatusRows:
    recent = list(Operation.objects.filter(graph=graph).select_related("requested_by")
                  .only(*(f.name for f in Operation._meta.concrete_fields), "requested_by__username")[:10])
    decisions = PlannerDecision.objects.in_bulk([o.params["decision"] for o in recent
                                                 if isinstance(o.params.get("decision"), int)])
    for o in recent:  # a scale made via planner names the decision it executes, and how it ended
        o.decision = decisions.get(o.params.get("decision"))
    return StatusRows(pods=list(Pod.objects.filter(deployment=deployment)) if deployment else [], operations=recent,
                      events=list(graph.events.all()[:15]),
                      replica_changes=list(graph.replica_changes.all()[:10]) if _on_kubernetes(deployment) else [])


def _revision_read(deployment: Deployment) -> bool:
    return Deployment._meta.get_field("revision").is_cached(deployment)


def timeline_paths(points: list, now: float, *, width: int = 300, height: int = 36) -> list[dict]:
    """The chart of a timeline, per pool: an SVG step path over the last TIMELINE_SECONDS (x: time,
    y: routable workers), the highest count and the current one, and the seconds at zero."""
    if not points:
        return []
    start = now - TIMELINE_SECONDS
    pools = sorted({pool for _t, counts in points for pool in counts})
    out = []
    for pool in pools:
        steps = [(max(t, start), counts.get(pool, 0)) for t, counts in points]
        top = max(1, max(n for _t, n in steps))

        def x(t: float) -> float:
            return round((t - start) / TIMELINE_SECONDS * width, 1)

        def y(n: int, top: int = top) -> float:
            return round(height - n / top * (height - 2) - 1, 1)

        d = f"M{x(steps[0][0])},{y(steps[0][1])}"
        zero = 0.0
        for (t0, n0), (t1, n1) in zip(steps, [*steps[1:], (now, steps[-1][1])], strict=True):
            d += f" H{x(t1)}" + (f" V{y(n1)}" if n1 != n0 else "")
            zero += (t1 - t0) if n0 == 0 else 0.0
        out.append({"pool": pool, "path": d, "max": top, "now": steps[-1][1], "zero_seconds": round(zero, 1),
                    "width": width, "height": height})
    return out


def status_context(graph: Graph, deployment: Deployment | None = _READ) -> dict:
    """``deployment``: the graph's, when the caller read it with the graph (WITH_DEPLOYMENT);
    otherwise it is read here (after an operation changed it, say)."""
    if deployment is _READ:
        deployment = Deployment.objects.filter(graph=graph).select_related(*(
            f.removeprefix("deployment__") for f in WITH_DEPLOYMENT)).first()
    if deployment is not None:
        deployment.graph = graph  # the metrics below ask for it: no query
        head = Graph._meta.get_field("head")
        if head.is_cached(graph) and deployment.revision_id == graph.head_id and not _revision_read(deployment):
            deployment.revision = graph.head
    rows = status_rows(graph, deployment)
    pods, recent = rows.pods, rows.operations
    # A graph has at most one unfinished operation and no operation is recorded while one is
    # (Job's constraint, operations._record): the unfinished one, if any, is the latest.
    active_op = next((o for o in recent if o.state in ACTIVE_STATES), None)
    spec = deployment.revision.graph_spec if deployment and deployment.revision else None
    desired = deployment.desired_replicas(spec) if spec and deployment.active else {}
    pools = [
        {"name": s.name, "role": s.role, "replicas": desired.get(s.name, s.effective_replicas),
         "max": max(8, desired.get(s.name, 0) * 2), "planner": bool(spec.pools("planner"))}
        for s in (spec.services if spec else []) if s.role in ("prefill", "decode", "worker")
    ]
    from .diagnosis import diagnose
    from .engines import graph_simulation

    gpu = {}
    if deployment and deployment.active and pods:
        for read in POD_READINGS:
            gpu.update(read(deployment, pods))
    simulation = graph_simulation(spec, deployment.runtime) if spec and deployment.active else None
    for pod in pods:
        pod.simulated = bool(simulation and pod.service in simulation.services)
        pod.shm_requested = spec.shm_requested_bytes(pod.service) if spec else None
        pod.shm_short = bool(pod.shm_requested and pod.shm_bytes is not None
                             and pod.shm_bytes < pod.shm_requested * 0.99)
        reading = gpu.get(pod.name) or {}
        pod.gpu_mem, pod.gpu_pct = reading.get("gpu_memory_bytes"), reading.get("gpu_util")
    timeline = (deployment.runtime_info or {}).get("routable") if deployment and deployment.active else None
    routable = {"note": f"Workers the frontend routes to (its own discovery), last {TIMELINE_SECONDS // 60} minutes:",
                "error": ""}
    for read in ROUTABLE_READINGS if deployment and deployment.active else ():
        found = read(deployment)
        if found is not None:
            timeline, routable = found["points"], found
            break
    return {
        "deployment": deployment,
        "routable_chart": timeline_paths(timeline, time.time()) if isinstance(timeline, list) else [],
        "routable_window": TIMELINE_SECONDS // 60,
        "routable_note": routable.get("note", ""),
        "routable_error": routable.get("error", ""),
        "simulation": simulation,
        "pods_html": _pods_html(graph, pods, simulation),
        "active_op": active_op,
        "history_html": _history_html(rows.events, recent),
        "pools": pools,
        "diagnosis": diagnose(deployment, pods) if deployment and deployment.active else [],
        "deployed": bool(deployment and deployment.active),
        **_cluster_context(graph, deployment, rows),
    }


# The status is polled every 2 s by every open graph page, and most polls find what the last
# one found: the pods table and the events and operations are rendered once per input
# (graphs.fragments). A key holds every stored field of every row shown and what the page
# computed for it, so any change is another key; the pods' AGE is in it as shown (42s, 7m).
def _row(obj) -> tuple:
    return tuple(getattr(obj, field.attname) for field in obj._meta.concrete_fields)


def _pods_html(graph: Graph, pods: list[Pod], simulation) -> str:
    if not pods:
        return ""
    shown = (graph.name, simulation and (simulation.label, simulation.reason),
             [(_row(p), age(p.started_at), p.simulated, p.shm_requested, p.shm_short, p.gpu_mem, p.gpu_pct)
              for p in pods])
    return fragments.render("graph-pods", shown, lambda: render_to_string(
        "graphs/detail.html#pods", {"graph": graph, "pods": pods, "simulation": simulation}))


def _history_html(events: list, operations: list[Operation]) -> str:
    shown = ([_row(e) for e in events],
             [(_row(o), str(o.requested_by or ""), o.decision and _row(o.decision)) for o in operations])
    return fragments.render("graph-history", shown, lambda: render_to_string(
        "graphs/detail.html#history", {"events": events, "recent_ops": operations}))


def _cluster_context(graph: Graph, deployment, rows: StatusRows) -> dict:
    """Kubernetes: the scaling decisions others made, and whether the head revision needs a recreate."""
    if not _on_kubernetes(deployment):
        return {}
    change = None
    if graph.head_id and deployment.revision_id != graph.head_id:
        change = topology.change(topology.components(deployment.manifest),
                                 [s.name for s in graph.head.graph_spec.services])
    return {"replica_changes": rows.replica_changes, "topology_change": change,
            "topology_downtime": change.downtime(graph.name) if change else ""}
