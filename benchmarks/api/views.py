"""The benchmarks API: runs (create, list, retrieve, cancel, artifacts, log, report), A/B
studies, comparisons, recommendations (create, apply). Every write calls the same service as
the pages; refusals come back as 409 with the reason, bad input as 400 naming the field."""

from __future__ import annotations

from pathlib import Path

from django.http import FileResponse, HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from availability.waiting import waits_on
from core.untrusted import query_int

from .. import recommendations, reports, services, studies
from ..models import BenchmarkRun, Recommendation, Study
from ..profiles import PROFILES
from ..selectors import runs_by_ids
from .serializers import (
    CompareSerializer,
    ProfileSerializer,
    RecommendationSerializer,
    RecommendSerializer,
    RunCreateSerializer,
    RunSerializer,
    StudyCreateSerializer,
    StudySerializer,
)

REPORT_TYPE = OpenApiParameter("type", str, enum=["csv", "html"], description="csv (default) or html")
RUN_IDS = OpenApiParameter("runs", {"type": "string", "pattern": r"^[1-9][0-9]{0,17}(,[1-9][0-9]{0,17}){0,11}$"},
                           required=True, description="run ids, comma-separated (1,2,3), at most 12")


REPORT_TYPES = ("csv", "html")


def report_response(*, kind: str, title: str, runs: list[BenchmarkRun], filename: str, **extra) -> HttpResponse:
    """A report of ``runs`` as ``kind`` (csv or html), for the pages and the API alike. Any other
    type is refused with a 400 naming the supported ones: never a CSV under a PDF's name."""
    if kind not in REPORT_TYPES:
        raise ValidationError({"type": [f"{kind!r} is not a report type: choose {' or '.join(REPORT_TYPES)}"]})
    if kind == "html":
        response = HttpResponse(reports.html_report(title=title, runs=runs, **extra),
                                content_type="text/html; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{filename}.html"'
    else:
        response = HttpResponse(reports.to_csv(runs), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
    return response


@waits_on("Prometheus and a benchmark's files")
class BenchmarkRunViewSet(mixins.CreateModelMixin, mixins.ListModelMixin,
                          mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Benchmark runs of graphs. Create one with a profile (streaming-chat, long, short, custom) and
    any parameter overrides; follow ``state`` and ``progress``; cancel it; download its
    artifacts. Filters: ?graph=<name>&state=<state>&study=<id>."""

    serializer_class = RunSerializer
    queryset = BenchmarkRun.objects.select_related("graph", "revision", "requested_by", "cancel_requested_by")

    def get_queryset(self):
        qs = super().get_queryset()
        params = self.request.query_params
        if params.get("graph"):
            qs = qs.filter(graph__name=params["graph"])
        if params.get("state"):
            qs = qs.filter(state=params["state"])
        study = query_int(params, "study")
        if study is not None:
            qs = qs.filter(study_id=study)
        return qs

    def get_serializer_class(self):
        return RunCreateSerializer if self.action == "create" else RunSerializer

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer})
    def create(self, request, *args, **kwargs):
        body = RunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = services.benchmark_request(graph=body.validated_data["graph"], profile=body.validated_data["profile"],
                                         params=body.validated_data["run_params"], user=request.user, via="api")
        run.refresh_from_db()
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED,
                        headers={"Location": reverse("api:run-detail", args=[run.pk])})

    @extend_schema(request=None, responses={200: RunSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = services.benchmark_cancel(run=self.get_object(), user=request.user, via="api")
        return Response(RunSerializer(run).data)

    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"])
    def artifacts(self, request, pk=None):
        """aiperf's artifacts and log, zipped (made when first asked for, once the run is over)."""
        path = services.artifacts_zip(self.get_object())
        return FileResponse(open(path, "rb"), as_attachment=True, filename=path.name,
                            content_type="application/zip")

    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR})
    @action(detail=True, methods=["get"])
    def log(self, request, pk=None):
        """aiperf's own output, every invocation of the run."""
        run = self.get_object()
        path = Path(run.log_path) if run.log_path else None
        if path is None or not path.exists():
            return Response({"detail": "this run has no aiperf log (it never started aiperf)"}, status=404)
        return FileResponse(open(path, "rb"), content_type="text/plain; charset=utf-8")

    @extend_schema(parameters=[REPORT_TYPE], responses={(200, "text/csv"): OpenApiTypes.STR,
                                                        (200, "text/html"): OpenApiTypes.STR})
    @action(detail=True, methods=["get"])
    def report(self, request, pk=None):
        run = self.get_object()
        return report_response(kind=request.query_params.get("type", "csv"), runs=[run],
                               title=f"Benchmark #{run.pk} of {run.graph.name}", filename=f"benchmark-{run.pk}")


@waits_on("Prometheus and a benchmark's files")
class StudyViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                   viewsets.GenericViewSet):
    """A/B studies: one graph, several shapes on (by default) the same GPU budget, the same
    profile on each, one report. ``arms`` are shapes such as p1d1, p2d1, agg2."""

    serializer_class = StudySerializer
    queryset = Study.objects.select_related("graph", "requested_by").prefetch_related("runs")

    def get_serializer_class(self):
        return StudyCreateSerializer if self.action == "create" else StudySerializer

    @extend_schema(request=StudyCreateSerializer, responses={201: StudySerializer})
    def create(self, request, *args, **kwargs):
        body = StudyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        study = studies.study_create(graph=data["graph"], profile=data["profile"],
                                      params=data["run_params"].model_dump(), arms=data.get("arms"),
                                      keep_variants=data["keep_variants"], user=request.user, via="api")
        study.refresh_from_db()
        return Response(StudySerializer(study).data, status=status.HTTP_201_CREATED,
                        headers={"Location": reverse("api:study-detail", args=[study.pk])})

    @extend_schema(request=None, responses={200: StudySerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return Response(StudySerializer(studies.study_cancel(study=self.get_object(), user=request.user)).data)

    @extend_schema(parameters=[REPORT_TYPE], responses={(200, "text/csv"): OpenApiTypes.STR,
                                                        (200, "text/html"): OpenApiTypes.STR})
    @action(detail=True, methods=["get"])
    def report(self, request, pk=None):
        study = self.get_object()
        runs = list(study.runs.select_related("graph").order_by("id"))
        rec = Recommendation.objects.filter(graph=study.graph).first()
        return report_response(kind=request.query_params.get("type", "csv"), runs=runs, study=study,
                               title=f"A/B study #{study.pk} of {study.graph.name}", filename=f"study-{study.pk}",
                               recommendation=rec)


class CompareView(APIView):
    """Several runs side by side: their rows (one per load point) and overlaid chart series; for
    runs of graphs made from an AIConfigurator configuration, ``predicted``: its TTFT, ITL and
    throughput against the run's, with the differences."""

    @extend_schema(parameters=[RUN_IDS], responses={200: CompareSerializer})
    def get(self, request):
        runs = runs_by_ids(request.query_params.get("runs", ""))
        return Response({"runs": RunSerializer(runs, many=True).data, "rows": reports.rows(runs),
                         "series": reports.series(runs), "predicted": reports.predicted(runs)})


class CompareReportView(APIView):
    """A comparison of several runs as CSV or as a self-contained HTML report."""

    @extend_schema(parameters=[RUN_IDS, REPORT_TYPE], responses={(200, "text/csv"): OpenApiTypes.STR,
                                                                 (200, "text/html"): OpenApiTypes.STR})
    def get(self, request):
        runs = runs_by_ids(request.query_params.get("runs", ""))
        ids = "-".join(str(r.pk) for r in runs)
        return report_response(kind=request.query_params.get("type", "csv"), runs=runs,
                               title=f"Comparison of benchmarks {', '.join(f'#{r.pk}' for r in runs)}",
                               filename=f"benchmarks-{ids}")


@waits_on("Prometheus and a benchmark's files")
class RecommendationViewSet(mixins.CreateModelMixin, mixins.ListModelMixin,
                            mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Replica recommendations. Create one for a graph (targets from the request, else from
    the graph's objectives; evidence from its runs and its A/B variants' runs), then apply
    it: one normal scale operation per pool that changes. Filter: ?graph=<name>."""

    serializer_class = RecommendationSerializer
    queryset = Recommendation.objects.select_related("graph", "created_by", "applied_by").prefetch_related("runs")

    def get_queryset(self):
        qs = super().get_queryset()
        if self.request.query_params.get("graph"):
            qs = qs.filter(graph__name=self.request.query_params["graph"])
        return qs

    def get_serializer_class(self):
        return RecommendSerializer if self.action == "create" else RecommendationSerializer

    @extend_schema(request=RecommendSerializer, responses={201: RecommendationSerializer})
    def create(self, request, *args, **kwargs):
        body = RecommendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        rec = recommendations.recommendation_create(graph=data["graph"], user=request.user, via="api",
                                           ttft_ms=data.get("ttft_ms"), itl_ms=data.get("itl_ms"),
                                           run_ids=data.get("runs"))
        return Response(RecommendationSerializer(rec).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: RecommendationSerializer})
    @action(detail=True, methods=["post"])
    def apply(self, request, pk=None):
        rec = recommendations.recommendation_apply(recommendation=self.get_object(), user=request.user, via="api")
        rec.refresh_from_db()  # after commit: its first scale operation may have run already
        return Response(RecommendationSerializer(rec).data)


class ProfilesView(APIView):
    """The benchmark profiles and their defaults."""

    @extend_schema(responses={200: ProfileSerializer(many=True)})
    def get(self, request):
        return Response([{"key": p.key, "title": p.title, "description": p.description, "defaults": p.defaults}
                         for p in PROFILES.values()])

