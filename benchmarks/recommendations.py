"""Replica recommendations from latency targets and measured runs, and applying them.

The rule is disaggregation's own: time to first token is made by prefill, inter-token latency
by decode; raise prefill replicas when TTFT is too high, decode replicas when ITL is. Here it
is applied to evidence: every successful run of the graph and of its A/B variants under the
same load, judged at p90 (at a sweep's highest load):

1. Among the measured shapes that met every target, recommend the one with the fewest GPUs
   (then the most throughput): measured, not extrapolated.
2. When none did, start from the graph's own shape as measured (else the nearest miss) and
   scale the pool behind each missed target in proportion to the overshoot, past every
   measured count that also missed it: an estimate, to be measured again.

``recommend`` is pure. Applying is one normal scale operation per pool that changes, one
after the other (a graph runs one operation at a time), driven by ``recommendation_advance``."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import OperationRefused
from core.spec import MAX_REPLICAS
from graphs import operations
from graphs.engines import MOCKER_LABEL
from graphs.models import Deployment, Graph, Operation, OperationState
from jobs.registry import Driver

from .errors import BenchmarkRefused
from .models import BenchmarkRun, Recommendation, RecommendationState, RunState
from .profiles import ProfileError
from .shapes import Shape, shape_of
from .targets import slo_targets

if TYPE_CHECKING:
    from accounts.roles import Actor

MAX_STEP_FACTOR = 4  # one recommendation at most quadruples a pool: beyond, measure first


class NoEvidence(ValueError):
    pass


@dataclass(frozen=True)
class Observation:
    """What one run measured, as sizing needs it."""

    run_id: int
    shape: Shape
    gpus: int
    ttft_p90: float | None
    itl_p90: float | None
    throughput: float | None = None  # output tokens/s
    label: str = ""
    # No worker asks a GPU (the mocker): ``gpus`` is then a count of worker replicas, compared
    # like GPUs but never called GPUs.
    gpu_free: bool = False


@dataclass
class Advice:
    shape: Shape
    met: bool  # a measured run with this shape met every target
    reasons: list[str] = field(default_factory=list)
    evidence: list[int] = field(default_factory=list)  # run ids


def _ms(value: float | None) -> str:
    return "—" if value is None else (f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms" if value >= 10
                                      else f"{value:.2f} ms")


def _misses(o: Observation, ttft_ms: float | None, itl_ms: float | None) -> tuple[bool, bool]:
    return (ttft_ms is not None and (o.ttft_p90 is None or o.ttft_p90 > ttft_ms),
            itl_ms is not None and (o.itl_p90 is None or o.itl_p90 > itl_ms))


def _verdict(o: Observation, ttft_ms: float | None, itl_ms: float | None) -> str:
    parts = []
    for name, value, target in (("TTFT", o.ttft_p90, ttft_ms), ("ITL", o.itl_p90, itl_ms)):
        if target is not None:
            sign = "≤" if value is not None and value <= target else ">"
            parts.append(f"{name} p90 {_ms(value)} {sign} {target:g} ms")
    return ", ".join(parts)


def _name(o: Observation) -> str:
    if o.gpu_free:
        return f"run #{o.run_id} ({o.shape.label()}, no GPU)"
    return f"run #{o.run_id} ({o.shape.label()}, {o.gpus} GPU{'s' if o.gpus != 1 else ''})"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def recommend(observations: list[Observation], *, current: Shape, ttft_ms: float | None,
              itl_ms: float | None) -> Advice:
    """Replicas for a graph now shaped ``current``, from runs measured under one load."""
    if ttft_ms is None and itl_ms is None:
        raise ValueError("no TTFT or ITL target: set the graph's objectives, or pass targets")
    same_kind = [o for o in observations if o.shape.aggregated == current.aggregated]
    other_kind = [o for o in observations if o.shape.aggregated != current.aggregated]
    if not same_kind:
        kind = "aggregated" if current.aggregated else "disaggregated"
        raise NoEvidence(f"no successful benchmark of a {kind} shape of this graph under this load: run one first")
    reasons: list[str] = []
    passing = [o for o in same_kind if not any(_misses(o, ttft_ms, itl_ms))]
    failing = [o for o in same_kind if o not in passing]
    evidence = [o.run_id for o in same_kind]
    if passing:
        best = min(passing, key=lambda o: (o.gpus, -(o.throughput or 0), -o.run_id))
        reasons.append(f"{_cap(_name(best))} met every target: {_verdict(best, ttft_ms, itl_ms)}.")
        others = [o for o in passing if o is not best]
        if others:
            reasons.append(("Also met them, with as many workers or more: " if best.gpu_free else
                            "Also met them, with as many GPUs or more: ") +
                           "; ".join(f"{_name(o)}" for o in others) + ".")
        for o in failing:
            reasons.append(f"{_cap(_name(o))} missed: {_verdict(o, ttft_ms, itl_ms)}.")
        reasons.append("Keep the current shape." if best.shape == current else
                       f"Recommended: {best.shape.label()}, the smallest measured shape that met the targets.")
        shape, met = best.shape, True
    else:
        shape = _extrapolate(same_kind, current, ttft_ms, itl_ms, reasons)
        met = False
    cheaper = [o for o in other_kind if not any(_misses(o, ttft_ms, itl_ms))]
    if cheaper:
        o = min(cheaper, key=lambda o: (o.gpus, o.run_id))
        kind = "aggregated" if o.shape.aggregated else "disaggregated"
        reasons.append(f"Note: the {kind} {_name(o)} also met the targets ({_verdict(o, ttft_ms, itl_ms)}); "
                       "switching to it is an apply of that variant, not a scale.")
        evidence.append(o.run_id)
    return Advice(shape=shape, met=met, reasons=reasons, evidence=evidence)


def _extrapolate(runs: list[Observation], current: Shape, ttft_ms: float | None, itl_ms: float | None,
                 reasons: list[str]) -> Shape:
    own = [o for o in runs if o.shape == current]

    def overshoot(o: Observation) -> float:
        ratios = [v / t for v, t in ((o.ttft_p90, ttft_ms), (o.itl_p90, itl_ms)) if t is not None and v is not None]
        return max(ratios, default=math.inf)

    base = max(own, key=lambda o: o.run_id) if own else min(runs, key=lambda o: (overshoot(o), -o.run_id))
    reasons.append(f"No measured shape met every target. Starting from {_name(base)}: "
                   f"{_verdict(base, ttft_ms, itl_ms)}.")
    ttft_miss, itl_miss = _misses(base, ttft_ms, itl_ms)

    def grow(count: int, value: float | None, target: float, missed_counts: list[int]) -> int:
        ratio = (value or target * 2) / target
        wanted = max(math.ceil(count * ratio), count + 1, max(missed_counts, default=0) + 1)
        return min(wanted, count * MAX_STEP_FACTOR, MAX_REPLICAS)

    if current.aggregated:
        workers = base.shape.workers
        if ttft_miss or itl_miss:
            worst = max(overshoot(base), 1.0)
            missed = [o.shape.workers for o in runs if any(_misses(o, ttft_ms, itl_ms))]
            workers = grow(base.shape.workers, worst, 1.0, missed)
            reasons.append(f"Aggregated workers do prefill and decode alike: workers {base.shape.workers} → "
                           f"{workers}, in proportion to the larger overshoot ({worst:.2f}x).")
        return Shape(workers=workers)
    prefill, decode = base.shape.prefill, base.shape.decode
    if ttft_miss:
        missed = [o.shape.prefill for o in runs if _misses(o, ttft_ms, itl_ms)[0]]
        prefill = grow(base.shape.prefill, base.ttft_p90, ttft_ms, missed)
        reasons.append(f"TTFT is made by prefill: prefill {base.shape.prefill} → {prefill}, in proportion to the "
                       f"TTFT overshoot ({(base.ttft_p90 or 0) / ttft_ms:.2f}x) and past every measured prefill "
                       "count that missed it.")
        reasons += _sensitivity(runs, "prefill", "decode", "ttft_p90", "TTFT")
    if itl_miss:
        missed = [o.shape.decode for o in runs if _misses(o, ttft_ms, itl_ms)[1]]
        decode = grow(base.shape.decode, base.itl_p90, itl_ms, missed)
        reasons.append(f"ITL is made by decode: decode {base.shape.decode} → {decode}, in proportion to the "
                       f"ITL overshoot ({(base.itl_p90 or 0) / itl_ms:.2f}x) and past every measured decode count "
                       "that missed it.")
        reasons += _sensitivity(runs, "decode", "prefill", "itl_p90", "ITL")
    reasons.append("This is an estimate beyond the measured shapes: benchmark again after applying it.")
    return Shape(prefill=prefill, decode=decode)


def _sensitivity(runs: list[Observation], pool: str, other: str, metric: str, name: str) -> list[str]:
    """Say so when the data show that more of ``pool`` did not help ``metric``."""
    out = []
    for a in runs:
        for b in runs:
            more = getattr(b.shape, pool) > getattr(a.shape, pool)
            if more and getattr(a.shape, other) == getattr(b.shape, other):
                va, vb = getattr(a, metric), getattr(b, metric)
                if va is not None and vb is not None and vb > 0.9 * va:
                    out.append(f"Caution: more {pool} did not lower {name} here ({_name(a)}: {_ms(va)}; "
                               f"{_name(b)}: {_ms(vb)}): the bottleneck may be elsewhere (frontend, KV transfer, "
                               "or the load itself).")
                    return out
    return out


# --- evidence and the stored recommendation ------------------------------------------------------

def load_key(params: dict) -> str:
    """Runs are comparable when they put the same load: same parameters but seed and bound."""
    return json.dumps({k: v for k, v in params.items() if k not in ("seed", "max_seconds")}, sort_keys=True)


def evidence_runs(graph: Graph, run_ids: list[int] | None = None) -> list[BenchmarkRun]:
    """Successful runs of the graph and of its A/B variants: the given ones, or every run
    under the load of the most recent one."""
    runs = list(BenchmarkRun.objects.filter(state=RunState.SUCCEEDED).filter(
        Q(graph=graph) | Q(study__graph=graph)).select_related("graph").order_by("-finished_at", "-id")[:500])
    if run_ids:
        wanted = set(run_ids)
        chosen = [r for r in runs if r.pk in wanted]
        missing = wanted - {r.pk for r in chosen}
        if missing:
            raise ProfileError({"runs": [f"not a successful run of {graph.name} or of its variants: "
                                         f"{', '.join(map(str, sorted(missing)))}"]})
        return chosen
    if not runs:
        return []
    key = load_key(runs[0].params)
    return [r for r in runs if load_key(r.params) == key]


def observation(run: BenchmarkRun) -> Observation | None:
    step = run.run_results.headline
    config = run.run_config
    if step is None:
        return None
    shape = Shape(workers=config.worker) if config.worker else Shape(prefill=config.prefill, decode=config.decode)
    return Observation(run_id=run.pk, shape=shape, gpus=config.gpus, ttft_p90=step.ttft.p90, itl_p90=step.itl.p90,
                       throughput=step.output_token_throughput, label=run.label, gpu_free=config.gpu_free)


@transaction.atomic
def recommendation_create(*, graph: Graph, user: Actor = None, via: str = "ui", ttft_ms: float | None = None,
                          itl_ms: float | None = None, run_ids: list[int] | None = None) -> Recommendation:
    """Recommend replicas for a deployed graph. Targets: the ones given, else its objectives.
    Raises ProfileError (no targets, unknown runs) or BenchmarkRefused."""
    dep = Deployment.objects.filter(graph=graph, active=True).select_related("revision").first()
    if dep is None or dep.revision is None:
        raise BenchmarkRefused(f"{graph.name} is not deployed: a recommendation scales a running graph")
    given = ttft_ms is not None or itl_ms is not None
    targets = {"ttft_ms": ttft_ms, "itl_ms": itl_ms} if given else slo_targets(graph)
    if not any(v is not None for v in targets.values()):
        raise ProfileError({"ttft_ms": [f"{graph.name} has no TTFT or ITL target: set its objectives on the "
                                        "metrics page, or pass ttft_ms / itl_ms"]}, status=409)
    spec = dep.revision.graph_spec
    current_replicas = dep.desired_replicas(spec)
    current = shape_of(spec, current_replicas)
    pools = {role: spec.pools(role) for role in ("prefill", "decode", "worker")}
    if any(len(p) > 1 for p in pools.values()):
        raise BenchmarkRefused(f"{graph.name} has more than one pool of a role: scale its pools by hand")
    runs = evidence_runs(graph, run_ids)
    observations = [o for o in map(observation, runs) if o is not None]
    try:
        advice = recommend(observations, current=current, ttft_ms=targets.get("ttft_ms"),
                           itl_ms=targets.get("itl_ms"))
    except NoEvidence as exc:
        raise BenchmarkRefused(str(exc)) from None
    simulated = [r for r in runs if r.pk in set(advice.evidence) and r.run_config.simulated]
    if simulated:
        # A recommendation is a number derived from the runs: it carries their label.
        advice.reasons.insert(0, f"Evidence {' '.join(f'#{r.pk}' for r in simulated)} was {MOCKER_LABEL}, not a "
                                 "real engine: these replica counts follow the mocker's timing model. Benchmark "
                                 "the real engine before relying on them.")
    shape = advice.shape
    wanted = ({pools["worker"][0].name: shape.workers} if shape.aggregated else
              {pools["prefill"][0].name: shape.prefill, pools["decode"][0].name: shape.decode})
    rec = Recommendation.objects.create(
        graph=graph, ttft_ms=targets.get("ttft_ms"), itl_ms=targets.get("itl_ms"),
        targets_from="request" if given else "objectives", current={k: current_replicas.get(k, 0) for k in wanted},
        recommended=wanted, shape=str(shape), met=advice.met, reasons=advice.reasons,
        created_by=user if user is not None and user.pk else None, via=via)
    rec.runs.set([r for r in runs if r.pk in set(advice.evidence)] or runs)
    return rec


class RecommendationDriver(Driver):
    """A recommendation applied one scale operation after the other (jobs.registry.Driver): the
    sweep advances every one still applying."""

    kind = "recommendation"
    task = "benchmarks.tasks.recommendation_advance"
    step_delay = 2.0

    @classmethod
    def active(cls) -> list[int]:
        return list(Recommendation.objects.filter(state=RecommendationState.APPLYING).values_list("pk", flat=True))

    @classmethod
    def advance(cls, pk: int) -> str:
        return recommendation_advance(pk)


@transaction.atomic
def recommendation_apply(*, recommendation: Recommendation, user: Actor = None, via: str = "ui") -> Recommendation:
    """Apply a recommendation: one scale operation per pool that changes."""
    locked = Recommendation.objects.select_for_update().get(pk=recommendation.pk)
    if locked.state not in (RecommendationState.PROPOSED, RecommendationState.FAILED):
        raise BenchmarkRefused(f"recommendation #{locked.pk} is already {locked.state}")
    newer = Recommendation.objects.filter(graph_id=locked.graph_id, pk__gt=locked.pk).exists()
    if newer:
        raise BenchmarkRefused(f"recommendation #{locked.pk} has been superseded by a newer one for this graph")
    Recommendation.objects.filter(pk=locked.pk).update(
        state=RecommendationState.APPLYING, applied_by=user if user is not None and user.pk else None,
        applied_at=timezone.now(), via=via, result="")
    _advance(locked.pk)
    recommendation.refresh_from_db()
    return recommendation


def recommendation_advance(rec_id: int) -> str:
    with transaction.atomic():
        return _advance(rec_id)


def _advance(rec_id: int) -> str:
    rec = Recommendation.objects.select_for_update(of=("self",)).select_related("graph", "applied_by").get(pk=rec_id)
    if rec.state != RecommendationState.APPLYING:
        return rec.state

    def finish(state: str, result: str) -> str:
        Recommendation.objects.filter(pk=rec_id).update(state=state, result=result[:2000])
        return state

    if rec.operations:
        op = Operation.objects.filter(pk=rec.operations[-1]).first()
        if op is not None and op.is_active:
            RecommendationDriver.schedule(rec_id, now=False)
            return rec.state
        if op is None or op.state == OperationState.FAILED:
            return finish(RecommendationState.FAILED, f"scale operation #{rec.operations[-1]} failed: "
                                                      f"{op.result if op else 'gone'}")
    dep = Deployment.objects.filter(graph=rec.graph, active=True).select_related("revision").first()
    if dep is None or dep.revision is None:
        return finish(RecommendationState.FAILED, f"{rec.graph.name} is no longer deployed")
    current = dep.desired_replicas(dep.revision.graph_spec)
    todo = [(svc, n) for svc, n in rec.recommended.items() if current.get(svc) != n]
    # Prefill pools first, then decode: a JSON column does not keep key order (PostgreSQL's
    # jsonb sorts keys), so the order comes from the spec's roles.
    roles = {s.name: s.role for s in dep.revision.graph_spec.services}
    todo.sort(key=lambda item: ({"prefill": 0, "decode": 1}.get(roles.get(item[0], ""), 2), item[0]))
    if not todo:
        done = ", ".join(f"{svc} {rec.current.get(svc, '?')} → {n}" for svc, n in rec.recommended.items())
        return finish(RecommendationState.APPLIED, f"applied: {done}")
    service, replicas = todo[0]
    try:
        op = operations.graph_scale(graph=rec.graph, service=service, replicas=int(replicas),
                                      user=rec.applied_by, via=rec.via)
    except OperationRefused as exc:
        if "already has" in str(exc):  # another operation of the graph runs: wait for it
            RecommendationDriver.schedule(rec_id, now=False)
            return rec.state
        return finish(RecommendationState.FAILED, str(exc))
    Recommendation.objects.filter(pk=rec_id).update(operations=[*rec.operations, op.pk])
    RecommendationDriver.schedule(rec_id, now=True)
    return rec.state
