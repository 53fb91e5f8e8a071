"""HTML pages (htmx). One URL serves a page or its fragment; every action calls the same
service as the API."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from accounts.roles import Role, role_required, user_role
from clusters.selectors import parse_target
from core.catalog import TEMPLATES, build_spec
from core.dgd.render import API_VERSIONS, V1BETA1, normalise_api_version, served_api_versions
from core.errors import ManifestError, OperationRefused
from core.findings import Severity
from core.untrusted import QueryParameterError, parse_int_text
from core.validation import Report

from . import fragments, live, operations, services
from .companions import companions_context
from .filters import LIST_FILTERS, list_query
from .forms import TemplateForm
from .models import Graph, GraphState, Operation
from .previews import manifest_preview, revision_preview
from .selectors import LIST_ROW, graph_list_page
from .status_view import (
    WITH_DEPLOYMENT,
    WITH_HEAD_AND_DEPLOYMENT,
    WITH_STAMP,
    deployment_of,
    status_context,
)

STATE_LABELS = dict(GraphState.choices)


def api_version_of(request, default: str = V1BETA1) -> str:
    """?apiVersion=, else ``default`` (a revision's own: Revision.api_version)."""
    try:
        return normalise_api_version(request.GET.get("apiVersion") or default)
    except ValueError:
        return default


@role_required(Role.VIEWER)
@require_safe
def graph_list(request):
    given, narrowed, filter_errors, archived = list_query(request.GET)
    page = graph_list_page(narrowed, archived=archived, number=request.GET.get("page"))
    # "Updated ... ago" is shown to the minute: the rows are rendered once per minute and input.
    now = timezone.now().replace(second=0, microsecond=0)
    can_operate = user_role(request.user) >= Role.OPERATOR
    rows = list(page.object_list)

    def produce() -> str:
        graphs = [dict(zip(LIST_ROW, row, strict=True)) for row in rows]
        for g in graphs:
            g["live_label"] = STATE_LABELS.get(g["live_state"], g["live_state"])
        return render_to_string("graphs/list.html#rows", {"graphs": graphs, "now": now, "can_operate": can_operate,
                                                          "narrowed": narrowed.narrowed})

    rows_html = fragments.render("graphs-list-rows", (can_operate, now, rows, narrowed.narrowed), produce)
    if request.htmx and request.GET.get("fragment") == "rows":  # pushed: the rows' state or pods changed
        return HttpResponse(rows_html)
    # What the pager's links keep: the filters that applied.
    kept = {k: v for k, v in (("q", given["search"]), *((k, given[k]) for k in LIST_FILTERS),
                              ("archived", "1" if archived else ""))
            if v and {"q": "search"}.get(k, k) not in filter_errors}
    shown = urlencode({**kept, **({"page": page.number} if page.number > 1 else {})})
    return render(request, "graphs/list.html", {
        "rows_html": rows_html, "page": page, "query": given["search"], "given": given, "archived": archived,
        "filter_errors": filter_errors, "narrowed": narrowed.narrowed, "kept": urlencode(kept),
        "shown": shown, "rows_version": live.rows_version(rows),
        "states": GraphState.choices, "templates": TEMPLATES.values()})


@role_required(Role.OPERATOR)
@require_http_methods(["GET", "POST"])
def graph_new(request):
    template = request.GET.get("template") or request.POST.get("template") or "vllm-disagg"
    if template not in TEMPLATES:
        template = "vllm-disagg"
    tpl = TEMPLATES[template]
    initial = {"template": template, "backend": tpl.backend, "model": tpl.model,
               "prefill_gpus": tpl.gpus, "decode_gpus": tpl.gpus, "decode_replicas": tpl.worker_replicas,
               "router_mode": tpl.router_mode or "round-robin"}
    form = TemplateForm(request.POST or None, initial=initial)
    preview_yaml, report, error = "", None, ""
    api_version = normalise_api_version(request.POST.get("preview_api_version") or V1BETA1)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            spec = build_spec(template=d["template"], name=d["name"], namespace=d["namespace"], model=d["model"],
                              backend=d["backend"], dynamo_version=d["dynamo_version"],
                              prefill=form.pool("prefill"), decode=form.pool("decode"),
                              router_mode=d.get("router_mode") or None,
                              planner=form.planner_settings())
            preview_yaml, report = manifest_preview(spec, api_version)
            if request.POST.get("action") == "create":
                graph = services.graph_create(spec=spec, user=request.user, description=d["description"],
                                              message=f"created from template {d['template']}")
                messages.success(request, f"Graph {graph.name} created (revision 1).")
                errors = [f for f in report.findings if f.severity == Severity.ERROR]
                if errors:
                    # Stored as a draft, as its preview said: an apply is refused until it is fixed.
                    messages.warning(request, f"Stored as not appliable: its manifest has {len(errors)} "
                                              f"error{'s' if len(errors) > 1 else ''} a cluster would refuse "
                                              f"({errors[0].path}: {errors[0].message}). Fix them with Edit YAML "
                                              "before applying.")
                return redirect("graphs:detail", name=graph.name)
        except forms.ValidationError as exc:  # a Planner setting, on its field
            form.add_error(None, exc)
        except ManifestError as exc:
            report = Report(exc.findings)
        except services.GraphConflict as exc:  # the name, taken between the form's check and the insert
            form.add_error("name", str(exc))
        except ValueError as exc:
            error = str(exc)
    # A preview of a form that does not validate says what is missing, not just "fill in the form".
    missing = [(form[f].label if f in form.fields else "Form", " ".join(errs)) for f, errs in form.errors.items()
               ] if form.is_bound else []
    context = {"form": form, "template": tpl, "templates": TEMPLATES.values(), "preview_yaml": preview_yaml,
               "form_problems": missing,
               "pool_groups": form.pool_groups(), "planner_fields": form.planner_group(),
               "report": report, "error": error, "api_version": api_version, "api_versions": API_VERSIONS}
    if request.htmx and request.POST.get("action") != "create":
        return render(request, "graphs/new.html#preview", context)
    return render(request, "graphs/new.html", context, status=400 if request.method == "POST" else 200)


@role_required(Role.VIEWER)
@require_safe
def graph_detail(request, name: str):
    graph = get_object_or_404(Graph.objects.select_related(*WITH_HEAD_AND_DEPLOYMENT, *WITH_STAMP), name=name)
    if graph.head is None:
        raise Http404("graph has no revision")
    head = graph.head
    api_version = api_version_of(request, head.api_version)

    def card(part: str):
        # A revision never changes: its cards are rendered once per process and API version
        # (the time too: a recreated database reuses ids).
        def produce() -> str:
            manifest_yaml, report = revision_preview(head, api_version)
            return render_to_string(f"graphs/detail.html#{part}", {
                "graph": graph, "spec": head.graph_spec, "manifest_yaml": manifest_yaml, "report": report,
                "api_version": api_version, "api_versions": API_VERSIONS, **companions_context(head)})
        return fragments.render(f"graph-{part}", (head.pk, head.created_at, api_version), produce)

    if request.htmx and request.GET.get("fragment") == "manifest":
        return HttpResponse(card("manifest"))
    # A stored revision with errors says so where it would be applied (findings in its own version).
    head_errors = [f for f in revision_preview(head, head.api_version)[1].findings if f.severity == Severity.ERROR]
    context = {"graph": graph, "spec_html": card("spec"), "manifest_html": card("manifest"),
               "head_errors": head_errors, "api_version": api_version, "apply_api_version": head.api_version,
               "apply_api_versions": served_api_versions(head.graph_spec),
               "status_version": live.version_from(graph, deployment_of(graph)),
               **status_context(graph, deployment_of(graph))}
    return render(request, "graphs/detail.html", context)


@role_required(Role.VIEWER)
@require_safe
def graph_status(request, name: str):
    """The status fragment (state, diagnosis, pods, events, operations), fetched by the page when its
    stream (graphs/live.py) says the status changed, or every 2 s while the stream is cut."""
    graph = get_object_or_404(Graph.objects.select_related(*WITH_DEPLOYMENT, *WITH_STAMP), name=name)
    context = {"graph": graph, **status_context(graph, deployment_of(graph))}
    return render(request, "graphs/detail.html#status", context)


def _operation_response(request, graph: Graph, op: Operation | None):
    """The new status, and the action line above it cleared (out of band): the operation the
    user asked for now shows in the status."""
    context = {"graph": graph, **status_context(graph)}
    html = render_to_string("graphs/detail.html#status", context, request) + ACTION_MESSAGE_CLEARED
    return HttpResponse(html)


ACTION_MESSAGE_CLEARED = '<div id="action-message" hx-swap-oob="true" aria-live="polite"></div>'


def _refused(request, graph: Graph, message: str, *, force: dict | None = None):
    """A refused action, in the line above the status that the status refresh never replaces (the
    message stays until the next action). ``force``: the fields of the same request with
    force=1, offered as a button where forcing is what the user may want (a Planner-managed pool)."""
    html = render_to_string("graphs/_refusal.html", {"graph": graph, "message": message, "force": force}, request)
    response = HttpResponse(html, status=409)
    response["HX-Retarget"] = "#action-message"
    response["HX-Reswap"] = "innerHTML"
    return response


@role_required(Role.OPERATOR)
@require_POST
def graph_apply(request, name: str):
    graph = get_object_or_404(Graph.objects.select_related("head"), name=name)
    # The target select sends "local" or "kubernetes:<cluster>/<namespace>".
    runtime, cluster, namespace = parse_target(request.POST.get("runtime", "local"))
    try:
        op = operations.graph_apply(graph=graph, user=request.user, via="ui", runtime=runtime,
                                      cluster=cluster, namespace=namespace,
                                      api_version=request.POST.get("apiVersion") or None,
                                      dry_run=request.POST.get("dry_run") == "1",
                                      force=request.POST.get("force") == "1",
                                      recreate=request.POST.get("recreate") == "1",
                                      confirm=request.POST.get("confirm", ""))
    except (OperationRefused, ValueError) as exc:
        return _refused(request, graph, str(exc))
    return _operation_response(request, graph, op)


@role_required(Role.OPERATOR)
@require_POST
def graph_scale(request, name: str):
    graph = get_object_or_404(Graph, name=name)
    try:
        replicas = parse_int_text(request.POST.get("replicas", "").strip(), "replicas", minimum=0)
    except QueryParameterError:
        return _refused(request, graph, "replicas must be a whole number")
    service = request.POST.get("service", "")
    try:
        op = operations.graph_scale(graph=graph, user=request.user, via="ui", service=service, replicas=replicas,
                                      force=request.POST.get("force") == "1")
    except OperationRefused as exc:
        force = {"service": service, "replicas": replicas} if exc.forceable else None
        return _refused(request, graph, str(exc), force=force)
    return _operation_response(request, graph, op)


@role_required(Role.OPERATOR)
@require_POST
def graph_undeploy(request, name: str):
    graph = get_object_or_404(Graph, name=name)
    try:
        op = operations.graph_undeploy(graph=graph, user=request.user, via="ui")
    except OperationRefused as exc:
        return _refused(request, graph, str(exc))
    return _operation_response(request, graph, op)


@role_required(Role.OPERATOR)
@require_POST
def graph_delete(request, name: str):
    graph = get_object_or_404(Graph, name=name)
    try:
        services.graph_delete(graph=graph, user=request.user,
                              with_benchmarks=request.POST.get("with_benchmarks") == "1")
    except services.GraphConflict as exc:
        messages.error(request, str(exc))
        return redirect("graphs:detail", name=name)
    messages.success(request, f"Graph {name} deleted.")
    return redirect("graphs:list")


@role_required(Role.VIEWER)
@require_safe
def pod_log(request, name: str, pod: str):
    graph = get_object_or_404(Graph, name=name)
    try:
        text = operations.pod_log(graph=graph, pod=pod, lines=300)
    except OperationRefused as exc:
        raise Http404(str(exc)) from None
    context = {"graph": graph, "pod": pod, "log": text}
    if request.htmx:
        return render(request, "graphs/log.html#log", context)
    return render(request, "graphs/log.html", context)


@require_safe
def home(request):
    return redirect(reverse("graphs:list"))
