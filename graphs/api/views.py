"""The REST API: viewsets for resources, @action for verbs. Every verb calls the same
service function as the HTML page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings

from accounts.roles import Role
from core.catalog import TEMPLATES, build_spec
from core.documents import load_bundle
from core.errors import ManifestError, Unprocessable
from core.facts import DEFAULT_ROUTER_MODE
from core.planner_config import PlannerSettings
from core.pool import PoolFields
from core.untrusted import query_bool, query_int
from core.validation import validate_manifest

from .. import operations, rollouts, services
from ..archive import built_manifest
from ..filters import GraphFilterSerializer
from ..models import Graph, Operation, Revision
from ..selectors import graph_summaries
from . import serializers as s
from . import template_serializers as t
from .pagination import NameCursorPagination
from .parameters import (
    API_VERSION_PARAMETER,
    ARCHIVE_BODIES,
    ARCHIVE_PATH_PARAMETER,
    DGD_BODY,
    DYNAMO_VERSION_PARAMETER,
    MANIFEST_BODY,
    RENDER_PARAMETERS,
    int_parameter,
    version_param,
)
from .parsers import ARCHIVE_PARSERS, YAML_PARSERS


def _queued(op) -> Response:
    """202 Accepted for a verb that queued an operation: the operation, and where to follow it."""
    return Response(s.OperationSerializer(op).data, status=status.HTTP_202_ACCEPTED,
                    headers={"Location": reverse("api:operation-detail", args=[op.pk])})


def _via(request) -> str:
    return "cli" if request.headers.get("X-Controlplane-Client") == "cli" else "api"


class GraphViewSet(viewsets.ModelViewSet):
    """Graph definitions. Every change is a new immutable revision."""

    lookup_field = "name"
    lookup_value_regex = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    serializer_class = s.GraphSerializer
    http_method_names = ["get", "post", "put", "delete", "head", "options"]

    @property
    def pagination_class(self):
        """The list of graphs is read by cursor (a fleet of thousands, at one cost a page); the
        lists under a graph (revisions, operations) by page number, as every other list."""
        return NameCursorPagination if self.action == "list" else api_settings.DEFAULT_PAGINATION_CLASS

    def get_queryset(self):
        if self.action == "list":
            # ?archived=true: the archived graphs (A/B study variants a study tore down) instead.
            where = GraphFilterSerializer(data=self.request.query_params)
            where.is_valid(raise_exception=True)
            return graph_summaries(archived=query_bool(self.request.query_params, "archived"), where=where.filter())
        return Graph.objects.select_related("head", "deployment").order_by("name")

    def get_serializer_class(self):
        return {"retrieve": s.GraphDetailSerializer, "create": s.GraphCreateSerializer,
                "update": s.GraphUpdateSerializer}.get(self.action, s.GraphSerializer)

    def _spec_response(self, graph, code=status.HTTP_200_OK):
        graph = self.get_queryset().get(pk=graph.pk)
        return Response(s.GraphDetailSerializer(graph, context=self.get_serializer_context()).data, status=code)

    @extend_schema(parameters=[GraphFilterSerializer, OpenApiParameter(
        "archived", bool, description="List the archived graphs (A/B study variants their study tore down) "
        "instead of the live ones.")])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=s.GraphCreateSerializer, responses={201: s.GraphDetailSerializer})
    def create(self, request, *args, **kwargs):
        data = s.GraphCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        graph = services.graph_create(spec=data.validated_data["spec"], user=request.user, via=_via(request),
                                      description=data.validated_data["description"],
                                      message=data.validated_data["message"])
        return self._spec_response(graph, status.HTTP_201_CREATED)

    @extend_schema(request=s.GraphUpdateSerializer, responses={200: s.GraphDetailSerializer})
    def update(self, request, *args, **kwargs):
        graph = self.get_object()
        data = s.GraphUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.graph_update(graph=graph, spec=data.validated_data["spec"], user=request.user, via=_via(request),
                              message=data.validated_data["message"],
                              expected_head=data.validated_data.get("expected_revision"))
        return self._spec_response(graph)

    @extend_schema(parameters=[OpenApiParameter(
        "with_benchmarks", bool, description="Also delete the graph's benchmark runs. Without it, a graph "
        "with runs is refused with 409 naming them.")])
    def destroy(self, request, *args, **kwargs):
        # true or false, as the schema says: an empty or other value is refused, never read as false.
        with_benchmarks = query_bool(request.query_params, "with_benchmarks")
        services.graph_delete(graph=self.get_object(), user=request.user, via=_via(request),
                              with_benchmarks=with_benchmarks)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _revision(self, graph: Graph, number: int | None) -> Revision:
        if number is None:
            if graph.head is None:
                raise ValidationError({"revision": "this graph has no revision"})
            return graph.head
        return get_object_or_404(Revision, graph=graph, number=number)

    def _rendering(self, request):
        """(graph, revision, apiVersion, dynamoVersion) from ?revision=&apiVersion=&dynamoVersion=."""
        graph = self.get_object()
        query = s.RenderQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        revision = self._revision(graph, q.get("revision"))
        # No apiVersion: the revision's own (the one it was imported in, or its release's).
        return graph, revision, q["apiVersion"] or revision.api_version, q.get("dynamoVersion")

    @extend_schema(parameters=RENDER_PARAMETERS, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"])
    def render(self, request, name=None):
        """The DGD manifest of a revision (default: the latest) with its findings."""
        _graph, revision, api_version, dynamo_version = self._rendering(request)
        manifest = services.revision_manifest(revision, api_version, dynamo_version)
        report = services.revision_report(revision, api_version, dynamo_version)
        return Response({"revision": revision.number, "apiVersion": api_version, "manifest": manifest,
                         **report.as_dict()})

    @extend_schema(parameters=RENDER_PARAMETERS, responses={200: s.ReportSerializer})
    @action(detail=True, methods=["get"])
    def validate(self, request, name=None):
        """Findings for a revision rendered in an API version, for a Dynamo version."""
        _graph, revision, api_version, dynamo_version = self._rendering(request)
        return Response(services.revision_report(revision, api_version, dynamo_version).as_dict())

    @extend_schema(parameters=RENDER_PARAMETERS, responses={(200, "application/yaml"): OpenApiResponse(
        {"anyOf": [{"type": "object"}, {"type": "string"}]},
        description="The revision's DynamoGraphDeployment as YAML; when the revision keeps "
        "companions (the ConfigMaps, PVCs, DRA claims... its manifest file held), one multi-document YAML file: "
        "the companions in their file's order, then the DGD, as kubectl apply -f takes it. A Secret is never kept.")})
    @action(detail=True, methods=["get"])
    def export(self, request, name=None):
        """The manifest as a YAML download, with the objects kept beside the DGD."""
        graph, revision, api_version, dynamo_version = self._rendering(request)
        text = services.revision_export(revision, api_version, dynamo_version)
        response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
        version = api_version.split("/")[-1]
        response["Content-Disposition"] = f'attachment; filename="{graph.name}-r{revision.number}-{version}.yaml"'
        return response

    @extend_schema(responses={200: s.RevisionSummarySerializer(many=True)})
    @action(detail=True, methods=["get"])
    def revisions(self, request, name=None):
        graph = self.get_object()
        rows = graph.revisions.select_related("created_by", "git_commit__repository").order_by("-number")
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(s.RevisionSummarySerializer(page, many=True).data)

    @extend_schema(responses={200: s.RevisionSerializer})
    @action(detail=True, methods=["get"], url_path=r"revisions/(?P<number>[0-9]+)")
    def revision(self, request, name=None, number=None):
        graph = self.get_object()
        rows = Revision.objects.select_related("created_by", "git_commit__repository")
        revision = get_object_or_404(rows, graph=graph, number=int(number))
        return Response(s.RevisionSerializer(revision).data)

    @extend_schema(parameters=[int_parameter("from_revision", required=True),
                               int_parameter("to_revision", required=True),
                               API_VERSION_PARAMETER],
                   responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"])
    def diff(self, request, name=None):
        """A unified diff between two revisions' rendered manifests."""
        graph = self.get_object()
        query = s.DiffQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        old = self._revision(graph, q["from_revision"])
        new = self._revision(graph, q["to_revision"])
        return Response({"from": old.number, "to": new.number, "apiVersion": q["apiVersion"] or new.api_version,
                         "diff": services.revision_diff(old, new, q["apiVersion"] or None)})

    @extend_schema(request={**DGD_BODY, **ARCHIVE_BODIES},
                   responses={201: s.GraphDetailSerializer, 200: s.GraphDetailSerializer},
                   parameters=[DYNAMO_VERSION_PARAMETER, ARCHIVE_PATH_PARAMETER])
    @action(detail=False, methods=["post"], url_path="import", parser_classes=[*YAML_PARSERS, *ARCHIVE_PARSERS])
    def import_(self, request):
        """Create a graph from a manifest file (either API version; ConfigMaps and other objects
        beside the DGD are kept with it), or from a .tar.gz/.zip of a kustomize directory (built
        with kubectl kustomize); or add a revision to the graph of that name."""
        if isinstance(request.data, bytes):
            text, _folder = built_manifest(request.data, path=request.query_params.get("path", ""),
                                           max_bytes=settings.MAX_MANIFEST_BYTES)
        else:
            text = request.data if isinstance(request.data, str) else ""
        bundle = load_bundle(text, max_bytes=settings.MAX_MANIFEST_BYTES)
        obj = bundle.manifest
        before = Graph.objects.filter(name=(obj.get("metadata") or {}).get("name") if isinstance(obj, dict)
                                      and isinstance(obj.get("metadata"), dict) else None).values_list(
            "head__number", flat=True).first()
        existed = before is not None
        imported = services.graph_import_bundle(
            bundle=bundle, user=request.user, text=text, dynamo_version=version_param(request), via=_via(request))
        response = self._spec_response(imported[0][0], status.HTTP_200_OK if existed else status.HTTP_201_CREATED)
        # An identical manifest makes no revision: 200, and says so.
        response.data["unchanged"] = existed and imported[0][1].number == before
        if len(imported) > 1:
            # A file of several DGDs (a Global Planner's pools) imports each as a graph of its own.
            response.data["imported_graphs"] = [graph.name for graph, _rev, _report in imported]
        return response

    @extend_schema(request=t.FromTemplateSerializer, responses={201: s.GraphDetailSerializer})
    @action(detail=False, methods=["post"], url_path="from-template")
    def from_template(self, request):
        data = t.FromTemplateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        if v["template"] not in TEMPLATES:
            raise ValidationError({"template": f"unknown template; choose one of {', '.join(TEMPLATES)}"})
        try:
            spec = build_spec(
                template=v["template"], name=v["name"], namespace=v["namespace"], model=v["model"],
                backend=v["backend"], dynamo_version=v["dynamo_version"],
                prefill=PoolFields(**v["prefill"]) if "prefill" in v else None,
                decode=PoolFields(**v["decode"]) if "decode" in v else None,
                router_mode=v.get("router_mode"),
                planner=PlannerSettings(**v["planner"]) if "planner" in v else None,
            )
        except ValueError as exc:  # pydantic's ValidationError is a ValueError: the rule, in words
            raise Unprocessable(str(exc)) from None
        graph = services.graph_create(spec=spec, user=request.user, description=v["description"], via=_via(request),
                                      message=f"created from template {v['template']}")
        return self._spec_response(graph, status.HTTP_201_CREATED)

    # ----------------------------------------------------------------- runtime verbs

    @extend_schema(request=s.ApplySerializer, responses={202: s.OperationSerializer})
    @action(detail=True, methods=["post"])
    def apply(self, request, name=None):
        """Apply a revision (default: the latest) to a runtime. Returns the operation to follow."""
        graph = self.get_object()
        data = s.ApplySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        op = operations.graph_apply(graph=graph, user=request.user, via=_via(request), runtime=v["runtime"],
                                      revision_number=v.get("revision"), api_version=v["apiVersion"] or None,
                                      dry_run=v["dry_run"], cluster=v["cluster"], namespace=v["namespace"],
                                      force=v["force"], recreate=v["recreate"], confirm=v["confirm"])
        return _queued(op)

    @extend_schema(request=s.RollbackSerializer, responses={202: s.OperationSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request, name=None):
        """Run an earlier revision again in one step: it becomes the new head (a new revision,
        audited) and is applied where the graph runs, with the runtime's rolling rules. With
        dry_run, the diff against what runs and nothing written."""
        graph = self.get_object()
        data = s.RollbackSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        op = rollouts.graph_rollback(graph=graph, revision_number=v["revision"], user=request.user,
                                       via=_via(request), dry_run=v["dry_run"], force=v["force"])
        return _queued(op)

    @extend_schema(request=s.ScaleSerializer, responses={202: s.OperationSerializer})
    @action(detail=True, methods=["post"])
    def scale(self, request, name=None):
        """Set one pool's replicas. Other pools are not touched."""
        graph = self.get_object()
        data = s.ScaleSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        op = operations.graph_scale(graph=graph, user=request.user, via=_via(request),
                                      service=data.validated_data["service"],
                                      replicas=data.validated_data["replicas"], force=data.validated_data["force"])
        return _queued(op)

    @extend_schema(request=None, responses={202: s.OperationSerializer})
    @action(detail=True, methods=["post"])
    def undeploy(self, request, name=None):
        """Stop everything the graph runs on its runtime (the graph definition stays)."""
        graph = self.get_object()
        op = operations.graph_undeploy(graph=graph, user=request.user, via=_via(request))
        return _queued(op)

    @extend_schema(responses={200: s.GraphStatusSerializer})
    @action(detail=True, methods=["get"])
    def status(self, request, name=None):
        """The status cache: state, pods, recent events and how fresh they are."""
        graph = self.get_object()
        return Response(s.GraphStatusSerializer(operations.status_snapshot(graph)).data)

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"])
    def ownership(self, request, name=None):
        """Kubernetes: per pool the revision's, the adapter's and the live replicas and who owns the
        count (managedFields); drift from the stored revision, autoscaler-owned differences apart;
        the replica changes others (the Planner, autoscalers, people) made, newest first."""
        graph = self.get_object()
        return Response(operations.ownership_snapshot(graph))

    @extend_schema(responses={200: s.OperationSerializer(many=True)})
    @action(detail=True, methods=["get"], url_path="operations")
    def graph_operations(self, request, name=None):
        graph = self.get_object()
        qs = Operation.objects.filter(graph=graph).select_related("graph", "requested_by", "revision")
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(s.OperationSerializer(page, many=True).data)

    @extend_schema(parameters=[int_parameter("lines", maximum=5000, description="The last lines (default 200)")],
                   responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"], url_path=r"pods/(?P<pod>[-a-zA-Z0-9.]+)/log")
    def pod_log(self, request, name=None, pod=None):
        graph = self.get_object()
        lines = query_int(request.query_params, "lines", default=200, minimum=1, maximum=5000)
        text = operations.pod_log(graph=graph, pod=pod, lines=lines)
        return Response({"pod": pod, "lines": lines, "log": text})


class ValidateViewSet(viewsets.ViewSet):
    """Validate a manifest without storing anything. Viewers may: it changes nothing."""

    parser_classes = YAML_PARSERS
    required_roles = {"create": Role.VIEWER}

    @extend_schema(request=MANIFEST_BODY, responses={200: s.ReportSerializer},
                   parameters=[DYNAMO_VERSION_PARAMETER])
    def create(self, request):
        text = request.data if isinstance(request.data, str) else ""
        bundle = load_bundle(text, max_bytes=settings.MAX_MANIFEST_BYTES)
        obj = bundle.manifest
        if not isinstance(obj, dict):
            # Not a manifest at all (a list, a number, a string): nothing to validate.
            raise ManifestError.single("", "a manifest must be a YAML mapping", "not_a_mapping")
        report = validate_manifest(obj, dynamo_version=version_param(request))
        kept = services.companions_finding(bundle)
        if kept is not None:
            report.findings.append(kept)
        body = report.as_dict()
        if len(bundle.graphs) > 1:
            body["graphs"] = [validate_manifest(g, dynamo_version=version_param(request)).as_dict()
                              | {"name": (g.get("metadata") or {}).get("name")} for g in bundle.graphs]
        if report.spec is not None:
            body["graph"] = report.spec.name
            body["dynamo_version"] = report.spec.dynamo_version
        return Response(body)


class TemplateViewSet(viewsets.ViewSet):
    """The templates a graph can be created from (POST /api/graphs/from-template/)."""

    @extend_schema(responses={200: t.TemplateSerializer(many=True)})
    def list(self, request):
        return Response([{"key": t.key, "title": t.title, "description": t.description, "backend": t.backend,
                          "disaggregated": t.disaggregated, "model": t.model,
                          "router_mode": t.router_mode or DEFAULT_ROUTER_MODE} for t in TEMPLATES.values()])


class OperationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Every apply, scale and delete: the audit trail."""

    serializer_class = s.OperationSerializer

    def get_queryset(self):
        qs = Operation.objects.select_related("graph", "requested_by", "revision")
        graph = self.request.query_params.get("graph")
        if graph:
            qs = qs.filter(graph__name=graph)
        state = self.request.query_params.get("state")
        if state:
            qs = qs.filter(state=state)
        return qs

