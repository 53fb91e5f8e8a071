"""What the local runtime can run on this host, checked before an operation is recorded, so a
scale or apply it cannot carry out is refused with the limit and the setting that raises it,
instead of being accepted and then stopping the graph's running pods."""

from __future__ import annotations

from django.conf import settings

from core.errors import OperationRefused
from core.spec import GraphSpec

from ...engines import ENGINES, Host, local_engine
from ...models import Deployment, Pod
from .hostlimits import inotify_problem
from .vllm_cpu import host_problem

# Roles the local operator starts one process per replica for (the Planner's process, where it
# runs, is one more and is not counted here: without AISimulate it does not run at all).
PROCESS_ROLES = ("frontend", "prefill", "decode", "worker")


def processes_of(spec: GraphSpec, replicas: dict[str, int]) -> int:
    return sum(max(0, replicas.get(s.name, 0)) for s in spec.services if s.role in PROCESS_ROLES)


def processes_elsewhere(graph_id: int) -> int:
    """Processes the local runtime runs (or is about to run) for every other graph."""
    total = 0
    for dep in Deployment.objects.filter(runtime="local", active=True).exclude(graph_id=graph_id) \
            .select_related("revision"):
        if dep.revision is not None:
            spec = dep.revision.graph_spec
            total += processes_of(spec, dep.desired_replicas(spec))
    return total


def cpu_workers_of(spec: GraphSpec, replicas: dict[str, int], host: Host) -> int:
    """Workers that run vLLM on this host's CPU, a core of their own each."""
    return sum(max(0, replicas.get(s.name, 0)) for s in spec.services
               if s.role in PROCESS_ROLES[1:] and ENGINES[local_engine(spec, s, host).engine].on_cpu)


def cpu_workers_elsewhere(graph_id: int, host: Host) -> int:
    total = 0
    for dep in Deployment.objects.filter(runtime="local", active=True).exclude(graph_id=graph_id) \
            .select_related("revision"):
        if dep.revision is not None:
            spec = dep.revision.graph_spec
            total += cpu_workers_of(spec, dep.desired_replicas(spec), host)
    return total


def frontends_of(spec: GraphSpec, replicas: dict[str, int]) -> int:
    return sum(max(0, replicas.get(s.name, 0)) for s in spec.services if s.role == "frontend")


def capacity_problem(*, graph_name: str, graph_id: int, spec: GraphSpec, replicas: dict[str, int],
                     changed: str = "", running_frontends: int = 0, running_cpu_workers: int = 0) -> str:
    """Why the local runtime cannot run ``spec`` at ``replicas`` beside the other local graphs,
    or "" when it can. ``changed``: the pool being scaled, named in the message."""
    limit = settings.LOCAL_RUNTIME_MAX_PROCESSES
    needed = processes_of(spec, replicas)
    others = processes_elsewhere(graph_id)
    if needed + others <= limit:
        # vLLM on CPU: a core of its own per worker, and about 3.4 GB of memory each.
        host = Host.detect()
        cpu_workers = cpu_workers_of(spec, replicas, host)
        problem = host_problem(cpu_workers, others=cpu_workers_elsewhere(graph_id, host), graph=graph_name,
                               running=running_cpu_workers) if cpu_workers else ""
        # The kernel's limit next: frontends that do not run yet need inotify instances.
        return problem or inotify_problem(max(0, frontends_of(spec, replicas) - running_frontends))
    what = f"{changed} at {replicas.get(changed, 0)} replicas makes {graph_name} need" if changed else \
        f"{graph_name} needs"
    fits = ""
    if changed:
        room = limit - others - (needed - replicas.get(changed, 0))
        fits = f"; at most {max(0, room)} replica{'s' if room != 1 else ''} of {changed} fit now"
    return (f"the local runtime runs at most {limit} processes on this host (setting LOCAL_RUNTIME_MAX_PROCESSES) "
            f"and other graphs run {others}: {what} {needed}{fits}. Nothing was changed; raise "
            "LOCAL_RUNTIME_MAX_PROCESSES if the host has room, or scale another graph down")



def local_capacity_check(*, graph, deployment: Deployment | None, spec: GraphSpec, replicas: dict[str, int],
                         changed: str = "") -> None:
    """Raise OperationRefused when the local runtime cannot run ``spec`` at ``replicas``."""
    running = workers = 0
    if deployment is not None and deployment.active:
        running = Pod.objects.filter(deployment=deployment, role="frontend").count()
        workers = Pod.objects.filter(deployment=deployment).exclude(role="frontend").count()
    problem = capacity_problem(graph_name=graph.name, graph_id=graph.pk, spec=spec, replicas=replicas,
                               changed=changed, running_frontends=running, running_cpu_workers=workers)
    if problem:
        raise OperationRefused(problem)
