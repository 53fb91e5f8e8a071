"""HTML: the metrics panel of a graph's page (an htmx fragment), its chart data (JSON for
static/js/charts.js), the objectives form, and the overview of all graphs.

No view waits on Prometheus for long: the panel renders without asking it at all (the charts
fetch their data afterwards), and the data and overview views answer within the client's
short timeout, or at once while the circuit is open, with the reason in words."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods

from accounts.roles import Role, role_required, user_role
from availability.waiting import waits_on
from graphs import fragments
from graphs.engines import deployment_simulation
from graphs.models import Deployment, Graph

from . import charts, services
from .forms import ObjectivesForm
from .models import Objectives


def _panel_context(request, graph: Graph, form: ObjectivesForm | None = None, saved: bool = False) -> dict:
    objectives = Objectives.objects.filter(graph=graph).first()
    if form is None:
        form = ObjectivesForm(initial={"ttft_ms": objectives.ttft_ms, "itl_ms": objectives.itl_ms,
                                       "gpu_hour_price": objectives.gpu_hour_price} if objectives else None)
    window = request.GET.get("window") or charts.DEFAULT_WINDOW
    deployment = Deployment.objects.filter(graph=graph).select_related("revision").first()
    return {"graph": graph, "objectives": charts.objectives_dict(objectives), "form": form, "saved": saved,
            "simulation": deployment_simulation(deployment),
            "windows": charts.WINDOWS, "window": window if window in charts.WINDOWS else charts.DEFAULT_WINDOW,
            "can_edit_objectives": user_role(request.user) >= Role.OPERATOR}


OVERVIEW_PAGE_SIZE = 50


@role_required(Role.VIEWER)
@require_GET
def graph_panel(request, name: str):
    """The panel for the graph page: charts, window picker, SLO and cost, objectives form."""
    graph = get_object_or_404(Graph, name=name)
    return render(request, "metrics/_graph_panel.html", _panel_context(request, graph))


@role_required(Role.VIEWER)
@require_GET
def graph_chart(request, name: str):
    graph = get_object_or_404(Graph.objects.select_related("head"), name=name)
    try:
        data = charts.chart_data(graph, request.GET.get("window"))
    except charts.WindowError as exc:
        return JsonResponse({"detail": str(exc)}, status=400)
    response = JsonResponse(data)
    response["Cache-Control"] = "private, max-age=0"
    return response


@role_required(Role.OPERATOR)
@require_http_methods(["POST"])
def objectives_edit(request, name: str):
    """Save SLO targets and price; answers with the panel's objectives fragment."""
    graph = get_object_or_404(Graph, name=name)
    form = ObjectivesForm(request.POST)
    status, saved = 400, False
    if form.is_valid():
        try:
            services.objectives_set(graph=graph, user=request.user, **form.cleaned_data)
            status, saved, form = 200, True, None
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
    return render(request, "metrics/_graph_panel.html#objectives", _panel_context(request, graph, form, saved),
                  status=status)


@waits_on("Prometheus", htmx_only=True)  # the page reads the database; its numbers, Prometheus
@role_required(Role.VIEWER)
@require_GET
def overview(request):
    """Every applied graph (50 a page) with its current TTFT and ITL p90, request rate and SLO
    state. The page itself reads only the database, so that it costs the same whether
    Prometheus is fast, slow or down; its numbers come in the ``data`` fragment, which htmx
    loads right after and refreshes (the same URL with an HX-Request header)."""
    graphs = (Graph.objects.filter(deployment__isnull=False).select_related("deployment")
              .only("name", "head", "deployment__runtime", "deployment__namespace", "deployment__graph_id")
              .order_by("name"))
    page = Paginator(graphs, OVERVIEW_PAGE_SIZE).get_page(request.GET.get("page"))
    graphs = list(page.object_list)
    context = {"page": page, "window": charts.window_label(charts.CURRENT_WINDOW)}
    if not request.htmx:
        rows = {**context, "rows": [(g, None) for g in graphs], "errors": [], "loaded": False}
        shown = (page.number, [(g.name, g.deployment.runtime) for g in graphs])
        html = fragments.render("metrics-overview-rows", shown,
                                lambda: render_to_string("metrics/overview.html#data", rows))
        return render(request, "metrics/overview.html", {**context, "data_html": html})
    summaries = charts.graph_summaries(graphs)
    rows = [(graph, summaries["rows"][graph.pk]) for graph in graphs]
    # The numbers move once a scrape interval (graph_summaries asks Prometheus on its boundaries),
    # while every open overview asks for them every 15 s: rendered once per process for what they show.
    shown = (page.number, [(g.name, g.deployment.runtime, row) for g, row in rows], summaries["errors"])
    return HttpResponse(fragments.render("metrics-overview-numbers", shown, lambda: render_to_string(
        "metrics/overview.html#data", {**context, "rows": rows, "errors": summaries["errors"], "loaded": True})))
