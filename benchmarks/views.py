"""Benchmark pages (htmx). One URL serves a page or its fragment; every action calls the same
service as the API. The run and study pages poll their status fragment, which answers 286
(stop polling) with the final fragment once the work is done."""

from __future__ import annotations

import json
from pathlib import Path

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe
from rest_framework.exceptions import ValidationError

from accounts.roles import Role, role_required
from graphs.models import Deployment, Graph
from sizing.selectors import estimates_for

from . import recommendations, reports, services, studies
from .api.views import report_response
from .errors import BenchmarkRefused
from .forms import ParamsForm, RecommendForm, StudyForm
from .models import BenchmarkRun, Recommendation, Study
from .profiles import PROFILES, ProfileError
from .selectors import runs_by_ids
from .targets import slo_targets

STOP_POLLING = 286


def _chart_json(runs: list[BenchmarkRun], slo: dict | None = None) -> str:
    """What the page's charts draw, as JSON for a data attribute (templates/benchmarks/_charts.html,
    read by static/js/benchmarks.js). Not a json_script island: htmx (allowScriptTags false)
    drops <script> elements from what it swaps in, so a chart that arrives with a finished run's
    status fragment would find no data."""
    return json.dumps({"series": reports.series(runs), "slo": slo or {}})


@role_required(Role.VIEWER)
@require_safe
def run_list(request):
    runs = BenchmarkRun.objects.select_related("graph", "requested_by")
    graph = request.GET.get("graph", "").strip()
    if graph:
        runs = runs.filter(graph__name=graph)
    page = Paginator(runs, 50).get_page(request.GET.get("page"))
    recent_studies = Study.objects.select_related("graph")
    if graph:
        recent_studies = recent_studies.filter(graph__name=graph)
    return render(request, "benchmarks/list.html", {"page": page, "runs": page.object_list, "graph": graph,
                                                    "studies": recent_studies[:10]})


def _initial(request, form_class):
    # The graph named in the link, else the only graph serving now.
    serving = _serving_names()
    graph = request.GET.get("graph") or (serving[0] if len(serving) == 1 else None)
    initial = {"profile": "custom", "graph": graph}
    return form_class(request.POST or None, initial=initial)


@role_required(Role.OPERATOR)
@require_http_methods(["GET", "POST"])
def run_new(request):
    form = _initial(request, ParamsForm)
    error = ""
    if request.method == "POST" and form.is_valid():
        try:
            run = services.benchmark_request(graph=form.cleaned_data["graph"], profile=form.cleaned_data["profile"],
                                             params=form.params(), user=request.user, via="ui")
        except ProfileError as exc:
            form.add_profile_errors(exc)
        except BenchmarkRefused as exc:
            error = str(exc)
        else:
            return redirect("benchmarks:run", pk=run.pk)
    return render(request, "benchmarks/new.html", {"form": form, "error": error, "profiles": PROFILES.values(),
                                                   "serving": _serving_names()},
                  status=400 if request.method == "POST" else 200)


def _serving_names() -> list[str]:
    return list(Deployment.objects.filter(active=True, state__in=services.SERVING_STATES)
                .values_list("graph__name", flat=True).order_by("graph__name"))


def _run_context(run: BenchmarkRun) -> dict:
    results = run.run_results
    return {"run": run, "results": results, "config": run.run_config, "params": run.run_params,
            "rows": reports.rows([run]), "chart_json": _chart_json([run], results.slo),
            # A run counts goodput against the objectives it ran under; ones set since are said apart.
            "objectives_now": slo_targets(run.graph) if not results.slo else {}}


@role_required(Role.VIEWER)
@require_safe
def run_detail(request, pk: int):
    run = get_object_or_404(BenchmarkRun.objects.select_related("graph", "revision", "requested_by", "study"), pk=pk)
    return _page_or_status(request, "benchmarks/detail.html", _run_context(run), active=run.is_active)


@role_required(Role.OPERATOR)
@require_POST
def run_cancel(request, pk: int):
    run = get_object_or_404(BenchmarkRun, pk=pk)
    error = ""
    try:
        run = services.benchmark_cancel(run=run, user=request.user)
    except BenchmarkRefused as exc:
        error = str(exc)
    if request.htmx:
        run = BenchmarkRun.objects.select_related("graph", "revision", "requested_by", "study").get(pk=pk)
        return render(request, "benchmarks/detail.html#status", {**_run_context(run), "error": error},
                      status=409 if error else 200)
    if error:
        messages.error(request, error)
    return redirect("benchmarks:run", pk=pk)


@role_required(Role.VIEWER)
@require_safe
def run_artifacts(request, pk: int):
    run = get_object_or_404(BenchmarkRun, pk=pk)
    try:
        path = services.artifacts_zip(run)
    except BenchmarkRefused as exc:
        raise Http404(str(exc)) from None
    return FileResponse(open(path, "rb"), as_attachment=True, filename=path.name, content_type="application/zip")


@role_required(Role.VIEWER)
@require_safe
def run_log(request, pk: int):
    run = get_object_or_404(BenchmarkRun, pk=pk)
    if not run.log_path or not Path(run.log_path).exists():
        raise Http404("this run has no aiperf log")
    return FileResponse(open(run.log_path, "rb"), content_type="text/plain; charset=utf-8")


def _report(kind: str, *, title: str, runs: list[BenchmarkRun], filename: str, **extra) -> HttpResponse:
    """The API's report (one of each); an unsupported type is a 400 that names the supported ones."""
    try:
        return report_response(kind=kind, title=title, runs=runs, filename=filename, **extra)
    except ValidationError as exc:
        return HttpResponse(" ".join(exc.detail["type"]), status=400, content_type="text/plain; charset=utf-8")


@role_required(Role.VIEWER)
@require_safe
def run_report(request, pk: int):
    run = get_object_or_404(BenchmarkRun.objects.select_related("graph"), pk=pk)
    return _report(request.GET.get("type", "csv"), title=f"Benchmark #{run.pk} of {run.graph.name}", runs=[run],
                   filename=f"benchmark-{run.pk}")


def _selected(request) -> list[BenchmarkRun]:
    values = request.GET.getlist("runs")
    text = ",".join(values)
    try:
        return runs_by_ids(text)
    except ProfileError as exc:
        raise Http404(" ".join(exc.errors.get("runs", []))) from None


@role_required(Role.VIEWER)
@require_safe
def compare(request):
    runs = _selected(request)
    ids = ",".join(str(r.pk) for r in runs)
    return render(request, "benchmarks/compare.html", {"runs": runs, "ids": ids, "rows": reports.rows(runs),
                                                       "columns": reports.COLUMNS, "chart_json": _chart_json(runs),
                                                       "predicted": reports.predicted(runs)})


@role_required(Role.VIEWER)
@require_safe
def compare_report(request):
    runs = _selected(request)
    return _report(request.GET.get("type", "csv"), runs=runs, filename="benchmarks-" + "-".join(
        str(r.pk) for r in runs), title=f"Comparison of benchmarks {', '.join(f'#{r.pk}' for r in runs)}")


# --- studies -------------------------------------------------------------------------------------

@role_required(Role.OPERATOR)
@require_http_methods(["GET", "POST"])
def study_new(request):
    form = _initial(request, StudyForm)
    error = ""
    if request.method == "POST" and form.is_valid():
        try:
            study = studies.study_create(graph=form.cleaned_data["graph"], profile=form.cleaned_data["profile"],
                                          params=form.params(), arms=form.cleaned_data["arms"],
                                          keep_variants=form.cleaned_data["keep_variants"], user=request.user)
        except ProfileError as exc:
            form.add_profile_errors(exc)
        except BenchmarkRefused as exc:
            error = str(exc)
        else:
            return redirect("benchmarks:study", pk=study.pk)
    return render(request, "benchmarks/study_new.html", {"form": form, "error": error, "profiles": PROFILES.values()},
                  status=400 if request.method == "POST" else 200)


def _study_context(study: Study) -> dict:
    runs = list(study.runs.select_related("graph").order_by("id"))
    finished = [r for r in runs if r.run_results.steps]
    return {"study": study, "arms": study.arm_list, "runs": runs, "rows": reports.rows(finished),
            "columns": reports.COLUMNS, "ids": ",".join(str(r.pk) for r in finished),
            "chart_json": _chart_json(finished, slo_targets(study.graph)),
            "recommendation": Recommendation.objects.filter(graph=study.graph).first()}


@role_required(Role.VIEWER)
@require_safe
def study_detail(request, pk: int):
    study = get_object_or_404(Study.objects.select_related("graph", "requested_by"), pk=pk)
    # The page polls until the variants are torn down too, not only until the study ends.
    return _page_or_status(request, "benchmarks/study.html", _study_context(study), active=study.settling)


def _page_or_status(request, template: str, context: dict, *, active: bool) -> HttpResponse:
    """The page, or (htmx asking ``?fragment=status``) its status fragment, whose 286 stops the
    polling once the run or study is finished."""
    if request.htmx and request.GET.get("fragment") == "status":
        response = render(request, f"{template}#status", context)
        if not active:
            response.status_code = STOP_POLLING
        return response
    return render(request, template, context)


@role_required(Role.OPERATOR)
@require_POST
def study_cancel(request, pk: int):
    study = get_object_or_404(Study, pk=pk)
    try:
        studies.study_cancel(study=study, user=request.user)
    except BenchmarkRefused as exc:
        messages.error(request, str(exc))
    return redirect("benchmarks:study", pk=pk)


# --- sizing ----------------------------------------------------------------------------------------

def _sizing(request, graph: Graph, form: RecommendForm, error: str = "") -> HttpResponse:
    evidence = recommendations.evidence_runs(graph)
    targets = slo_targets(graph)
    return render(request, "benchmarks/sizing.html", {
        "graph": graph, "form": form, "error": error, "targets": targets, "evidence": evidence,
        "rows": reports.rows(evidence), "columns": reports.COLUMNS, "chart_json": _chart_json(evidence, targets),
        "recommendations": Recommendation.objects.filter(graph=graph).select_related(
            "created_by", "applied_by").prefetch_related("runs")[:10],
        "aiconfigurator": estimates_for(graph.head.graph_spec) if graph.head else None,
    }, status=400 if error else 200)


@role_required(Role.VIEWER)
@require_safe
def graph_sizing(request, name: str):
    return _sizing(request, get_object_or_404(Graph, name=name), RecommendForm())


@role_required(Role.OPERATOR)
@require_POST
def graph_recommend(request, name: str):
    graph = get_object_or_404(Graph, name=name)
    form = RecommendForm(request.POST)
    if not form.is_valid():
        return _sizing(request, graph, form, "check the targets")
    try:
        recommendations.recommendation_create(graph=graph, user=request.user, via="ui",
                                              ttft_ms=form.cleaned_data.get("ttft_ms"),
                                              itl_ms=form.cleaned_data.get("itl_ms"))
    except ProfileError as exc:
        return _sizing(request, graph, form, " ".join(m for ms in exc.errors.values() for m in ms))
    except BenchmarkRefused as exc:
        return _sizing(request, graph, form, str(exc))
    return redirect("benchmarks:sizing", name=name)


@role_required(Role.OPERATOR)
@require_POST
def recommendation_apply(request, pk: int):
    rec = get_object_or_404(Recommendation.objects.select_related("graph"), pk=pk)
    try:
        recommendations.recommendation_apply(recommendation=rec, user=request.user, via="ui")
        messages.success(request, f"Applying recommendation #{rec.pk}: scale operations on {rec.graph.name} follow.")
    except BenchmarkRefused as exc:
        messages.error(request, str(exc))
    return redirect("benchmarks:sizing", name=rec.graph.name)
