"""The pages that take a graph's manifest in and give it out: import (a file, its companions, a
kustomize archive), the YAML editor and its live check, the revisions with their diff, export.
Writes go through graphs.services, as the API's do."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from accounts.roles import Role, role_required
from core.dgd.render import API_VERSIONS, V1BETA1
from core.documents import Bundle, load_bundle
from core.errors import ManifestError, OperationRefused
from core.findings import Finding, Severity
from core.specio import dump_yaml
from core.untrusted import QueryParameterError, query_int
from core.validation import Report, validate_manifest

from . import rollouts, services
from .companions import companions_context, label
from .forms import ManifestForm
from .models import Deployment, Graph, Revision
from .version_fields import read_version
from .views import api_version_of


def _manifest_report(text: str, dynamo_version: str | None) -> tuple[Bundle | None, Report]:
    """The file's graphs and companions, and the findings of its first graph (each graph is
    validated again when it is imported)."""
    try:
        bundle = load_bundle(text, max_bytes=settings.MAX_MANIFEST_BYTES)
    except ManifestError as exc:
        return None, Report(exc.findings)
    report = validate_manifest(bundle.manifest, dynamo_version=dynamo_version)
    kept = services.companions_finding(bundle)
    if kept is not None:
        report.findings.append(kept)
    if len(bundle.graphs) > 1:
        names = ", ".join(str((g.get("metadata") or {}).get("name")) for g in bundle.graphs)
        report.findings.append(Finding(Severity.INFO, "several_graphs", "",
                                       f"the file holds {len(bundle.graphs)} graphs ({names}): each is imported as a "
                                       "graph of its own; the findings shown are the first one's"))
    return bundle, report


@role_required(Role.VIEWER)
@require_POST
def manifest_check(request):
    """The YAML editor's live validation: findings for the text as typed; stores nothing."""
    text = request.POST.get("yaml", "")
    version = request.POST.get("dynamo_version") or None
    try:
        version = read_version(version, known=False) if version else None
    except ValueError as exc:
        return render(request, "graphs/_findings.html",
                      {"report": Report([Finding(Severity.ERROR, "dynamo_version", "dynamo_version", str(exc))])})
    _obj, report = _manifest_report(text, version)
    return render(request, "graphs/_findings.html", {"report": report, "live": True})


@role_required(Role.OPERATOR)
@require_http_methods(["GET", "POST"])
def graph_import(request, name: str | None = None):
    """Paste or upload a manifest; for an existing graph, edit its YAML (a new revision)."""
    graph = get_object_or_404(Graph.objects.select_related("head"), name=name) if name else None
    initial, conversion_error = {}, ""
    if graph and graph.head and request.method == "GET":
        # Edited in the version it was imported (or last edited) in: nothing is converted.
        api_version = api_version_of(request, graph.head.api_version)
        try:
            text = dump_yaml(services.revision_manifest(graph.head, api_version))
        except services.LossyConversion as exc:
            conversion_error = str(exc)
            text = dump_yaml(services.revision_manifest(graph.head))
        initial = {"yaml": text, "expected_revision": graph.head.number}
    form = ManifestForm(request.POST or None, request.FILES or None, initial=initial)
    if conversion_error:
        form.add_error(None, conversion_error)
    report, status = None, 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            text = form.cleaned_data["yaml"]
            bundle, report = _manifest_report(text, form.cleaned_data["dynamo_version"])
            if bundle is not None and report.spec is not None:
                try:
                    if graph is not None and len(bundle.graphs) > 1:
                        raise ManifestError.single("", f"the text holds {len(bundle.graphs)} graphs; {graph.name}'s "
                                                       "YAML holds one", "several_graphs",
                                                   "import the file from the graph list instead")
                    if graph is not None:
                        obj = bundle.manifest
                        services.graph_update(graph=graph, spec=report.spec, user=request.user,
                                              message=form.cleaned_data["message"] or "edited YAML",
                                              expected_head=form.cleaned_data.get("expected_revision"),
                                              source_yaml=text, source_api_version=obj.get("apiVersion", ""),
                                              companions=bundle.companions or None)
                        target = graph
                    else:
                        before = Graph.objects.filter(name=report.spec.name).values_list(
                            "head__number", flat=True).first()
                        imported = services.graph_import_bundle(
                            bundle=bundle, user=request.user, text=text,
                            dynamo_version=form.cleaned_data["dynamo_version"], message=form.cleaned_data["message"])
                        target = imported[0][0]
                        if len(imported) > 1:
                            messages.success(request, "Imported " + ", ".join(g.name for g, _r, _p in imported) + ".")
                    built = form.cleaned_data.get("built_from")
                    how = f" (built with kubectl kustomize from {built or 'the archive'})" if built is not None else ""
                    if graph is None and before is not None and target.head.number == before:
                        messages.info(request, f"{target.name} is unchanged: the manifest is its revision "
                                               f"{before}, so no revision was made{how}.")
                    else:
                        messages.success(request, f"Saved {target.name} as revision {target.head.number}{how}.")
                    return redirect("graphs:detail", name=target.name)
                except ManifestError as exc:
                    report = Report(exc.findings)
                except services.GraphConflict as exc:
                    form.add_error(None, str(exc))
    return render(request, "graphs/import.html", {"form": form, "graph": graph, "report": report}, status=status)


@role_required(Role.VIEWER)
@require_safe
def revision_list(request, name: str):
    graph = get_object_or_404(Graph, name=name)
    revisions = graph.revisions.select_related("created_by", "git_commit").order_by("-number")
    diff, old, new = "", None, None
    head = graph.head
    api_version = api_version_of(request, head.api_version if head else V1BETA1)
    if request.GET.get("from") and request.GET.get("to"):
        try:
            old = revisions.get(number=query_int(request.GET, "from"))
            new = revisions.get(number=query_int(request.GET, "to"))
        except (QueryParameterError, Revision.DoesNotExist):
            messages.error(request, "Pick two existing revisions to compare.")
        else:
            diff = services.revision_diff(old, new, api_version) or "(no difference in the rendered manifest)"
    rows = [(r, [label(c) for c in r.companions]) for r in revisions]
    shown = new or head  # the companions listed whole: the compared revision's, else the latest's
    deployment = Deployment.objects.filter(graph=graph, active=True).select_related("revision").first()
    running = deployment.revision.number if deployment and deployment.revision else None
    # Rolling back is offered once its diff against what runs is on the page.
    rollback = new if (old and new and running == old.number and new.number != running) else None
    return render(request, "graphs/revisions.html", {"graph": graph, "rows": rows, "revisions": revisions,
                                                      "running": running, "rollback": rollback,
                                                      "diff": diff, "old": old, "new": new,
                                                      "api_version": api_version, "api_versions": API_VERSIONS,
                                                      **(companions_context(shown) if shown else {}),
                                                      "companions_revision": shown.number if shown else None})


@role_required(Role.OPERATOR)
@require_POST
def revision_rollback(request, name: str):
    """Run an earlier revision again (rollouts.graph_rollback): the graph page follows it."""
    graph = get_object_or_404(Graph, name=name)
    try:
        number = query_int(request.POST, "revision")
        if not number:
            raise QueryParameterError("revision: give the number of the revision to run again")
        op = rollouts.graph_rollback(graph=graph, revision_number=number, user=request.user, via="ui")
    except (QueryParameterError, OperationRefused) as exc:
        messages.error(request, f"Not rolled back: {exc}")
        return redirect("graphs:revisions", name=graph.name)
    messages.success(request, f"Rolling back to revision {number}: {op.revision.message} (operation #{op.pk}).")
    return redirect("graphs:detail", name=graph.name)


@role_required(Role.VIEWER)
@require_safe
def export(request, name: str):
    graph = get_object_or_404(Graph.objects.select_related("head"), name=name)
    number = query_int(request.GET, "revision")
    revision = graph.head
    if number:
        try:
            revision = graph.revisions.get(number=number)
        except Revision.DoesNotExist:
            raise Http404("no such revision") from None
    api_version = api_version_of(request, revision.api_version)
    try:
        text = services.revision_export(revision, api_version)
    except services.LossyConversion as exc:
        return HttpResponse(str(exc), status=409, content_type="text/plain; charset=utf-8")
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    filename = f"{graph.name}-r{revision.number}-{api_version.split('/')[-1]}.yaml"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
