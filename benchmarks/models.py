"""Benchmark runs, A/B studies and replica recommendations. Each is an operation-like row:
who asked, when, how (ui/api), a state machine, and the result; the row is the audit trail
and what the UI follows."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from jobs.models import Job

from .profiles import PROFILES, RunParams
from .schema import Arm, RunConfig, RunResults


class RunState(models.TextChoices):
    """pending → running → succeeded | failed | cancelled. A run is claimed once (conditional
    UPDATE) and never re-run: half a benchmark cannot be resumed, and running it again behind
    the user's back would load the graph twice. A running run whose worker stops heart-beating
    is failed by the periodic reconcile (its aiperf process group killed, its log kept)."""

    PENDING = "pending", "Pending"  # recorded, waiting for a worker
    RUNNING = "running", "Running"  # claimed by one worker; aiperf runs
    SUCCEEDED = "succeeded", "Succeeded"  # every load point measured; results stored
    FAILED = "failed", "Failed"  # refused, aiperf failed, timed out or the worker was lost; error says why
    CANCELLED = "cancelled", "Cancelled"  # stopped on request; partial artifacts kept


ACTIVE_RUN_STATES = (RunState.PENDING, RunState.RUNNING)
FINISHED_RUN_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)
PROFILE_CHOICES = [(p.key, p.title) for p in PROFILES.values()]


class BenchmarkRun(Job):
    """One benchmark of one graph: one aiperf invocation, or several for a sweep. One active
    run per graph (the job model's constraint): two load generators would measure each other."""

    graph = models.ForeignKey("graphs.Graph", on_delete=models.CASCADE, related_name="benchmark_runs")
    revision = models.ForeignKey("graphs.Revision", null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="+")
    study = models.ForeignKey("Study", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    label = models.CharField(max_length=100, blank=True)  # e.g. the arm's shape in a study
    profile = models.CharField(max_length=20, choices=PROFILE_CHOICES)
    params = models.JSONField()  # a RunParams, read through .run_params
    state = models.CharField(max_length=20, choices=RunState.choices, default=RunState.PENDING)
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    progress_text = models.CharField(max_length=200, blank=True)
    config = models.JSONField(default=dict)  # a RunConfig: the graph as measured
    results = models.JSONField(default=dict)  # a RunResults
    error = models.TextField(blank=True)
    artifact_dir = models.CharField(max_length=500, blank=True)
    log_path = models.CharField(max_length=500, blank=True)  # aiperf's stdout/stderr, every invocation
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                            on_delete=models.SET_NULL, related_name="+")
    # The lease (Job.lease_until) is renewed by the worker every second.
    # The aiperf process group of the running invocation, to stop it from another process.
    host = models.CharField(max_length=255, blank=True)
    pgid = models.PositiveIntegerField(null=True, blank=True)
    proc_start = models.BigIntegerField(null=True, blank=True)  # /proc start time: guards against pid reuse

    def __str__(self) -> str:
        return f"benchmark #{self.pk} of graph {self.graph_id} ({self.state})"

    @property
    def run_params(self) -> RunParams:
        return RunParams.model_validate(self.params)

    @property
    def run_config(self) -> RunConfig:
        return RunConfig.model_validate(self.config or {})

    @property
    def run_results(self) -> RunResults:
        return RunResults.model_validate(self.results or {})


class StudyState(models.TextChoices):
    """pending → running → succeeded | failed | cancelled, like a run. A study advances one
    step at a time (create a variant, apply it, wait for it, benchmark it, undeploy it);
    each step reads what was recorded and does the next thing, so it can be retried. Once it
    ends, whichever way, its variants are torn down (Study.teardown_pending)."""

    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"  # every arm measured (an arm's run may still have failed)
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_STUDY_STATES = (StudyState.PENDING, StudyState.RUNNING)


class Study(models.Model):
    """An A/B comparison on a GPU budget: one graph, several shapes (aggregated, prefill:decode
    splits), the same profile on each, one report."""

    graph = models.ForeignKey("graphs.Graph", on_delete=models.CASCADE, related_name="benchmark_studies")
    profile = models.CharField(max_length=20, choices=PROFILE_CHOICES)
    params = models.JSONField()  # a RunParams, the same for every arm
    arms = models.JSONField(default=list)  # [Arm], in the order they run
    keep_variants = models.BooleanField(default=False)  # leave variant graphs deployed afterwards
    state = models.CharField(max_length=20, choices=StudyState.choices, default=StudyState.PENDING)
    message = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                     related_name="+")
    via = models.CharField(max_length=10, default="ui")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The study has ended (any way) and its variant graphs are not torn down yet: each one's
    # deployment deleted, then the graph archived (studies._teardown; the reconcile finishes it).
    teardown_pending = models.BooleanField(default=False, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "studies"
        constraints = [
            models.UniqueConstraint(fields=["graph"], condition=Q(state__in=["pending", "running"]),
                                    name="one_active_study_per_graph"),
        ]

    def __str__(self) -> str:
        return f"study #{self.pk} of graph {self.graph_id} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STUDY_STATES

    @property
    def settling(self) -> bool:
        """Still changing: running, or ended with its variants not torn down yet."""
        return self.is_active or self.teardown_pending

    @property
    def arm_list(self) -> list[Arm]:
        return [Arm.model_validate(a) for a in self.arms or []]

    @property
    def run_params(self) -> RunParams:
        return RunParams.model_validate(self.params)


class RecommendationState(models.TextChoices):
    """proposed → applying → applied | failed. Applying requests one scale operation per pool
    that changes, one after the other (a graph has one unfinished operation at a time)."""

    PROPOSED = "proposed", "Proposed"
    APPLYING = "applying", "Applying"
    APPLIED = "applied", "Applied"
    FAILED = "failed", "Failed"


class Recommendation(models.Model):
    """Replica counts for a graph's pools from its TTFT/ITL targets and measured runs, with
    the reasons and the runs they come from."""

    graph = models.ForeignKey("graphs.Graph", on_delete=models.CASCADE, related_name="recommendations")
    ttft_ms = models.FloatField(null=True, blank=True)
    itl_ms = models.FloatField(null=True, blank=True)
    targets_from = models.CharField(max_length=20, default="objectives")  # objectives | request
    current = models.JSONField(default=dict)  # service name -> replicas when recommended
    recommended = models.JSONField(default=dict)  # service name -> replicas
    shape = models.CharField(max_length=20, blank=True)  # the recommended shape, p2d1
    met = models.BooleanField(default=False)  # a measured run met every target with this shape
    reasons = models.JSONField(default=list)  # sentences, in order
    runs = models.ManyToManyField(BenchmarkRun, related_name="recommendations", blank=True)  # the evidence
    state = models.CharField(max_length=20, choices=RecommendationState.choices,
                             default=RecommendationState.PROPOSED)
    operations = models.JSONField(default=list)  # ids of the scale operations requested
    result = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                   related_name="+")
    via = models.CharField(max_length=10, default="ui")
    created_at = models.DateTimeField(auto_now_add=True)
    applied_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"recommendation #{self.pk} for graph {self.graph_id}: {self.shape}"

    @property
    def changes(self) -> list[dict]:
        """Each pool's replicas before and as recommended."""
        return [{"service": svc, "before": (self.current or {}).get(svc), "after": n}
                for svc, n in (self.recommended or {}).items()]
