"""A local graph's state and message, from its pods, as the Dynamo operator sets a DGD's: what
the graph page, the API and ``manage.py up`` show while it starts, serves or fails."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.utils import timezone

from ...models import GraphState
from ..base import PodStatus

# A mocker worker is ready within seconds; a frontend without a model after this long is a fault.
DEFAULT_READY_WITHIN = 60.0


def _age(pod: PodStatus) -> float:
    return (timezone.now() - pod.started_at).total_seconds() if pod.started_at else 0.0


def starting(pods: list[PodStatus], ready_within: Mapping[str, float]) -> list[PodStatus]:
    """Running real-engine workers (those with a start-up time in ``ready_within``) not ready yet
    and still within it. A mocker is ready within a second: it is never "starting"."""
    return [p for p in pods if p.name in ready_within and p.phase == "Running" and not p.ready
            and _age(p) <= ready_within[p.name]]


def progress(pods: list[PodStatus], ready_within: Mapping[str, float]) -> str:
    """"vllm-agg-worker-0 starting, 34 s of up to 240 s: Loading weights took 0.03 seconds"."""
    parts = []
    for pod in starting(pods, ready_within):
        limit = ready_within[pod.name]
        milestone = getattr(pod, "progress", "")
        parts.append(f"{pod.name} starting, {_age(pod):.0f} s of up to {limit:.0f} s" + (
            f": {milestone}" if milestone else ""))
    return "; ".join(parts)


def graph_state(*, active: bool, replicas: bool, pods: list[PodStatus], problem: str,
                ready_within: Mapping[str, float], rolling: Sequence[str] = ()) -> tuple[str, str]:
    if not active:
        return (GraphState.DELETING, f"stopping {len(pods)} process(es)") if pods else (
            GraphState.NOT_DEPLOYED, "deleted: every process stopped")
    if problem:
        return GraphState.FAILED, problem
    # Workers draining (Terminating) serve what they hold and are gone within their budget: the
    # graph's state is that of the others, and the rollout says where it stands.
    pods = [p for p in pods if p.phase != "Terminating"]
    if rolling and not [p for p in pods if p.phase == "CrashLoopBackOff"]:
        ready = sum(p.ready for p in pods)
        return GraphState.PROGRESSING, f"rolling out: {'; '.join(rolling)} ({ready}/{len(pods)} pods ready)"
    if not pods:
        return GraphState.PROGRESSING, "no pods requested" if replicas else "starting"
    ready = sum(p.ready for p in pods)
    crashing = [p.name for p in pods if p.phase == "CrashLoopBackOff"]
    frontend = [p for p in pods if p.role == "frontend"]
    serving = any(p.ready for p in frontend)
    if ready == len(pods):
        return GraphState.READY, f"{ready}/{len(pods)} pods ready"
    if crashing:
        state = GraphState.DEGRADED if serving else GraphState.FAILED
        return state, f"{', '.join(crashing)} crash-looping; {ready}/{len(pods)} pods ready"
    # A real engine takes tens of seconds to start: say how far each one is, not that it fails.
    if starting(pods, ready_within):
        return GraphState.PROGRESSING, f"{ready}/{len(pods)} pods ready; {progress(pods, ready_within)}"
    if frontend and all(p.phase == "Running" for p in frontend) and not serving and \
            all(_age(p) > DEFAULT_READY_WITHIN for p in frontend):
        return GraphState.DEGRADED, "frontend serves no model: no worker has registered with it"
    # Pods that have just started and never failed are coming up (a scale-up), not a fault.
    coming = [p for p in pods if not p.ready and p.phase == "Running" and not p.restarts
              and _age(p) <= DEFAULT_READY_WITHIN]
    if serving and len(coming) < len(pods) - ready:
        return GraphState.DEGRADED, f"{ready}/{len(pods)} pods ready"
    return GraphState.PROGRESSING, f"{ready}/{len(pods)} pods ready" + (
        f"; {', '.join(p.name for p in coming)} starting" if coming else "")
