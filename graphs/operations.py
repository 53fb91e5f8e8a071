"""Apply, scale and delete as Operations: one row per request, run by a Celery task.

State machine (OperationState): pending → running → succeeded | failed.

* ``graph_apply``, ``graph_scale`` and ``graph_undeploy`` record a pending row (refused with
  OperationRefused while another operation of the same graph is unfinished: a partial unique
  index makes that race-proof) and enqueue ``operation_run`` after commit.
* ``operation_run`` hands the row to OperationRunner (the one job runner, jobs/runner.py):
  claim, heartbeat, work with no transaction open, then record the outcome.
* the sweep of every job kind (jobs/registry.py, every 5 s) sends again what no worker picked
  up (its broker message was lost, or its worker died: the lease expired) and fails what was
  retried too often (``OperationRunner.lost``): no operation stays pending or running forever."""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from audit.services import audit_record
from core.dgd.render import normalise_api_version, render
from core.errors import Missing, OperationRefused, RuntimeFailure
from core.findings import Severity
from core.spec import MAX_REPLICAS, WORKER_ROLES
from core.validation import validate_spec
from jobs.dispatch import enqueue
from jobs.runner import JobRunner

from .engines import graph_simulation
from .models import (
    ACTIVE_STATES,
    Deployment,
    Event,
    Graph,
    GraphState,
    Operation,
    OperationKind,
    OperationState,
    Pod,
)
from .runtimes.base import POD_SHOWN
from .runtimes.registry import DEFAULT_KIND, get_runtime, on_cluster, target_for
from .status_version import moved

if TYPE_CHECKING:
    from accounts.roles import Actor

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
# A pending row older than this has most likely lost its broker message (a broker restarted
# with its queue lost): the sweep sends it again; a duplicate message finds it claimed.
STALE_PENDING = dt.timedelta(seconds=10)
RUN_TASK = "graphs.tasks.operation_run"
# What a runtime changes on the Deployment row it is handed; the operation's commit saves it.
DESIRED_FIELDS = ["runtime", "cluster", "namespace", "api_version", "revision", "manifest", "replicas", "active",
                  "generation", "state", "message"]


def _enqueue(op: Operation) -> None:
    enqueue(RUN_TASK, op.pk)


def _record(*, graph: Graph, kind: str, user, via: str, **fields) -> Operation:
    active = Operation.objects.filter(graph=graph, state__in=ACTIVE_STATES).first()
    if active is not None:
        raise OperationRefused(
            f"{graph.name} already has a {active.get_state_display().lower()} {active.kind} operation (#{active.pk}); "
            "wait for it to finish"
        )
    try:
        with transaction.atomic():
            op = Operation.objects.create(graph=graph, kind=kind, requested_by=user if user and user.pk else None,
                                          via=via, **fields)
            moved(graph.pk)
    except IntegrityError:
        raise OperationRefused(f"{graph.name} already has an unfinished operation; wait for it to finish") from None
    audit_record(actor=op.requested_by, via=via, action=f"operation.{kind}", target_type="graph", target=graph.name,
                 before=op.before, after={**op.after, "operation": op.pk, "params": op.params})
    _enqueue(op)
    return op


@transaction.atomic
def graph_apply(*, graph: Graph, user: Actor = None, via: str = "ui", runtime: str = DEFAULT_KIND,
                  revision_number: int | None = None, api_version: str | None = None,
                  dry_run: bool = False, cluster: str = "", namespace: str = "", force: bool = False,
                  recreate: bool = False, confirm: str = "") -> Operation:
    """``force``: take fields other field managers own on the cluster (the result names each);
    ``recreate``: delete and recreate the DGD when the revision adds or removes components,
    which the Dynamo operator refuses on an update; ``confirm`` must then be the graph's name."""
    if graph.archived_at is not None:
        raise OperationRefused(f"{graph.name} is archived ({graph.archived_note or 'kept as a record'}) and cannot be "
                               "applied again; create a graph from its revision to run it")
    revision = graph.head if revision_number is None else graph.revisions.filter(number=revision_number).first()
    if revision is None:
        raise OperationRefused(f"{graph.name} has no revision {revision_number}")
    # None: the revision's own version (the one it was imported in, or its release's).
    api_version = normalise_api_version(api_version) if api_version else revision.api_version
    report = validate_spec(revision.graph_spec, api_version=api_version)
    errors = [f for f in report.findings if f.severity == Severity.ERROR]
    if errors:
        listed = "; ".join(f"{f.path}: {f.message}" for f in errors[:5])
        raise OperationRefused(f"revision {revision.number} has {len(errors)} error(s) and cannot be applied: {listed}")
    deployment = Deployment.objects.filter(graph=graph).first()
    if deployment and deployment.active and deployment.runtime != runtime:
        raise OperationRefused(f"{graph.name} runs on the {deployment.runtime} runtime; delete it there first")
    where = get_runtime(runtime).admit_apply(graph=graph, deployment=deployment, revision=revision, cluster=cluster,
                                             namespace=namespace, dry_run=dry_run, force=force, recreate=recreate,
                                             confirm=confirm)
    return _record(graph=graph, kind=OperationKind.APPLY, user=user, via=via, revision=revision,
                   params={"runtime": runtime, "apiVersion": api_version, "dryRun": dry_run, **where},
                   before={"revision": deployment.revision.number if deployment and deployment.revision else None},
                   after={"revision": revision.number})


@transaction.atomic
def graph_scale(*, graph: Graph, service: str, replicas: int, user: Actor = None, via: str = "ui",
                  force: bool = False, decision: int | None = None) -> Operation:
    """``decision``: the PlannerDecision this scale executes (via planner)."""
    if not isinstance(replicas, int) or replicas < 0 or replicas > MAX_REPLICAS:
        raise OperationRefused(f"replicas must be a whole number from 0 to {MAX_REPLICAS}, not {replicas!r}")
    deployment = Deployment.objects.filter(graph=graph, active=True).first()
    if deployment is None or deployment.revision is None:
        raise OperationRefused(f"{graph.name} is not deployed: apply it first")
    spec = deployment.revision.graph_spec
    names = [s.name for s in spec.services]
    if service not in names:
        raise OperationRefused(f"{graph.name} has no service {service!r}; it has {', '.join(names)}")
    current = deployment.desired_replicas(spec)[service]
    planner = next((s.name for s in spec.services if s.role == "planner"), None)
    # The Planner's own decisions come through here too (via="planner"); anyone else's scale of
    # a pool it manages would be undone by its next decision, on either runtime.
    if planner and via != "planner" and spec.service(service).role in WORKER_ROLES and not force:
        raise OperationRefused(f"{service} is managed by Dynamo's Planner ({planner}), which will set its replicas "
                               "again on its next decision: scale anyway with force, or change the planner's bounds",
                               forceable=True)
    get_runtime(deployment.runtime).admit_scale(graph=graph, deployment=deployment, spec=spec, service=service,
                                                replicas=replicas)
    return _record(graph=graph, kind=OperationKind.SCALE, user=user, via=via, revision=deployment.revision,
                   params={"service": service, "replicas": replicas, **({"force": True} if force else {}),
                           **({"decision": decision} if decision is not None else {})},
                   before={"service": service, "replicas": current},
                   after={"service": service, "replicas": replicas})


@transaction.atomic
def graph_undeploy(*, graph: Graph, user: Actor = None, via: str = "ui") -> Operation:
    deployment = Deployment.objects.filter(graph=graph).first()
    if deployment is None or not deployment.active:
        raise OperationRefused(f"{graph.name} is not deployed")
    return _record(graph=graph, kind=OperationKind.DELETE, user=user, via=via, revision=deployment.revision,
                   params={"runtime": deployment.runtime},
                   before={"revision": deployment.revision.number if deployment.revision else None}, after={})


class OperationRunner(JobRunner):
    """Runs one operation (jobs.runner): the claim takes a pending row, or a running one whose
    lease expired (its worker died), up to MAX_ATTEMPTS. The work computes the desired state on
    an unlocked copy of the graph's Deployment row, talking to the cluster where the runtime is
    Kubernetes, with no transaction open; the commit writes that state, and the event, under
    the row locks in the transaction that finishes the operation, after checking this attempt
    still holds it. Local-runtime work is only that database write, so it happens exactly once;
    cluster work is server-side apply, which is idempotent, so a re-run changes nothing."""

    kind = "operation"
    model = Operation
    task = RUN_TASK
    max_attempts = MAX_ATTEMPTS
    message_field = "result"
    failures = (OperationRefused, RuntimeFailure)
    stale_pending = STALE_PENDING

    @classmethod
    def lease_seconds(cls) -> float:
        return settings.OPERATION_LEASE_SECONDS

    @classmethod
    def claimable(cls) -> Q:
        return Q(state=OperationState.PENDING) | Q(state=OperationState.RUNNING, lease_until__lt=timezone.now())

    def __init__(self, pk: int, attempt: int):
        super().__init__(pk, attempt)
        self.deployment: Deployment | None = None
        self.generation = 0  # the row's generation when read: commit adds only this run's bumps
        self.event: tuple[str, str, str] | None = None
        # The runtime took a change: its desired state is recorded even when the operation then
        # fails (a scale the runtime did not run in time still asks for it there).
        self.changed = False
        self.published = False  # the desired state is on the row already (publish)

    def transient(self, exc: BaseException) -> bool:
        return isinstance(exc, RuntimeFailure) and exc.transient

    @classmethod
    def failure_fields(cls, message: str) -> dict:
        return {"result": message[:10000]}

    @classmethod
    def lost(cls, job: Operation) -> str:
        """A job whose worker died is tried again up to MAX_ATTEMPTS."""
        if job.attempts >= MAX_ATTEMPTS:
            return cls.fail(job, (job.result + "\n" if job.result else "")
                            + f"gave up after {job.attempts} attempts (worker lost)")
        return cls.send(job)

    def work(self) -> dict:
        if settings.OPERATION_FAULT_DELAY:  # fault tests kill workers here: claimed, nothing done yet
            time.sleep(settings.OPERATION_FAULT_DELAY)
        op = Operation.objects.select_related("graph", "revision").get(pk=self.pk)
        result, diff = _execute_apply(self, op) if op.kind == OperationKind.APPLY else _execute_change(self, op)
        return {"result": result[:10000], "diff": diff[:100000]}

    def publish(self) -> None:
        """Write the desired state now, before the operation ends: a runtime whose operator reads
        it from the Deployment row (the local one) can then be waited on, as a cluster is after
        its patch. The commit that ends the operation adds only its event."""
        with transaction.atomic():
            self._save_desired()
        self.generation, self.changed, self.published = self.deployment.generation, True, True
        moved(self.deployment.graph_id)

    def commit(self, state: str, fields: dict) -> None:
        if (state != OperationState.SUCCEEDED and not self.changed) or self.deployment is None:
            return
        if not self.published:
            self._save_desired()
        if self.event:  # the graph's status version moves with the row's end (Job.finish: Operation.moved)
            _event(self.deployment.graph, *self.event)

    def _save_desired(self) -> None:
        locked = Deployment.objects.select_for_update().get(pk=self.deployment.pk)
        self.deployment.generation = locked.generation + (self.deployment.generation - self.generation)
        self.deployment.save(update_fields=DESIRED_FIELDS)


def operation_run(op_id: int) -> str:
    """Run one operation (OperationRunner). Safe to call any number of times, from any number
    of workers."""
    return OperationRunner.handle(op_id)


def _read_deployment(runner: OperationRunner, graph: Graph, deployment: Deployment) -> Deployment:
    runner.deployment, runner.generation = deployment, deployment.generation
    deployment.graph = graph
    return deployment


def _execute_change(runner: OperationRunner, op: Operation) -> tuple[str, str]:
    graph = op.graph
    deployment = Deployment.objects.filter(graph=graph).select_related("revision", "cluster").first()
    if deployment is None or deployment.revision is None:
        raise RuntimeFailure(f"{graph.name} is not deployed")
    _read_deployment(runner, graph, deployment)
    spec = deployment.revision.graph_spec
    runtime = get_runtime(deployment.runtime)
    target = target_for(deployment)
    if op.kind == OperationKind.SCALE:
        service, replicas = op.params["service"], int(op.params["replicas"])
        runtime.scale(target=target, spec=spec, service=service, replicas=replicas, deployment=deployment)
        runner.event = ("Scaled", service, f"{service} scaled from {op.before.get('replicas')} to {replicas} replicas")
        text = f"{service}: {op.before.get('replicas')} → {replicas} replicas"
        if settings.OPERATION_OBSERVE_SECONDS <= 0:  # 0: nothing observes (no local operator)
            return text, ""
        return runtime.settle_scale(runner, target=target, spec=spec, deployment=deployment, service=service,
                                    replicas=replicas, before=int(op.before.get("replicas") or 0), text=text), ""
    runtime.delete(target=target, spec=spec, deployment=deployment)
    runner.event = ("Deleted", graph.name, "delete requested: stopping every pod")
    return "delete requested", ""


def _execute_apply(runner: OperationRunner, op: Operation) -> tuple[str, str]:
    graph, revision = op.graph, op.revision
    spec = revision.graph_spec
    api_version = op.params.get("apiVersion", "nvidia.com/v1beta1")
    manifest = render(spec, api_version)
    runtime = get_runtime(op.params.get("runtime", DEFAULT_KIND))
    with transaction.atomic():  # the row the outcome is written to; short, before any cluster call
        deployment, created = Deployment.objects.get_or_create(
            graph=graph, defaults={"runtime": runtime.kind, "api_version": api_version})
        if created:
            moved(graph.pk)
    _read_deployment(runner, graph, deployment)
    target, options = runtime.apply_target(deployment, op.params)
    result = runtime.apply(target=target, spec=spec, manifest=manifest, dry_run=bool(op.params.get("dryRun")),
                           deployment=deployment, revision=revision, **options)
    if op.params.get("dryRun"):
        runner.deployment = None  # a preview records nothing on the deployment
        text = "dry run: no change" if not result.changed else "dry run: would change the live graph"
        return "; ".join([text, *result.warnings]), result.diff
    runner.event = ("Applied", graph.name, f"revision {revision.number} applied to the {runtime.kind} runtime")
    text = f"revision {revision.number} applied" if result.changed else "no change"
    return "; ".join([text, *result.warnings]), result.diff


def _event(graph: Graph, reason: str, obj: str, message: str, type_: str = "Normal") -> None:
    Event.objects.create(graph=graph, at=timezone.now(), type=type_, reason=reason, object=obj, message=message)


def status_snapshot(graph: Graph) -> dict:
    """What pages and the API show: read from the status cache only."""
    deployment = Deployment.objects.filter(graph=graph).select_related("revision", "cluster").first()
    pods = list(Pod.objects.filter(deployment=deployment)) if deployment else []
    events = list(Event.objects.filter(graph=graph)[:30])
    now = timezone.now()
    spec = deployment.revision.graph_spec if deployment and deployment.active and deployment.revision else None
    simulation = graph_simulation(spec, deployment.runtime) if spec else None
    return {
        "graph": graph.name,
        # Which services run Dynamo's mocker instead of their engine, and why (None: none do).
        "simulation": simulation.as_dict() if simulation else None,
        "deployed": bool(deployment and deployment.active),
        "runtime": deployment.runtime if deployment else None,
        "cluster": deployment.cluster_name if deployment else "",
        "namespace": deployment.namespace if deployment else "",
        "revision": deployment.revision.number if deployment and deployment.revision else None,
        "state": deployment.state if deployment else GraphState.NOT_DEPLOYED,
        "message": deployment.message if deployment else "",
        "endpoint": deployment.endpoint if deployment else "",
        # Local graphs: the Dynamo namespace, discovery store and environment a Planner or any
        # Dynamo tool needs to attach, and whether the Planner runs (graphs/runtimes/local/planner_executor.py).
        "attach": deployment.runtime_info if deployment and deployment.active else {},
        "replicas": deployment.desired_replicas(deployment.revision.graph_spec)
        if deployment and deployment.revision else {},
        "router_mode": spec.router_mode if spec else None,
        "observed_at": deployment.observed_at.isoformat() if deployment and deployment.observed_at else None,
        "age_seconds": round((now - deployment.observed_at).total_seconds(), 1)
        if deployment and deployment.observed_at else None,
        "pods": [
            {**{c: getattr(p, c) for c in POD_SHOWN},
             "started_at": p.started_at.isoformat() if p.started_at else None,
             # What the pod's spec asks for /dev/shm, beside what it has (shm_bytes).
             "shm_requested_bytes": spec.shm_requested_bytes(p.service) if spec else None}
            for p in pods
        ],
        "events": [{"at": e.at.isoformat(), "type": e.type, "reason": e.reason, "object": e.object,
                    "message": e.message} for e in events],
    }


def pod_log(*, graph: Graph, pod: str, lines: int = 200) -> str:
    deployment = Deployment.objects.filter(graph=graph).first()
    if deployment is None or not Pod.objects.filter(deployment=deployment, name=pod).exists():
        raise Missing(f"{graph.name} has no pod {pod!r}")
    return get_runtime(deployment.runtime).pod_log(deployment=deployment, pod=pod, lines=lines)


def ownership_snapshot(graph: Graph) -> dict:
    """Who owns each pool's replicas on the cluster, the drift, and the scaling decisions others
    made (ReplicaChange rows: ``at``, ``service``, ``before``, ``after``, ``manager``, ``actor``,
    ``via``): from the status cache only."""
    deployment = Deployment.objects.filter(graph=graph).select_related("revision").first()
    view = dict(deployment.ownership or {}) if on_cluster(deployment) else {}
    changes = graph.replica_changes.all()[:200]
    return {"graph": graph.name, "revision": deployment.revision.number if deployment and deployment.revision
            else None, "pools": view.get("pools", []), "drift": view.get("drift", []),
            "drift_count": view.get("drift_count", 0), "ignored": view.get("ignored", []),
            "ignored_count": view.get("ignored_count", 0),
            "replica_changes": [{"at": c.at.isoformat(), "service": c.service, "before": c.before, "after": c.after,
                                 "manager": c.manager, "actor": c.actor, "via": c.via} for c in changes]}
