"""A/B studies on a GPU budget: from one graph, variants of other shapes (aggregated, other
prefill:decode splits) as new graphs, each applied, benchmarked with the same profile and
undeployed again, one after the other (so that on a small host only one variant runs at a
time), then one comparison report (reports.py) and a recommendation (sizing.py). Once the
study ends (succeeded, failed or cancelled) its variants are torn down: each one's deployment
deleted through a normal delete operation, then the graph archived (out of the graph list; its
runs, revisions and operations kept, since the study's results point at them).

``study_advance`` is a step function: it reads what the study recorded for its current arm
(graph created? apply requested? ready? run requested? finished? undeployed?) and does the
next thing. Safe to call any number of times, from a task chain or the periodic sweep (StudyDriver)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import ManifestError, OperationRefused
from graphs import operations, services
from graphs.models import ACTIVE_STATES, Deployment, Graph, GraphState, Operation, OperationState
from graphs.services import GraphConflict
from jobs.registry import Driver

from .errors import BenchmarkRefused
from .models import ACTIVE_STUDY_STATES, BenchmarkRun, RunState, Study, StudyState
from .profiles import ProfileError, RunParams, resolve
from .schema import Arm
from .services import benchmark_cancel, benchmark_request
from .shapes import MAX_ARMS, SHAPE_RE, Shape, parse_shape, same_budget_shapes, shape_of, variant_name, variant_spec
from .targets import objectives_follow

if TYPE_CHECKING:
    from accounts.roles import Actor

log = logging.getLogger(__name__)

READY_TIMEOUT = 300.0  # seconds for a variant to become ready after its apply
UNDEPLOY_TIMEOUT = 120.0
WAIT_SECONDS = 2


def _source(graph: Graph) -> tuple:
    """(spec, replicas, serving) of the graph as deployed, else as its head revision says."""
    dep = Deployment.objects.filter(graph=graph, active=True).select_related("revision").first()
    if dep is not None and dep.revision is not None:
        spec = dep.revision.graph_spec
        return spec, dep.desired_replicas(spec), dep.state == GraphState.READY and bool(dep.endpoint), dep
    if graph.head is None:
        raise BenchmarkRefused(f"{graph.name} has no revision")
    return graph.head.graph_spec, None, False, None


@transaction.atomic
def study_create(*, graph: Graph, profile: str, params: dict | None = None, arms: list[str] | None = None,
                  keep_variants: bool = False, user: Actor = None, via: str = "ui") -> Study:
    """Record an A/B study. ``arms`` are shapes (p1d1, p2d1, agg2); empty: every shape with the
    graph's current GPUs. Raises ProfileError (by field) or BenchmarkRefused."""
    run_params = resolve(profile, params)
    spec, replicas, serving, _dep = _source(graph)
    try:
        shapes = [parse_shape(a) for a in arms] if arms else same_budget_shapes(spec, replicas)
    except ValueError as exc:  # not written as a shape (400), or a pool's count out of bounds (422)
        written = all(SHAPE_RE.match(str(a).strip().lower()) for a in arms or ())
        raise ProfileError({"arms": [str(exc)]}, status=422 if written else 400) from None
    shapes = list(dict.fromkeys(shapes))
    if not 2 <= len(shapes) <= MAX_ARMS:
        raise ProfileError({"arms": [f"a study compares 2 to {MAX_ARMS} different shapes, not {len(shapes)}"]},
                           status=422 if arms else 409)  # the arms asked, or the graph's own shapes
    own = shape_of(spec, replicas) if serving else None
    if not any(spec.pools(role) for role in ("prefill", "decode", "worker")):
        raise BenchmarkRefused(f"{graph.name} has no worker pool to reshape")
    for shape in shapes:
        try:
            variant_spec(spec, name=variant_name(graph.name, 0, shape), shape=shape)
        except (ValueError, ManifestError) as exc:
            raise ProfileError({"arms": [f"{shape}: {exc}"]}) from None
    arm_list = [Arm(shape=str(s), variant=s != own, graph_id=None if s != own else graph.pk,
                    graph_name="" if s != own else graph.name, phase="graph" if s != own else "ready")
                for s in shapes]
    try:
        with transaction.atomic():
            study = Study.objects.create(graph=graph, profile=profile, params=run_params.model_dump(mode="json"),
                                         arms=[a.model_dump(mode="json") for a in arm_list],
                                         keep_variants=keep_variants, via=via,
                                         requested_by=user if user is not None and user.pk else None,
                                         message="waiting for a worker")
    except IntegrityError:
        raise BenchmarkRefused(f"{graph.name} already has an unfinished study; wait for it or cancel it") from None
    StudyDriver.schedule(study.pk, now=True)
    return study


class StudyDriver(Driver):
    """A study's steps, one variant after the other (jobs.registry.Driver): the sweep advances
    every study still running or still tearing its variants down."""

    kind = "study"
    task = "benchmarks.tasks.study_advance"
    step_delay = WAIT_SECONDS

    @classmethod
    def active(cls) -> list[int]:
        return list(Study.objects.filter(Q(state__in=ACTIVE_STUDY_STATES) | Q(teardown_pending=True))
                    .values_list("pk", flat=True))

    @classmethod
    def advance(cls, pk: int) -> str:
        return study_advance(pk)


def study_cancel(*, study: Study, user: Actor = None) -> Study:
    if not study.is_active:
        raise BenchmarkRefused(f"study #{study.pk} already {study.state}")
    Study.objects.filter(pk=study.pk).update(cancel_requested_at=timezone.now())
    study_advance(study.pk)
    study.refresh_from_db()
    return study


def study_advance(study_id: int) -> str:
    with transaction.atomic():
        study = Study.objects.select_for_update(of=("self",)).select_related("graph", "requested_by").get(pk=study_id)
        if not study.settling:
            return study.state
        arms = study.arm_list
        outcome = "done"
        if study.is_active:
            if study.cancel_requested_at is not None:
                outcome = _cancel(study, arms)
            else:
                try:
                    outcome = _step(study, arms)
                except Exception as exc:
                    log.exception("study %s failed", study_id)
                    study.state, study.error = StudyState.FAILED, f"internal error: {exc}"
                    study.finished_at = timezone.now()
                    outcome = "done"
            if study.state == StudyState.PENDING:
                study.state = StudyState.RUNNING
            # Ended, however it ended: what it created goes next, in steps of its own.
            study.teardown_pending = not study.is_active
        if study.teardown_pending:
            try:
                outcome = _teardown(study, arms)
            except Exception:  # a variant left as it is must not fail the study's outcome
                log.exception("teardown of study %s", study_id)
                outcome = "wait"
            study.teardown_pending = outcome != "done"
        study.arms = [a.model_dump(mode="json") for a in arms]
        study.save(update_fields=["state", "arms", "message", "error", "finished_at", "teardown_pending"])
        if outcome != "done":
            StudyDriver.schedule(study_id, now=outcome == "next")
    return study.state


def _current(arms: list[Arm]) -> Arm | None:
    return next((a for a in arms if a.phase not in ("done", "failed")), None)


def _fail_arm(arm: Arm, message: str) -> str:
    arm.phase, arm.message = "failed", message[:1000]
    return "next"


def _step(study: Study, arms: list[Arm]) -> str:
    arm = _current(arms)
    if arm is None:
        measured = BenchmarkRun.objects.filter(study=study, state=RunState.SUCCEEDED).count()
        study.state = StudyState.SUCCEEDED if measured else StudyState.FAILED
        study.message = f"{measured} of {len(arms)} arms measured"
        study.error = "" if measured else "no arm could be measured: " + "; ".join(
            f"{a.shape}: {a.message}" for a in arms)
        study.finished_at = timezone.now()
        return "done"
    study.message = f"{arm.shape}: {arm.phase}"
    if arm.phase == "graph":
        return _create_variant(study, arm)
    graph = Graph.objects.filter(pk=arm.graph_id).first()
    if graph is None:
        return _fail_arm(arm, "its graph was deleted")
    if arm.phase == "apply":
        return _apply(study, arm, graph)
    if arm.phase == "ready":
        return _ready(arm, graph)
    if arm.phase == "run":
        return _run(study, arm, graph)
    return _cleanup(study, arm, graph)


def _create_variant(study: Study, arm: Arm) -> str:
    shape = parse_shape(arm.shape)
    name = variant_name(study.graph.name, study.pk, shape)
    graph = Graph.objects.filter(name=name).first()  # created by an earlier attempt of this step
    if graph is None:
        spec, _replicas, _serving, _dep = _source(study.graph)
        try:
            graph = services.graph_create(
                spec=variant_spec(spec, name=name, shape=shape), user=study.requested_by,
                description=f"A/B variant {shape.label()} of {study.graph.name} (study #{study.pk})",
                message=f"variant {shape} of {study.graph.name}, made by benchmark study #{study.pk}")
        except (ManifestError, GraphConflict, ValueError) as exc:
            return _fail_arm(arm, f"could not create the variant: {exc}")
        objectives_follow(source=study.graph, graph=graph, user=study.requested_by)
    arm.graph_id, arm.graph_name, arm.phase, arm.started_phase_at = graph.pk, graph.name, "apply", time.time()
    return "next"


def _apply(study: Study, arm: Arm, graph: Graph) -> str:
    if arm.apply_op is None:
        if Operation.objects.filter(graph=graph, state__in=ACTIVE_STATES).exists():
            return "wait"
        _spec, _replicas, _serving, source = _source(study.graph)
        target = ({"runtime": source.runtime, "cluster": source.cluster_name, "namespace": source.namespace}
                  if source is not None else {"runtime": "local"})
        try:
            op = operations.graph_apply(graph=graph, user=study.requested_by, via="study", **target)
        except OperationRefused as exc:
            return _fail_arm(arm, f"apply refused: {exc}")
        arm.apply_op, arm.started_phase_at = op.pk, time.time()
        return "wait"
    op = Operation.objects.get(pk=arm.apply_op)
    if op.state == OperationState.FAILED:
        return _fail_arm(arm, f"apply failed: {op.result}")
    if op.state != OperationState.SUCCEEDED:
        return "wait"
    arm.phase, arm.started_phase_at = "ready", time.time()
    return "next"


def _ready(arm: Arm, graph: Graph) -> str:
    dep = Deployment.objects.filter(graph=graph).first()
    if dep is not None and dep.active and dep.state == GraphState.READY and dep.endpoint:
        arm.phase, arm.started_phase_at = "run", time.time()
        return "next"
    if time.time() - (arm.started_phase_at or time.time()) > READY_TIMEOUT:
        state = dep.get_state_display().lower() if dep else "not deployed"
        arm.phase = "cleanup"
        arm.message = f"not ready within {READY_TIMEOUT:g} s ({state}: {dep.message if dep else ''})"[:1000]
        return "next"
    if arm.started_phase_at is None:
        arm.started_phase_at = time.time()
    return "wait"


def _run(study: Study, arm: Arm, graph: Graph) -> str:
    if arm.run_id is None:
        try:
            run = benchmark_request(graph=graph, profile=study.profile, params=RunParams.model_validate(study.params),
                                    user=study.requested_by, via="study", study=study, label=arm.shape)
        except BenchmarkRefused as exc:
            if "another benchmark is active" in str(exc) or "is changing" in str(exc):
                study.message = f"{arm.shape}: waiting: {exc}"[:500]
                return "wait"
            arm.phase, arm.message = "cleanup", f"benchmark refused: {exc}"[:1000]
            return "next"
        arm.run_id = run.pk
        return "wait"
    run = BenchmarkRun.objects.get(pk=arm.run_id)
    if run.is_active:
        study.message = f"{arm.shape}: benchmark #{run.pk} {run.progress}%"
        return "wait"
    if run.state != RunState.SUCCEEDED:
        arm.message = f"benchmark #{run.pk} {run.state}: {run.error.splitlines()[0] if run.error else ''}"[:1000]
    arm.phase, arm.started_phase_at = "cleanup", time.time()
    return "next"


def _cleanup(study: Study, arm: Arm, graph: Graph) -> str:
    if not arm.variant or study.keep_variants:
        arm.phase = "done" if arm.phase != "failed" else arm.phase
        return "next"
    dep = Deployment.objects.filter(graph=graph).first()
    if arm.delete_op is None:
        if dep is None or not dep.active:
            arm.phase = "done"
            return "next"
        if Operation.objects.filter(graph=graph, state__in=ACTIVE_STATES).exists():
            return "wait"
        try:
            arm.delete_op = operations.graph_undeploy(graph=graph, user=study.requested_by, via="study").pk
        except OperationRefused:
            arm.phase = "done"
            return "next"
        arm.started_phase_at = time.time()
        return "wait"
    # Wait for the processes to be gone: the next arm should not share the host with them.
    gone = dep is None or dep.state == GraphState.NOT_DEPLOYED
    if gone or time.time() - (arm.started_phase_at or 0) > UNDEPLOY_TIMEOUT:
        arm.phase = "done"
        return "next"
    return "wait"


def _cancel(study: Study, arms: list[Arm]) -> str:
    for arm in arms:
        if arm.run_id:
            run = BenchmarkRun.objects.filter(pk=arm.run_id).first()
            if run is not None and run.is_active:
                with contextlib.suppress(BenchmarkRefused):
                    benchmark_cancel(run=run, user=study.requested_by)
        if arm.phase not in ("done", "failed"):
            arm.phase, arm.message = "failed", "cancelled"
    study.state, study.finished_at, study.message = StudyState.CANCELLED, timezone.now(), "cancelled"
    return "done"


def _teardown(study: Study, arms: list[Arm]) -> str:
    """After the study ended: each variant's deployment deleted through a normal delete
    operation (one still applying is waited for), then the graph archived, so that it leaves the
    graph list while its runs, revisions and operations stay readable. "wait" while a delete
    is under way; "done" once every variant is archived, kept (keep_variants) or failed."""
    waiting = False
    for arm in arms:
        if not arm.variant or arm.graph_id is None or arm.teardown in ("archived", "kept", "failed"):
            continue
        graph = Graph.objects.filter(pk=arm.graph_id).first()
        if graph is None:
            arm.teardown, arm.teardown_message = "failed", "its graph was deleted"
        elif study.keep_variants:
            arm.teardown, arm.teardown_message = "kept", "left deployed, as the study asked"
        elif Operation.objects.filter(graph=graph, state__in=ACTIVE_STATES).exists():
            arm.teardown, waiting = "deleting", True  # our delete, or an apply to wait for
        elif (dep := Deployment.objects.filter(graph=graph).first()) is not None and dep.active:
            last = Operation.objects.filter(pk=arm.delete_op).first() if arm.teardown == "deleting" else None
            if last is not None and last.state == OperationState.FAILED:
                arm.teardown = "failed"
                arm.teardown_message = (f"its delete (operation #{last.pk}) failed: {last.result}; "
                                        "it stays deployed and listed")[:1000]
                continue
            try:
                arm.delete_op = operations.graph_undeploy(graph=graph, user=study.requested_by, via="study").pk
            except OperationRefused as exc:
                arm.teardown, arm.teardown_message = "failed", f"its delete was refused: {exc}"[:1000]
                continue
            arm.teardown, waiting = "deleting", True
        else:
            services.graph_archive(graph=graph, user=study.requested_by, via="study",
                                   note=f"A/B variant {arm.shape} of {study.graph.name}, torn down when "
                                        f"study #{study.pk} {study.state}")
            arm.teardown = "archived"
            arm.teardown_message = (f"deployment deleted by operation #{arm.delete_op}; graph archived"
                                    if arm.delete_op else "never deployed; graph archived")
    return "wait" if waiting else "done"


def study_shapes(study: Study) -> list[Shape]:
    return [parse_shape(a.shape) for a in study.arm_list]
