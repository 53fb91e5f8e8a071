"""Sizing estimates: AIConfigurator's answer for one set of inputs, run as a job and kept, so
that the same inputs are answered from the row and any two answers can be compared."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from jobs.models import Job

from .aic import Inputs


class EstimateState(models.TextChoices):
    """pending → running → succeeded | failed. An estimate is claimed once (conditional UPDATE);
    a worker that dies stops renewing the lease and the sweep fails the row, after which the
    same inputs are estimated afresh."""

    PENDING = "pending", "Pending"  # recorded, waiting for a worker
    RUNNING = "running", "Running"  # claimed by one worker; AIConfigurator searches
    SUCCEEDED = "succeeded", "Succeeded"  # result holds the answer
    FAILED = "failed", "Failed"  # AIConfigurator refused or the worker was lost; error says why


ACTIVE_ESTIMATE_STATES = (EstimateState.PENDING, EstimateState.RUNNING)


class Estimate(Job):
    """One AIConfigurator ``cli default`` search. ``input_key`` is a digest of the inputs and of
    AIConfigurator's version: the cache key (a new database release answers afresh)."""

    inputs = models.JSONField()  # an aic.Inputs, read through .estimate_inputs
    input_key = models.CharField(max_length=64, db_index=True)
    state = models.CharField(max_length=20, choices=EstimateState.choices, default=EstimateState.PENDING)
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    progress_text = models.CharField(max_length=200, blank=True)
    result = models.JSONField(default=dict)  # aic.run_default's answer
    error = models.TextField(blank=True)
    elapsed_s = models.FloatField(null=True, blank=True)  # AIConfigurator's own search time
    perf_db_version = models.CharField(max_length=40, blank=True)
    aiconfigurator_version = models.CharField(max_length=40, blank=True)
    artifact_dir = models.CharField(max_length=500, blank=True)  # its generated DGDs

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["input_key", "state"])]
        # No one-active-per-graph rule: an estimate has no graph. Two requests for the same
        # inputs racing past the cache lookup both run; each answer is kept, both are correct.
        constraints: list = []

    def __str__(self) -> str:
        return f"estimate #{self.pk} ({self.state})"

    @property
    def estimate_inputs(self) -> Inputs:
        return Inputs(**self.inputs)

    @property
    def is_finished(self) -> bool:
        return self.state not in ACTIVE_ESTIMATE_STATES

    def configuration(self, mode: str, rank: int) -> dict | None:
        """The ranked configuration ``rank`` (1-based) of experiment ``mode`` (agg or disagg)."""
        rows = self.result.get("experiments", {}).get(mode, {}).get("configurations", [])
        return next((r for r in rows if r.get("rank") == rank), None)

    @property
    def title(self) -> str:
        i = self.inputs
        return (f"{i['model']} on {i['total_gpus']} GPUs of {i['system']} ({i['backend']}), "
                f"ISL {i['isl']} / OSL {i['osl']}, TTFT ≤ {i['ttft']:g} ms, ITL ≤ {i['tpot']:g} ms")


class DeploymentRequest(models.Model):
    """An estimate's inputs put to a cluster's Dynamo operator as a DynamoGraphDeploymentRequest:
    where it was applied, what its status last said, and the graph its DGD was adopted as."""

    estimate = models.ForeignKey(Estimate, on_delete=models.PROTECT, related_name="deployment_requests")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=63)
    manifest = models.JSONField()  # the DGDR as applied
    phase = models.CharField(max_length=20, blank=True)  # the operator's status.phase, as last read
    message = models.TextField(blank=True)  # the operator's own words: its latest condition, or why it failed
    last_status = models.JSONField(default=dict)  # status as last read, every field kept
    read_at = models.DateTimeField(null=True, blank=True)
    graph = models.ForeignKey("graphs.Graph", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="one_dgdr_per_name")]

    def __str__(self) -> str:
        return f"DGDR {self.namespace}/{self.name} on {self.cluster_id} ({self.phase or 'not read'})"
