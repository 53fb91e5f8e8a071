"""The one write path for the Planner's decisions and the pools' replica history, whichever
runtime they come from.

* ``decision_record``: a decision as a runtime saw it. The local operator records what the
  virtual connector delivers (source ``virtual-connector``, state ``received``); a cluster
  watcher records the Planner's writes it observes (source ``kubernetes-watch``, state
  ``observed``: the cluster's operator executes those, nothing here does).
* ``decision_advance``: the local runtime's executor. It turns a received decision into
  ordinary scale operations made via ``planner`` (one pool at a time: a graph runs one
  operation at a time), and acknowledges the decision once every pool is ready at its
  decided size.
* ``replicas_observe``: desired and ready replicas per pool, stored only when they change."""

from __future__ import annotations

import datetime as dt
import logging

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from core.errors import OperationRefused

from .models import (
    ACTIVE_STATES,
    DecisionState,
    Deployment,
    Graph,
    Operation,
    OperationState,
    PlannerDecision,
    ReplicaSample,
)
from .status_version import moved

log = logging.getLogger(__name__)

SOURCE_VIRTUAL = "virtual-connector"
SOURCE_KUBERNETES = "kubernetes-watch"
UNFINISHED = (DecisionState.RECEIVED, DecisionState.EXECUTING)


def pools_for(spec, *, prefill: int | None, decode: int | None) -> dict[str, int]:
    """The virtual connector speaks of prefill and decode workers; a graph names its pools.
    An aggregated graph's workers are what 1.6.1 counts as decode (its ``agg`` mode)."""
    out: dict[str, int] = {}
    for service in spec.services:
        count = {"prefill": prefill, "decode": decode, "worker": decode}.get(service.role)
        if count is not None:
            out[service.name] = count
    return out


@transaction.atomic
def decision_record(*, graph: Graph, source: str, desired: dict[str, int], reason: str = "",
                    at: dt.datetime | None = None, decision_id: int | None = None, actor: str = "planner",
                    before: dict[str, int] | None = None, state: str | None = None) -> PlannerDecision:
    """Record one decision. Idempotent: the same (source, decision id, desired) recorded again
    returns the first row, so a bridge or a watch that replays its history adds nothing."""
    if not desired or any(not isinstance(v, int) or v < 0 for v in desired.values()):
        raise ValueError(f"a decision sets whole, non-negative replicas per pool, not {desired!r}")
    if decision_id is not None:
        same = PlannerDecision.objects.filter(graph=graph, source=source, decision_id=decision_id,
                                              desired=desired).first()
        if same is not None:
            return same
    if before is None:
        deployment = Deployment.objects.filter(graph=graph).select_related("revision").first()
        current = deployment.desired_replicas(deployment.revision.graph_spec) if deployment and \
            deployment.revision else {}
        before = {name: current[name] for name in desired if name in current}
    decision = PlannerDecision.objects.create(
        graph=graph, source=source, decision_id=decision_id, at=at or timezone.now(), desired=desired,
        before=before, reason=reason[:500] or describe(before, desired), actor=actor[:200],
        state=state or (DecisionState.OBSERVED if source != SOURCE_VIRTUAL else DecisionState.RECEIVED))
    moved(graph.pk)
    audit_record(actor=None, via="planner", action="planner.decision", target_type="graph", target=graph.name,
                 before=before, after={"desired": desired, "decision": decision.pk, "source": source,
                                       "decision_id": decision_id})
    return decision


def describe(before: dict[str, int], desired: dict[str, int]) -> str:
    parts = [f"{name} {before.get(name, '?')}→{count}" for name, count in desired.items()]
    return ", ".join(parts)


def decision_advance(*, deployment: Deployment, ready: dict[str, int]) -> list[int]:
    """Move this graph's oldest unfinished decision one step. ``ready`` is the number of ready
    pods per pool now. Returns the coordinator ids acknowledged by this call."""
    graph = deployment.graph
    decision = (PlannerDecision.objects.filter(graph=graph, source=SOURCE_VIRTUAL, state__in=UNFINISHED)
                .order_by("at", "id").first())
    if decision is None or deployment.revision is None:
        return []
    if PlannerDecision.objects.filter(graph=graph, source=SOURCE_VIRTUAL, state__in=UNFINISHED,
                                      at__gt=decision.at).exists():
        # The coordinator waits only for its latest decision: go straight to that one (a scale
        # already requested for this one still runs; the newer one sets the pools after it).
        _finish(decision, DecisionState.SUPERSEDED, "a newer decision arrived before this one was done")
        return []
    ops = list(Operation.objects.filter(pk__in=decision.operations))
    failed = [op for op in ops if op.state == OperationState.FAILED]
    if failed:
        _finish(decision, DecisionState.FAILED, f"scale operation #{failed[0].pk} failed: {failed[0].result}")
        return []
    if Operation.objects.filter(graph=graph, state__in=ACTIVE_STATES).exists():
        return []  # ours or someone else's: one operation at a time per graph
    spec = deployment.revision.graph_spec
    current = deployment.desired_replicas(spec)
    for service, count in decision.desired.items():
        if service in current and current[service] != count:
            return _request(decision, service, count)
    if all(ready.get(service, 0) == count for service, count in decision.desired.items() if service in current):
        _finish(decision, DecisionState.ACKNOWLEDGED, "every pool ready at its decided size")
        return [decision.decision_id] if decision.decision_id is not None else []
    return []


def _request(decision: PlannerDecision, service: str, count: int) -> list[int]:
    from . import operations

    try:
        op = operations.graph_scale(graph=decision.graph, service=service, replicas=count, via="planner",
                                      decision=decision.pk)
    except OperationRefused as exc:
        # Another operation got in first (the race the partial unique index settles): next pass.
        log.info("planner decision %s waits: %s", decision.pk, exc)
        return []
    PlannerDecision.objects.filter(pk=decision.pk).update(
        state=DecisionState.EXECUTING, operations=[*decision.operations, op.pk],
        message=f"scale operation #{op.pk}: {service} → {count}")
    moved(decision.graph_id)
    return []


def _finish(decision: PlannerDecision, state: str, message: str) -> None:
    now = timezone.now()
    PlannerDecision.objects.filter(pk=decision.pk).update(
        state=state, message=message[:2000], acknowledged_at=now if state == DecisionState.ACKNOWLEDGED else None)
    moved(decision.graph_id)


def decisions_acknowledged(*, graph: Graph) -> set[int]:
    """Coordinator ids this graph's executor has acknowledged (for the bridge's ack file)."""
    return set(PlannerDecision.objects.filter(graph=graph, source=SOURCE_VIRTUAL, state=DecisionState.ACKNOWLEDGED,
                                              decision_id__isnull=False).values_list("decision_id", flat=True))


def replicas_observe(*, graph: Graph, pools: dict[str, tuple[int, int]], at: dt.datetime | None = None) -> int:
    """Store (desired, ready) per pool where it differs from the last sample. Returns rows written."""
    at = at or timezone.now()
    rows = []
    for service, (desired, ready) in pools.items():
        last = ReplicaSample.objects.filter(graph=graph, service=service).order_by("-at").first()
        if last is None or (last.desired, last.ready) != (desired, ready):
            rows.append(ReplicaSample(graph=graph, service=service, at=at, desired=max(0, desired),
                                      ready=max(0, ready)))
    ReplicaSample.objects.bulk_create(rows)
    return len(rows)
