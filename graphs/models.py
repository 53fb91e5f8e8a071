"""Graphs, their immutable revisions, the operations run on them, and the status cache.

The status cache (Deployment, Pod, Event) is written only by the runtimes' observers (the
local operator, the cluster watchers); pages and the API read it and never call a runtime."""

from __future__ import annotations

from collections import OrderedDict

from django.conf import settings
from django.db import models

from core.labels import labels_of
from core.spec import GraphSpec
from jobs.models import Job


class Graph(models.Model):
    """A stored graph definition. Its content lives in revisions; ``head`` is the latest.

    An archived graph is kept only as the record of what something measured (an A/B study's
    variant, once the study has torn it down): lists leave it out, it cannot be applied again,
    and its page, revisions, operations and benchmark runs stay readable."""

    name = models.CharField(max_length=63, unique=True)
    description = models.CharField(max_length=500, blank=True)
    head = models.ForeignKey("Revision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    archived_at = models.DateTimeField(null=True, blank=True, db_index=True)  # None: a live graph, listed
    archived_note = models.CharField(max_length=300, blank=True)  # why, in words: "A/B variant of ... study #12"
    # What the list's search box reads, in one column: the name, the description and the head's
    # model, case-folded (searchable(), written with the head), so that "contains, any case" is
    # a plain LIKE against the case-folded query: a fourth of ILIKE's cost per row on
    # PostgreSQL (migration 0014 says why no index serves it).
    search_text = models.TextField(blank=True, default="")
    # The head revision's labels (Revision.labels), written with the head: what a label
    # selector matches, on this table's narrow rows instead of the revisions' wide ones.
    labels = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def archived(self) -> bool:
        return self.archived_at is not None

    def searchable(self, head: Revision | None) -> str:
        """The search column's text with ``head`` as the head revision (searched_for() is the
        query's side)."""
        return searched_for("\n".join((self.name, self.description, head.model if head is not None else "")))


def searched_for(text: str) -> str:
    """A search, and the text it searches, in one case (str.casefold: "Straße" finds "STRASSE")."""
    return text.casefold()


def summary_of(spec) -> tuple[str, str, str]:
    """A spec's model, backend and Dynamo version, as text ("" when missing)."""
    spec = spec if isinstance(spec, dict) else {}
    return tuple("" if spec.get(key) is None else str(spec[key]) for key in ("model", "backend", "dynamo_version"))


class Revision(models.Model):
    """One immutable version of a graph's spec. Never updated: every change is a new row."""

    graph = models.ForeignKey(Graph, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()  # a GraphSpec, read through .graph_spec
    source_yaml = models.TextField(blank=True)  # the manifest as imported, when it came from YAML
    source_api_version = models.CharField(max_length=40, blank=True)
    # The objects the manifest file held beside the DGD (ConfigMaps, PVCs, DRA claims...), as
    # written, in file order: shown, diffed and exported with the graph, and applied with it on
    # clusters (core/documents.py).
    companions = models.JSONField(default=list, blank=True)
    message = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # Copied from the spec when the revision is stored (it never changes): what lists show,
    # read as columns instead of out of kilobytes of JSON per row.
    model = models.TextField(blank=True, default="")
    backend = models.TextField(blank=True, default="")
    dynamo_version = models.TextField(blank=True, default="")
    # The DGD's metadata.labels, as strings: what a label selector (``?label=``) matches.
    labels = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["graph_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["graph", "number"], name="revision_number_unique")]

    def __str__(self) -> str:
        return f"{self.graph.name}@{self.number}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("revisions are immutable: create a new one")
        self.model, self.backend, self.dynamo_version = summary_of(self.spec)
        self.labels = labels_of((self.spec if isinstance(self.spec, dict) else {}).get("metadata_extra"))
        super().save(*args, **kwargs)

    @property
    def api_version(self) -> str:
        """The DGD API version this revision is shown, exported and applied in by default."""
        from core.dgd.render import default_api_version

        return default_api_version(self.graph_spec, self.source_api_version)

    @property
    def graph_spec(self) -> GraphSpec:
        """The spec, validated. A stored revision never changes, so each process validates it
        once (a spec changes only through model_copy: the one returned is never modified)."""
        if self.pk is None:
            return GraphSpec.model_validate(self.spec)
        key = (self.pk, self.created_at)  # the time too: a recreated database reuses ids
        spec = _SPECS.get(key)
        if spec is None:
            spec = GraphSpec.model_validate(self.spec)
            _remember({key: spec})
        return spec


_SPECS: OrderedDict[tuple, GraphSpec] = OrderedDict()  # (revision id, created_at) -> its validated spec
_SPECS_KEPT = 512


def _remember(specs: dict[tuple, GraphSpec]) -> None:
    """Keep these validated specs, dropping the oldest beyond _SPECS_KEPT (never one just kept)."""
    _SPECS.update(specs)
    while len(_SPECS) > max(_SPECS_KEPT, len(specs)):
        _SPECS.popitem(last=False)


def specs_validated(revisions) -> None:
    """Validate in one query the specs of those ``revisions`` this process has not validated yet,
    for a caller that read them without their spec JSON (``defer("spec")``, a list of 50 graphs'
    revisions): their ``graph_spec`` then reads nothing more."""
    missing = {r.pk: r.created_at for r in revisions
               if r is not None and r.pk is not None and (r.pk, r.created_at) not in _SPECS}
    if missing:
        _remember({(pk, missing[pk]): GraphSpec.model_validate(spec)
                   for pk, spec in Revision.objects.filter(pk__in=missing).values_list("pk", "spec")})


class GraphState(models.TextChoices):
    NOT_DEPLOYED = "not_deployed", "Not deployed"  # never applied, or deleted
    PROGRESSING = "progressing", "Progressing"  # applied; pods starting or changing
    READY = "ready", "Ready"  # every pod of every pool running and ready
    DEGRADED = "degraded", "Degraded"  # serving, but some pods are not ready or restarting
    FAILED = "failed", "Failed"  # nothing can serve: crash loops, no frontend, unschedulable
    DELETING = "deleting", "Deleting"  # delete requested, processes or pods still going away
    UNKNOWN = "unknown", "Unknown"  # the runtime has not reported recently


class DeploymentQuerySet(models.QuerySet):
    def in_use(self) -> DeploymentQuerySet:
        """Deployments that still hold their place on a runtime: all but those deleted and gone."""
        return self.exclude(active=False, state=GraphState.NOT_DEPLOYED)


class Deployment(models.Model):
    """The desired and observed state of one graph on its runtime. The desired part is
    written by operations; the observed part by the runtime's observer only."""

    graph = models.OneToOneField(Graph, on_delete=models.CASCADE, related_name="deployment")
    runtime = models.CharField(max_length=20, default="local")  # local | kubernetes
    # PROTECT: a registered cluster cannot be removed while a graph is deployed on it; a graph
    # deleted there lets go of it when the cluster is removed (clusters.services.cluster_delete).
    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True, on_delete=models.PROTECT,
                                related_name="deployments")
    namespace = models.CharField(max_length=63, blank=True)
    api_version = models.CharField(max_length=40, default="nvidia.com/v1beta1")
    # desired
    # RESTRICT, not PROTECT: deleting the whole graph (which cascades here) is allowed.
    revision = models.ForeignKey(Revision, null=True, on_delete=models.RESTRICT, related_name="+")
    manifest = models.JSONField(null=True, blank=True)  # the DGD as last applied
    replicas = models.JSONField(default=dict)  # service name -> replicas (scale overrides)
    active = models.BooleanField(default=False)  # False once deleted
    generation = models.PositiveIntegerField(default=0)  # bumped by every desired-state change
    # observed
    observed_generation = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=20, choices=GraphState.choices, default=GraphState.NOT_DEPLOYED)
    message = models.TextField(blank=True)
    endpoint = models.CharField(max_length=200, blank=True)
    ports = models.JSONField(default=dict)  # local runtime: name -> port
    # What a Dynamo tool needs to attach to the graph (its Dynamo namespace, discovery store,
    # the virtual connector's etcd) and whether the Planner runs (graphs/runtimes/local/planner_executor.py).
    runtime_info = models.JSONField(default=dict, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    # Kubernetes: per pool the revision's, the adapter's and the live replicas and who owns the
    # count; drift between the stored revision and the live DGD (core/dgd/ownership.py shapes)
    ownership = models.JSONField(default=dict, blank=True)

    objects = DeploymentQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.graph_id} on {self.runtime}"

    @property
    def cluster_name(self) -> str:
        """The cluster's name ("" off Kubernetes): what pages, the API and targets show."""
        return self.cluster.name if self.cluster_id else ""

    def desired_replicas(self, spec: GraphSpec) -> dict[str, int]:
        out = {s.name: s.effective_replicas for s in spec.services}
        out.update({k: int(v) for k, v in (self.replicas or {}).items() if k in out})
        return out


class Pod(models.Model):
    """A pod, or a local process reported as one."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="pods")
    name = models.CharField(max_length=253)
    service = models.CharField(max_length=63)
    role = models.CharField(max_length=20)
    phase = models.CharField(max_length=40)
    ready = models.BooleanField(default=False)
    restarts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    node = models.CharField(max_length=253, blank=True)
    gpus = models.PositiveIntegerField(default=0)
    shm_bytes = models.BigIntegerField(null=True, blank=True)  # /dev/shm as measured (see shm_source)
    shm_source = models.CharField(max_length=40, blank=True)  # where shm_bytes was read
    port = models.PositiveIntegerField(null=True, blank=True)
    command = models.JSONField(default=list, blank=True)  # main container's command (list of str)
    args = models.JSONField(default=list, blank=True)  # and its args, as kubectl describe shows them
    nixl_backend = models.CharField(max_length=60, blank=True)  # UCX, ..., "simulated" (mocker), "" unknown
    gpu_devices = models.CharField(max_length=100, blank=True)  # CUDA_VISIBLE_DEVICES of a local GPU worker
    gpu_memory_bytes = models.BigIntegerField(null=True, blank=True)  # local: NVML, this pod's processes
    gpu_util = models.FloatField(null=True, blank=True)  # percent, local: NVML
    reason = models.CharField(max_length=100, blank=True)
    message = models.TextField(blank=True)
    last_log = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["service", "name"]
        constraints = [models.UniqueConstraint(fields=["deployment", "name"], name="pod_name_unique")]

    def __str__(self) -> str:
        return self.name


class ReplicaChange(models.Model):
    """A pool's desired replicas changed on a cluster by someone other than the control plane (the
    Planner, an autoscaler, kubectl), as the watch saw it: a scaling decision, for the Planner timeline."""

    graph = models.ForeignKey(Graph, on_delete=models.CASCADE, related_name="replica_changes")
    at = models.DateTimeField(db_index=True)  # when the writer set it (its managedFields time)
    service = models.CharField(max_length=63)
    before = models.PositiveIntegerField(null=True, blank=True)
    after = models.PositiveIntegerField()
    manager = models.CharField(max_length=128)  # the field manager that wrote it
    actor = models.CharField(max_length=40)  # in words: the Planner, an autoscaler, kubectl...
    via = models.CharField(max_length=10)  # "adapter": the DGDSA's /scale; "dgd": the DGD itself

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.service} {self.before}->{self.after} by {self.manager}"


class StatusStamp(models.Model):
    """A graph's status version: a count of the changes to what its status shows (its pods,
    operations, Planner decisions, events, the scaling changes others made, its deployment's
    state), moved by the writers of those rows (graphs.status_version.moved), so that a page
    re-reads them only when it moved (graphs.status_view) and an open page is told (graphs.live).
    No foreign key in the database: a graph's rows are deleted in whatever order."""

    graph = models.OneToOneField(Graph, primary_key=True, on_delete=models.CASCADE, db_constraint=False,
                                 related_name="status_stamp")
    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.graph_id}: {self.value}"


class Event(models.Model):
    graph = models.ForeignKey(Graph, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(db_index=True)
    type = models.CharField(max_length=10, default="Normal")
    reason = models.CharField(max_length=60)
    object = models.CharField(max_length=253)
    message = models.TextField()

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.reason} {self.object}"


class OperationKind(models.TextChoices):
    APPLY = "apply", "Apply"
    SCALE = "scale", "Scale"
    DELETE = "delete", "Delete"  # undeploy: stops every pod; the graph and its revisions stay


class OperationState(models.TextChoices):
    """pending → running → succeeded | failed. A pending operation waits for the one before it
    on the same graph; a running one whose worker died is finished or failed by the periodic
    sweep (jobs/registry.py), never left running."""

    PENDING = "pending", "Pending"  # recorded, waiting for a worker (and for earlier operations)
    RUNNING = "running", "Running"  # claimed by exactly one worker (conditional UPDATE)
    SUCCEEDED = "succeeded", "Succeeded"  # the runtime accepted the change
    FAILED = "failed", "Failed"  # refused or errored; result holds the runtime's own message


ACTIVE_STATES = (OperationState.PENDING, OperationState.RUNNING)


class Operation(Job):
    """An apply, scale or delete: who asked, when, what changed, and how it ended. The row
    is the audit trail and the thing the UI follows. One unfinished operation per graph (the
    job model's constraint): a graph changes one step at a time."""

    graph = models.ForeignKey(Graph, on_delete=models.CASCADE, related_name="operations")
    kind = models.CharField(max_length=20, choices=OperationKind.choices)
    state = models.CharField(max_length=20, choices=OperationState.choices, default=OperationState.PENDING)
    revision = models.ForeignKey(Revision, null=True, blank=True, on_delete=models.RESTRICT, related_name="+")
    params = models.JSONField(default=dict)  # scale: service, replicas; apply: runtime, apiVersion, dryRun
    before = models.JSONField(default=dict)  # what was live before (replicas, revision)
    after = models.JSONField(default=dict)
    result = models.TextField(blank=True)
    diff = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} {self.state}"

    @classmethod
    def moved(cls, pks: list[int]) -> None:
        """A graph's status shows its operations as they move (graphs.status_version)."""
        from .status_version import moved

        moved(*cls.objects.filter(pk__in=pks).values_list("graph_id", flat=True))


class DecisionState(models.TextChoices):
    """received → executing → acknowledged | failed | superseded; ``observed`` for a decision seen on a
    runtime that executes it itself (the Planner patching a cluster): nothing to execute."""

    RECEIVED = "received", "Received"  # recorded; no scale requested yet
    EXECUTING = "executing", "Executing"  # scale operations requested; waiting for them and for readiness
    ACKNOWLEDGED = "acknowledged", "Acknowledged"  # every pool ready at the decided size; the Planner was told
    FAILED = "failed", "Failed"  # a scale operation failed; message says which
    SUPERSEDED = "superseded", "Superseded"  # a newer decision came first; the Planner waits for that one
    OBSERVED = "observed", "Observed"  # seen through a watch; the runtime's own operator executes it


class PlannerDecision(models.Model):
    """One scaling decision of Dynamo's Planner, from either runtime: published through the
    virtual connector (local) or observed as the Planner's write to a cluster (Kubernetes).
    The timeline draws each as a marker with its reason; the health line reads the latest."""

    graph = models.ForeignKey(Graph, on_delete=models.CASCADE, related_name="planner_decisions")
    source = models.CharField(max_length=30)  # virtual-connector | kubernetes-watch
    decision_id = models.BigIntegerField(null=True, blank=True)  # the coordinator's id (local)
    at = models.DateTimeField(db_index=True)  # when it was published or observed
    desired = models.JSONField(default=dict)  # service name -> replicas the Planner asks
    before = models.JSONField(default=dict)  # service name -> replicas before it
    reason = models.CharField(max_length=500, blank=True)
    actor = models.CharField(max_length=200, blank=True)  # "planner", or the field manager that wrote it
    state = models.CharField(max_length=20, choices=DecisionState.choices, default=DecisionState.RECEIVED)
    operations = models.JSONField(default=list)  # ids of the scale operations made for it
    message = models.TextField(blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.graph_id} decision {self.decision_id} {self.state}"


class ReplicaSample(models.Model):
    """A pool's desired and ready replicas from this moment on: written only when either
    changes, by the local operator or a cluster watcher, so the timeline can draw both."""

    graph = models.ForeignKey(Graph, on_delete=models.CASCADE, related_name="replica_samples")
    service = models.CharField(max_length=63)
    at = models.DateTimeField()
    desired = models.PositiveIntegerField()
    ready = models.PositiveIntegerField()

    class Meta:
        ordering = ["graph_id", "service", "at"]
        indexes = [models.Index(fields=["graph", "service", "at"])]

    def __str__(self) -> str:
        return f"{self.service} {self.desired}/{self.ready} at {self.at:%H:%M:%S}"
