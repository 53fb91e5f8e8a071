"""Serializers validate and present; they never call services or runtimes."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core import untrusted
from core.dgd.render import API_VERSIONS, normalise_api_version
from core.errors import UNPROCESSABLE, ManifestError
from core.pool import FIELD
from core.specio import spec_from_data

from ..companions import shown
from ..models import Deployment, Event, Graph, Operation, Pod, Revision
from ..runtimes.base import POD_SHOWN
from ..runtimes.registry import DEFAULT_KIND, KINDS
from ..version_fields import DynamoVersionField
from .template_serializers import PoolIntegerField


class FindingSerializer(serializers.Serializer):
    severity = serializers.ChoiceField(choices=["error", "warning", "info"])
    code = serializers.CharField()
    path = serializers.CharField(allow_blank=True)
    message = serializers.CharField()
    fix = serializers.CharField(allow_blank=True)


class SchemaUsedSerializer(serializers.Serializer):
    """Which CRD schema judged the manifest's structure (see core/crds/SOURCE.txt)."""

    api_version = serializers.CharField()
    repository = serializers.CharField()
    ref = serializers.CharField()
    commit = serializers.CharField()
    date = serializers.CharField()
    declares = serializers.CharField(help_text="The Dynamo version the CRD snapshot declares.")
    file = serializers.CharField()
    sha256 = serializers.CharField()
    target_release = serializers.CharField(allow_null=True)
    summary = serializers.CharField()
    note = serializers.CharField()


class ReportSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    counts = serializers.DictField(child=serializers.IntegerField())
    findings = FindingSerializer(many=True)
    schema = SchemaUsedSerializer(allow_null=True)


@extend_schema_field({"type": "object", "description": "A GraphSpec: model, backend, dynamo_version, services "
                                                      "(see GET /api/graphs/{name}/ for the shape)."})
class SpecField(serializers.JSONField):
    """A GraphSpec as JSON; invalid specs are refused with one error per path."""

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        try:
            return spec_from_data(data)
        except ManifestError as exc:
            # 422 (controlplane/api.py): a spec of the right shape whose content the rules refuse.
            raise serializers.ValidationError([f"{f.path}: {f.message}" for f in exc.findings],
                                              code=UNPROCESSABLE) from None

    def to_representation(self, value):
        return value if isinstance(value, dict) else value.model_dump(mode="json")


class CompanionSerializer(serializers.Serializer):
    apiVersion = serializers.CharField()  # Kubernetes' spelling
    kind = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField(help_text="Empty: the graph's namespace, where it is applied.")
    object = serializers.JSONField(help_text="The object as the file held it (a Secret's values are never shown).")


class RevisionSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    git = serializers.SerializerMethodField()
    companions = serializers.SerializerMethodField(
        help_text="The objects the manifest file held beside the DGD (ConfigMaps, PVCs, DRA claims...), in file "
                  "order: exported with it and applied before it on clusters.")

    class Meta:
        model = Revision
        fields = ["number", "message", "source_api_version", "created_by", "created_at", "git", "spec", "companions"]

    @extend_schema_field(CompanionSerializer(many=True))
    def get_companions(self, obj) -> list[dict]:
        return [{"apiVersion": c.get("apiVersion", ""), "kind": c.get("kind", ""),
                 "name": (c.get("metadata") or {}).get("name", ""),
                 "namespace": (c.get("metadata") or {}).get("namespace") or "", "object": shown(c)}
                for c in obj.companions]

    def get_git(self, obj) -> dict | None:
        """The Git commit the revision came from or became (repos' RevisionCommit), else null.
        Read through the reverse relation: graphs never import repos, which sits above them."""
        commit = getattr(obj, "git_commit", None)
        if commit is None:
            return None
        return {"repository": commit.repository.name if commit.repository_id else None,
                "direction": commit.direction, "sha": commit.sha,
                "branch": commit.branch, "path": commit.path, "author_name": commit.author_name,
                "author_email": commit.author_email, "message": commit.message, "committed_at": commit.committed_at}


class RevisionSummarySerializer(RevisionSerializer):
    companions = None  # the whole objects are the revision's own page's

    class Meta(RevisionSerializer.Meta):
        fields = ["number", "message", "source_api_version", "created_by", "created_at", "git"]


class GraphListSerializer(serializers.ListSerializer):
    """A page of GraphSerializer rows built in one loop: the same dictionaries, key for key
    (tests/api/test_api.py holds them equal), without DRF's per-field machinery and one URL
    reversal per row (two thirds of the API list's CPU at 50 rows)."""

    PLACEHOLDER = "graph-name-placeholder"  # a valid graph name, replaced by each row's

    def to_representation(self, data):
        child = self.child
        if type(child) is not GraphSerializer:
            return super().to_representation(data)
        rows = data.all() if hasattr(data, "all") else data
        url = child.fields["url"]
        prefix, _, suffix = url.get_url(_Named(self.PLACEHOLDER), url.view_name, self.context.get("request"),
                                        self.context.get("format")).rpartition(self.PLACEHOLDER)
        when = child.fields["created_at"].to_representation
        out = []
        for g in rows:
            out.append({"name": g.name, "url": f"{prefix}{g.name}{suffix}", "description": g.description,
                        "revision": child.get_revision(g), "model": child.get_model(g),
                        "backend": child.get_backend(g), "dynamo_version": child.get_dynamo_version(g),
                        "state": child.get_state(g), "created_at": when(g.created_at),
                        "updated_at": when(g.updated_at),
                        "archived_at": when(g.archived_at) if g.archived_at else None,
                        "archived_note": g.archived_note})
        return out


class _Named:
    def __init__(self, name: str):
        self.name = name


class GraphSerializer(serializers.ModelSerializer):
    revision = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField()
    backend = serializers.SerializerMethodField()
    dynamo_version = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField()
    url = serializers.HyperlinkedIdentityField(view_name="api:graph-detail", lookup_field="name")

    class Meta:
        model = Graph
        fields = ["name", "url", "description", "revision", "model", "backend", "dynamo_version", "state",
                  "created_at", "updated_at", "archived_at", "archived_note"]
        # Set only by graphs.services.graph_archive (an A/B study tearing down its variant).
        read_only_fields = ["archived_at", "archived_note"]
        list_serializer_class = GraphListSerializer

    def _head_spec(self, obj) -> dict:
        return obj.head.spec if obj.head else {}

    def get_revision(self, obj) -> int | None:
        return obj.head.number if obj.head else None

    def _summary(self, obj, field: str) -> str | None:
        # Lists annotate these from the head revision's columns (graphs.selectors.graph_summaries)
        # and never load the spec.
        annotated = f"head_{field}"
        if hasattr(obj, annotated):
            return getattr(obj, annotated) or None
        return self._head_spec(obj).get(field)

    def get_model(self, obj) -> str | None:
        return self._summary(obj, "model")

    def get_backend(self, obj) -> str | None:
        return self._summary(obj, "backend")

    def get_dynamo_version(self, obj) -> str | None:
        return self._summary(obj, "dynamo_version")

    def get_state(self, obj) -> str:
        deployment = getattr(obj, "deployment", None) if hasattr(obj, "deployment") else None
        return deployment.state if deployment else "not_deployed"


class GraphDetailSerializer(GraphSerializer):
    spec = serializers.SerializerMethodField()
    router_mode = serializers.SerializerMethodField(
        help_text="The Frontend's router mode (--router-mode or DYN_ROUTER_MODE; round-robin when unset).")

    class Meta(GraphSerializer.Meta):
        fields = [*GraphSerializer.Meta.fields, "spec", "router_mode"]

    @extend_schema_field(serializers.JSONField())
    def get_spec(self, obj):
        return obj.head.spec if obj.head else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_router_mode(self, obj):
        return obj.head.graph_spec.router_mode if obj.head else None


class GraphCreateSerializer(serializers.Serializer):
    spec = SpecField(help_text="A GraphSpec (see GET /api/graphs/{name}/ for the shape).")
    description = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    message = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class GraphUpdateSerializer(serializers.Serializer):
    # Input only: the browsable API builds its PUT form from this serializer and the graph,
    # which has no ``spec`` attribute (its spec is the head revision's).
    spec = SpecField(write_only=True)
    message = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    expected_revision = serializers.IntegerField(required=False, min_value=1,
                                                 help_text="Refuse with 409 if the graph moved past this revision.")


# The DGD API versions a request may name, as the schema lists them ("": the revision's own).
API_VERSION_CHOICES = ["", *API_VERSIONS, *(v.split("/", 1)[1] for v in API_VERSIONS)]


class ApiVersionField(serializers.ChoiceField):
    """``apiVersion``: one of API_VERSION_CHOICES exactly, normalised to ``nvidia.com/<version>``."""

    def __init__(self, **kwargs):
        super().__init__(choices=API_VERSION_CHOICES, required=False, default="", allow_blank=True,
                         error_messages={"invalid_choice": "unknown apiVersion {input!r}: use "
                                                           + " or ".join(API_VERSIONS)}, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        return normalise_api_version(value) if value else ""


class QueryIntegerField(serializers.IntegerField):
    """An integer query parameter, read by core.untrusted.parse_int_text like every other one."""

    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", untrusted.INT_MAX)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        try:
            return untrusted.parse_int_text(str(data).strip(), self.field_name, minimum=self.min_value,
                                            maximum=self.max_value)
        except untrusted.QueryParameterError as exc:
            raise serializers.ValidationError(exc.message) from None


class RenderQuerySerializer(serializers.Serializer):
    apiVersion = ApiVersionField()
    revision = QueryIntegerField(required=False)
    dynamoVersion = DynamoVersionField(known=False, required=False)


class DiffQuerySerializer(serializers.Serializer):
    from_revision = QueryIntegerField()
    to_revision = QueryIntegerField()
    apiVersion = ApiVersionField()


class OperationSerializer(serializers.ModelSerializer):
    graph = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    revision = serializers.SlugRelatedField(slug_field="number", read_only=True)

    class Meta:
        model = Operation
        fields = ["id", "graph", "kind", "state", "revision", "params", "before", "after", "result", "diff",
                  "requested_by", "via", "attempts", "created_at", "started_at", "finished_at"]


class PodSerializer(serializers.ModelSerializer):
    # What the pod's spec asks for /dev/shm, beside what it has (shm_bytes): the status snapshot's.
    shm_requested_bytes = serializers.IntegerField(read_only=True, allow_null=True, required=False)

    class Meta:
        model = Pod
        fields = [*POD_SHOWN, "shm_requested_bytes", "updated_at"]  # the columns runtimes report (PodStatus)


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["at", "type", "reason", "object", "message"]


class DeploymentSerializer(serializers.ModelSerializer):
    revision = serializers.SlugRelatedField(slug_field="number", read_only=True)
    cluster = serializers.CharField(source="cluster_name", read_only=True)

    class Meta:
        model = Deployment
        fields = ["runtime", "cluster", "namespace", "api_version", "revision", "replicas", "active", "state",
                  "message", "endpoint", "observed_at", "generation", "observed_generation"]


class GraphStatusSerializer(serializers.Serializer):
    """``GET /api/graphs/<name>/status/``: the status cache's snapshot of one graph
    (graphs.operations.status_snapshot), pods and events through their serializers."""

    graph = serializers.CharField()
    simulation = serializers.JSONField(allow_null=True, help_text="Which services run an engine "
                                       "other than their own on its own hardware (Dynamo's mocker, or vLLM on CPU), "
                                       "and why: {label, reason, services, note} (null: none do).")
    deployed = serializers.BooleanField()
    runtime = serializers.CharField(allow_null=True)
    cluster = serializers.CharField(allow_blank=True)
    namespace = serializers.CharField(allow_blank=True)
    revision = serializers.IntegerField(allow_null=True)
    state = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    endpoint = serializers.CharField(allow_blank=True)
    attach = serializers.JSONField(help_text="Local graphs: the Dynamo namespace, discovery store and "
                                   "environment a Planner or any Dynamo tool needs to attach.")
    replicas = serializers.DictField(child=serializers.IntegerField(), help_text="Desired replicas per pool.")
    router_mode = serializers.CharField(allow_null=True)
    observed_at = serializers.DateTimeField(allow_null=True)
    age_seconds = serializers.FloatField(allow_null=True)
    pods = PodSerializer(many=True)
    events = EventSerializer(many=True)


class ApplySerializer(serializers.Serializer):
    runtime = serializers.ChoiceField(choices=KINDS, default=DEFAULT_KIND)
    cluster = serializers.CharField(max_length=63, required=False, default="", allow_blank=True)  # kubernetes only
    namespace = serializers.CharField(max_length=63, required=False, default="", allow_blank=True)
    revision = serializers.IntegerField(required=False, min_value=1)
    apiVersion = ApiVersionField()
    dry_run = serializers.BooleanField(default=False)
    force = serializers.BooleanField(default=False)  # kubernetes: take fields other field managers own
    recreate = serializers.BooleanField(default=False)  # kubernetes: delete and recreate on a topology change
    confirm = serializers.CharField(max_length=63, required=False, default="", allow_blank=True)  # the graph name


class RollbackSerializer(serializers.Serializer):
    revision = serializers.IntegerField(min_value=1, max_value=2**31 - 1)  # the revision to run again
    dry_run = serializers.BooleanField(default=False)  # the diff against what runs; nothing is written
    force = serializers.BooleanField(default=False)  # kubernetes: even in the middle of a rollout


class ScaleSerializer(serializers.Serializer):
    service = serializers.CharField(max_length=63)
    replicas = PoolIntegerField(FIELD["replicas"], required=True)
    force = serializers.BooleanField(default=False)  # scale a pool Dynamo's Planner manages anyway
