"""Sizing pages (htmx): ask AIConfigurator for an estimate, follow it, read its answer (agg
against disagg, the Pareto chart, every ranked configuration), make a graph from one, compare
two. Every action calls the same service as the API; refusals are shown where they happen."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from accounts.roles import Role, role_required, user_role
from clusters.models import Cluster
from core.errors import Refused
from core.specio import dump_yaml
from graphs.models import Graph

from . import clusters as dgdr_clusters
from . import configurations, dgdr, services
from .forms import AdoptForm, DgdrForm, EstimateForm, GraphForm
from .models import DeploymentRequest, Estimate

STOP_POLLING = 286
POOL_COLUMNS = {
    "agg": [("tp", "TP"), ("pp", "PP"), ("bs", "batch")],
    "disagg": [("(p)workers", "prefill workers"), ("(p)tp", "prefill TP"), ("(p)bs", "prefill batch"),
               ("(d)workers", "decode workers"), ("(d)tp", "decode TP"), ("(d)bs", "decode batch")],
}


def _chart(estimate: Estimate) -> dict:
    """What static/js/sizing.js draws: each experiment's Pareto front and its ranked points. The
    page carries it as JSON in a data attribute, not a json_script island: htmx (allowScriptTags
    false) drops <script> elements from the status fragment that brings the chart when the
    estimate ends while its page is open."""
    experiments = estimate.result.get("experiments", {})
    return {name: {"pareto": e["pareto"], "ranked": [{"x": c["tokens/s/user"], "y": c["tokens/s/gpu_cluster"],
                                                      "rank": c["rank"]} for c in e["configurations"]]}
            for name, e in experiments.items()}


def _context(estimate: Estimate, **extra) -> dict:
    experiments = estimate.result.get("experiments", {})
    return {"estimate": estimate, "experiments": experiments, "pool_columns": POOL_COLUMNS,
            "chart": json.dumps(_chart(estimate)),
            "graph_form": GraphForm(initial={"mode": estimate.result.get("chosen"), "rank": 1}),
            **_dgdr_context(estimate), **extra}


def _dgdr_context(estimate: Estimate, form: DgdrForm | None = None) -> dict:
    """The estimate's inputs as a DGDR for the operator's own profiler: the preview (exactly what
    an apply sends, the same defaults), the form that applies it, and the DGDRs applied from it."""
    if not estimate.is_finished or estimate.state != "succeeded":
        return {}
    name = f"estimate-{estimate.pk}"
    obj = dgdr.render(estimate.estimate_inputs, name=name)
    names = list(Cluster.objects.order_by("name").values_list("name", flat=True))
    return {"dgdr_yaml": dump_yaml(obj), "dgdr_errors": dgdr.schema_errors(obj), "clusters": names,
            "dgdr_form": form or DgdrForm(clusters=names, initial={"name": name}),
            "dgdr_requests": estimate.deployment_requests.select_related("cluster", "graph").order_by("-created_at"),
            "adopt_form": AdoptForm()}


@role_required(Role.VIEWER)
@require_http_methods(["GET", "POST"])
def estimate_new(request):
    form = EstimateForm(request.POST or None)
    error = ""
    if request.method == "POST":
        if not _operator(request):
            return render(request, "sizing/new.html", {"form": form, "error": "This needs the operator role."},
                          status=403)
        if form.is_valid():
            try:
                estimate, cached = services.estimate_request(inputs=form.inputs(), user=request.user)
            except Refused as exc:
                error = str(exc)
            else:
                if cached:
                    messages.info(request, f"Answered from estimate #{estimate.pk}: the same inputs, "
                                           "the same AIConfigurator.")
                return redirect("sizing:estimate", pk=estimate.pk)
    recent = Estimate.objects.select_related("requested_by")[:10]
    return render(request, "sizing/new.html", {"form": form, "error": error, "recent": recent},
                  status=400 if error or form.errors else 200)


def _operator(request) -> bool:
    return user_role(request.user) >= Role.OPERATOR


@role_required(Role.VIEWER)
@require_safe
def estimate_list(request):
    page = Paginator(Estimate.objects.select_related("requested_by"), 50).get_page(request.GET.get("page"))
    return render(request, "sizing/list.html", {"page": page, "estimates": page.object_list})


@role_required(Role.VIEWER)
@require_safe
def estimate_detail(request, pk: int):
    estimate = get_object_or_404(Estimate, pk=pk)
    context = _context(estimate, can_operate=_operator(request))
    if request.htmx and request.GET.get("fragment") == "status":
        response = render(request, "sizing/detail.html#status", context)
        if estimate.is_finished:
            response.status_code = STOP_POLLING
        return response
    return render(request, "sizing/detail.html", context)


@role_required(Role.OPERATOR)
@require_POST
def estimate_graph(request, pk: int):
    estimate = get_object_or_404(Estimate, pk=pk)
    form = GraphForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        return render(request, "sizing/detail.html", _context(estimate, can_operate=True, error=errors), status=400)
    d = form.cleaned_data
    before = Graph.objects.filter(name=d["name"]).values_list("head__number", flat=True).first()
    try:
        made = configurations.graph_from_estimate(estimate=estimate, name=d["name"], rank=d["rank"], mode=d["mode"],
                                                  dynamo_version=d["dynamo_version"], user=request.user)
    except Refused as exc:
        return render(request, "sizing/detail.html", _context(estimate, can_operate=True, error=str(exc)),
                      status=getattr(exc, "status", 409))
    if made.revision == before:  # the same configuration again: the importer made no empty revision
        messages.info(request, f"{made.graph} is unchanged: revision {made.revision} is already estimate "
                               f"#{estimate.pk}'s {made.mode} rank {made.rank}.")
    else:
        messages.success(request, f"Made {made.graph} revision {made.revision} from estimate #{estimate.pk}, "
                                  f"{made.mode} rank {made.rank} (mocker timed by {made.timing}).")
    return redirect("graphs:detail", made.graph)


@role_required(Role.VIEWER)
@require_safe
def estimate_compare(request):
    ids = [v for v in (request.GET.get("a"), request.GET.get("b")) if v and v.isdigit()]
    if len(ids) != 2:
        return render(request, "sizing/compare.html", {"error": "Pick two estimates (?a=ID&b=ID)."}, status=400)
    a, b = (get_object_or_404(Estimate, pk=int(i)) for i in ids)
    try:
        body = services.estimates_compare(a, b)
    except Refused as exc:
        return render(request, "sizing/compare.html", {"error": str(exc)}, status=400)
    return render(request, "sizing/compare.html", {"a": a, "b": b, "body": body,
                                                   "rows": list(zip(body["best"], (a, b), strict=True))})


@role_required(Role.OPERATOR)
@require_POST
def estimate_dgdr(request, pk: int):
    """Apply the estimate's DGDR to a registered cluster; the page then follows it."""
    estimate = get_object_or_404(Estimate, pk=pk)
    names = list(Cluster.objects.order_by("name").values_list("name", flat=True))
    form = DgdrForm(request.POST, clusters=names)
    error = ""
    if form.is_valid():
        d = form.cleaned_data
        try:
            req = dgdr_clusters.dgdr_apply(estimate=estimate, cluster=Cluster.objects.get(name=d["cluster"]),
                                           namespace=d["namespace"], name=d["name"],
                                           dynamo_version=d["dynamo_version"], auto_apply=d["auto_apply"],
                                           user=request.user)
        except Refused as exc:
            error = str(exc)
        else:
            messages.success(request, f"Applied DGDR {req.namespace}/{req.name} to {req.cluster.name}: "
                                      f"{req.phase or 'no phase yet'}{': ' + req.message if req.message else ''}.")
            return redirect("sizing:estimate", pk=estimate.pk)
    else:
        error = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
    context = _context(estimate, can_operate=True, dgdr_error=error)
    context.update(_dgdr_context(estimate, form))
    return render(request, "sizing/detail.html", context, status=400 if not form.is_valid() else 409)


@role_required(Role.OPERATOR)
@require_POST
def request_refresh(request, pk: int):
    req = get_object_or_404(DeploymentRequest.objects.select_related("cluster"), pk=pk)
    try:
        req = dgdr_clusters.dgdr_refresh(req)
    except Refused as exc:
        messages.error(request, f"Could not read DGDR {req.namespace}/{req.name}: {exc}")
    else:
        messages.info(request, f"DGDR {req.namespace}/{req.name}: {req.phase or 'no phase'}"
                               f"{': ' + req.message if req.message else ''}.")
    return redirect("sizing:estimate", pk=req.estimate_id)


@role_required(Role.OPERATOR)
@require_POST
def request_adopt(request, pk: int):
    """The DGD the operator's profiler chose, as a graph revision (then applied as any other)."""
    req = get_object_or_404(DeploymentRequest.objects.select_related("cluster"), pk=pk)
    form = AdoptForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not adopted: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect("sizing:estimate", pk=req.estimate_id)
    try:
        graph, revision, _report = dgdr_clusters.dgdr_adopt(req=req, graph_name=form.cleaned_data["graph"],
                                                            user=request.user)
    except Refused as exc:
        messages.error(request, f"Not adopted: {exc}")
        return redirect("sizing:estimate", pk=req.estimate_id)
    messages.success(request, f"Adopted the DGD that DGDR {req.namespace}/{req.name} chose as {graph.name} "
                              f"revision {revision.number}.")
    return redirect("graphs:detail", graph.name)
