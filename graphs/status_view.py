"""What a graph's status shows (the status fragment of its page, polled every few seconds, and
the page itself): the deployment, its pods with their GPU and /dev/shm readings, operations,
events, the Planner's decisions and, on Kubernetes, the scaling changes others made."""

from __future__ import annotations

from .dgd import topology
from .models import ACTIVE_STATES, Deployment, Graph, Operation, PlannerDecision, Pod


def deployment_of(graph: Graph) -> Deployment | None:
    try:
        return graph.deployment
    except Deployment.DoesNotExist:
        return None


# What the status needs of a graph's deployment, read with the graph (one query for both). Its
# revision comes along too unless the caller reads the graph's head (usually the same row: see
# status_context); the applied manifest only when a Kubernetes graph needs it (_cluster_context).
WITH_DEPLOYMENT = ("deployment__revision", "deployment__cluster")
WITH_HEAD_AND_DEPLOYMENT = ("head", "deployment", "deployment__cluster")
NOT_READ = ("deployment__manifest",)
_READ = object()


def _revision_read(deployment: Deployment) -> bool:
    return Deployment._meta.get_field("revision").is_cached(deployment)


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
    pods = list(Pod.objects.filter(deployment=deployment)) if deployment else []
    active_op = Operation.objects.filter(graph=graph, state__in=ACTIVE_STATES).first()
    recent = list(Operation.objects.filter(graph=graph).select_related("requested_by")[:10])
    decisions = PlannerDecision.objects.in_bulk([o.params["decision"] for o in recent
                                                 if isinstance(o.params.get("decision"), int)])
    for o in recent:  # a scale made via planner names the decision it executes, and how it ended
        o.decision = decisions.get(o.params.get("decision"))
    spec = deployment.revision.graph_spec if deployment and deployment.revision else None
    desired = deployment.desired_replicas(spec) if spec and deployment.active else {}
    pools = [
        {"name": s.name, "role": s.role, "replicas": desired.get(s.name, s.effective_replicas),
         "max": max(8, desired.get(s.name, 0) * 2), "planner": bool(spec.pools("planner"))}
        for s in (spec.services if spec else []) if s.role in ("prefill", "decode", "worker")
    ]
    from metrics.gpus import pod_gpu_usage

    from .diagnosis import diagnose
    from .engines import graph_simulation

    gpu = pod_gpu_usage(deployment, pods) if deployment and deployment.active and pods else {}
    simulation = graph_simulation(spec, deployment.runtime) if spec and deployment.active else None
    for pod in pods:
        pod.simulated = bool(simulation and pod.service in simulation.services)
        pod.shm_requested = spec.shm_requested_bytes(pod.service) if spec else None
        pod.shm_short = bool(pod.shm_requested and pod.shm_bytes is not None
                             and pod.shm_bytes < pod.shm_requested * 0.99)
        reading = gpu.get(pod.name) or {}
        pod.gpu_mem, pod.gpu_pct = reading.get("gpu_memory_bytes"), reading.get("gpu_util")
    return {
        "deployment": deployment,
        "simulation": simulation,
        "pods": pods,
        "events": list(graph.events.all()[:15]),
        "active_op": active_op,
        "recent_ops": recent,
        "pools": pools,
        "diagnosis": diagnose(deployment, pods) if deployment and deployment.active else [],
        "deployed": bool(deployment and deployment.active),
        **_cluster_context(graph, deployment),
    }


def _cluster_context(graph: Graph, deployment) -> dict:
    """Kubernetes: the scaling decisions others made, and whether the head revision needs a recreate."""
    if deployment is None or deployment.runtime != "kubernetes" or not deployment.active:
        return {}
    change = None
    if graph.head_id and deployment.revision_id != graph.head_id:
        change = topology.change(topology.components(deployment.manifest),
                                 [s.name for s in graph.head.graph_spec.services])
    return {"replica_changes": list(graph.replica_changes.all()[:10]), "topology_change": change,
            "topology_downtime": change.downtime(graph.name) if change else ""}
