"""Repository pages: the list (and registering one), a repository's files and graphs, its
last sync, and the product's changes on their way to Git with any conflict in three ways."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from accounts.roles import Role, role_required, user_role
from availability.waiting import waits_on
from graphs.models import Graph

from . import services
from .forms import RepositoryForm
from .models import Export, Repository
from .sync import repository_sync


@role_required(Role.VIEWER)
@require_http_methods(["GET", "POST"])
@sensitive_post_parameters("password", "ssh_key", "webhook_secret")
def repository_list(request):
    form = RepositoryForm(request.POST or None)
    status = 200
    if request.method == "POST":
        status = 400
        if user_role(request.user) < Role.ADMIN:
            messages.error(request, "Registering a repository needs the admin role.")
            status = 403
        elif form.is_valid():
            try:
                repo = services.repository_create(**form.cleaned_data, user=request.user)
            except services.Refused as exc:
                form.add_error(None, str(exc))
            else:
                services.repository_sync_later(repo)
                messages.success(request, f"Repository {repo.name} registered; syncing it now.")
                return redirect("repos:detail", repo.name)
    repos = Repository.objects.all()
    return render(request, "repos/list.html", {"repositories": repos, "form": form,
                                               "can_add": user_role(request.user) >= Role.ADMIN}, status=status)


@role_required(Role.VIEWER)
@require_safe
def repository_detail(request, name: str):
    repo = get_object_or_404(Repository, name=name)
    links = repo.links.select_related("graph", "graph__head").order_by("path")
    exports = repo.exports.select_related("revision__graph", "requested_by").order_by("-id")[:50]
    return render(request, "repos/detail.html", {
        "repo": repo, "links": links, "exports": exports, "counts": services.link_state_counts(repo),
        "webhook_url": request.build_absolute_uri(f"/api/repos/{repo.name}/webhook/"),
        "can_sync": user_role(request.user) >= Role.OPERATOR})


@waits_on("the Git host")
@role_required(Role.OPERATOR)
@require_POST
def repository_sync_now(request, name: str):
    repo = get_object_or_404(Repository, name=name)
    result = repository_sync(repository=repo, via="ui", wait=False)
    if result.error:
        messages.error(request, f"Sync of {repo.name} failed: {result.error}")
    else:
        c = result.as_dict()["counts"]
        level = messages.warning if c["refused"] else messages.success
        level(request, f"Synced {repo.name} to {(result.commit or 'an empty branch')[:12]}: {c['imported']} "
                       f"revision(s) imported, {c['removed']} removed from Git, {c['refused']} refused.")
    return redirect("repos:detail", repo.name)


@role_required(Role.OPERATOR)
@require_POST
def graph_link(request, name: str):
    """The repository page's "Link a graph": an existing graph kept in one of its files."""
    repo = get_object_or_404(Repository, name=name)
    graph_name, path = request.POST.get("graph", ""), request.POST.get("path", "")
    target = Graph.objects.filter(name=graph_name[:63]).first()
    if target is None:
        messages.error(request, f"No graph named {graph_name[:63]!r}.")
        return redirect("repos:detail", repo.name)
    try:
        services.graph_link(repository=repo, graph=target, path=path, user=request.user)
    except services.Refused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{target.name} is now kept in {repo.name}:{path.strip().lstrip('/')}; "
                                  "its file becomes the graph's next revision at the sync queued now.")
    return redirect("repos:detail", repo.name)


@role_required(Role.ADMIN)
@require_POST
def repository_delete(request, name: str):
    repo = get_object_or_404(Repository, name=name)
    services.repository_delete(repository=repo, user=request.user)
    messages.success(request, f"Repository {name} removed; its graphs and their revisions stay.")
    return redirect("repos:list")


@role_required(Role.OPERATOR)
@require_POST
def graph_commit(request, name: str, graph: str):
    """The graph page's "Commit to Git": apply where Argo CD or Flux applies from Git."""
    repo = get_object_or_404(Repository, name=name)
    target = get_object_or_404(Graph.objects.select_related("head"), name=graph)
    try:
        export = services.graph_commit(graph=target, repository=repo, user=request.user)
    except services.Refused as exc:
        messages.error(request, str(exc))
    else:
        export.refresh_from_db()
        messages.success(request, f"Revision {target.head.number} of {target.name} to Git: "
                                  f"{export.get_state_display().lower()}"
                                  + (f" on {export.branch}" if export.branch else "") + ".")
    return redirect("graphs:detail", target.name)


@role_required(Role.VIEWER)
@require_safe
def export_detail(request, name: str, pk: int):
    export = get_object_or_404(Export.objects.select_related("revision__graph", "repository"),
                               pk=pk, repository__name=name)
    return render(request, "repos/export.html", {"export": export, "repo": export.repository})
