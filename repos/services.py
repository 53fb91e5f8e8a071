"""Every write to repositories goes through these functions (the sync and the export, the two
directions between Git and the product, live in repos/sync.py and repos/export.py).

Views, the API, the CLI, tasks and the revision signal call them; none saves a model itself."""

from __future__ import annotations

import re
import shutil
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction

from audit.services import audit_record
from core.errors import Refused, Unprocessable
from jobs.dispatch import enqueue

from .git import Auth, Mirror
from .models import Direction, Export, ExportState, GraphLink, LinkState, Mode, Repository
from .paths import is_manifest, path_problem

if TYPE_CHECKING:
    from accounts.roles import Actor
    from graphs.models import Revision


class RepositoryRefused(Refused):
    """A repository registration or change that cannot be made as asked."""

    status = 400


class RepositoryConflict(Refused):
    """The name is taken, or the repository holds graphs that would be orphaned."""


# What the API's schema states (repos/api/serializers.py uses these patterns), so a request the
# schema admits is never refused here. A URL: https, http, ssh or git with at most a user name
# before the host (a password there would show on pages: it goes in the password field), file://,
# or scp-like user@host:path. Branches and folders: names of letters, digits, '_', '-' and
# inner dots, joined by '/' (no '..', no leading dot: not .git, not outside the repository).
_HOST = r"[A-Za-z0-9._~%+-]+"
URL_PATTERN = (rf"^((https?|ssh|git)://({_HOST}@)?{_HOST}(:[0-9]+)?(/[!-~]*)?"
               r"|file:///[!-~]*|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[!-~]+)$")  # [!-~]: printable ASCII
_NAME = r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*"
BRANCH_PATTERN = rf"^{_NAME}(/{_NAME})*$"
PATH_PATTERN = rf"^/?{_NAME}(/{_NAME})*/?$"  # or empty: the repository's root
EDITABLE = ("url", "branch", "path", "mode", "username", "password", "ssh_key", "webhook_secret")
SECRET_FIELDS = ("password", "ssh_key", "webhook_secret")

# Set while the sync stores revisions it read from Git: those are not sent back as commits.
importing_from_git: ContextVar[bool] = ContextVar("importing_from_git", default=False)


def _check(*, url: str, branch: str, path: str, mode: str) -> dict:
    url = url.strip()
    if re.match(r"^https?://[^/@]*:[^/@]*@", url):
        raise RepositoryRefused("url: put the password or token in the password field, not in the URL "
                                "(a URL is shown on pages; the password never is)")
    if not re.match(URL_PATTERN, url):
        raise RepositoryRefused(f"url {url[:200]!r} is not a Git URL: use https://, ssh://, git@host:path or file://")
    if not re.match(BRANCH_PATTERN, branch or ""):
        raise RepositoryRefused(f"branch {branch[:200]!r} is not a valid branch name")
    if path and not re.match(PATH_PATTERN, path):
        raise RepositoryRefused(f"path {path[:200]!r} must be a folder inside the repository (names joined by '/')")
    if mode not in Mode.values:
        raise RepositoryRefused(f"mode {mode!r} is not one of {', '.join(Mode.values)}")
    return {"url": url, "branch": branch, "path": (path or "").strip("/"), "mode": mode}


def _public(repo: Repository) -> dict:
    """What the audit log records of a repository: never a credential."""
    return {"url": repo.url, "branch": repo.branch, "path": repo.path, "mode": repo.mode,
            **{f"{f}_set": bool(getattr(repo, f)) for f in (*SECRET_FIELDS, "username")}}


@transaction.atomic
def repository_create(*, name: str, url: str, branch: str = "main", path: str = "", mode: str = Mode.DIRECT,
                      username: str = "", password: str = "", ssh_key: str = "", webhook_secret: str = "",
                      user: Actor = None, via: str = "ui") -> Repository:
    fields = _check(url=url, branch=branch, path=path, mode=mode)
    if Repository.objects.filter(name=name).exists():
        raise RepositoryConflict(f"a repository named {name!r} is already registered")
    try:
        with transaction.atomic():
            repo = Repository.objects.create(name=name, username=username, password=password, ssh_key=ssh_key,
                                             webhook_secret=webhook_secret, created_by=user, **fields)
    except IntegrityError:
        raise RepositoryConflict(f"a repository named {name!r} is already registered") from None
    audit_record(actor=user, via=via, action="repository.create", target_type="repository", target=name,
                 after=_public(repo))
    return repo


@transaction.atomic
def repository_update(*, repository: Repository, user: Actor = None, via: str = "ui", **changes) -> Repository:
    """Change what was given; a credential left out (or blank) keeps its stored value. The
    branch, path and URL can change only while no graph is linked (the links name files there)."""
    repo = Repository.objects.select_for_update(no_key=True).get(pk=repository.pk)
    before = _public(repo)
    changes = {k: v for k, v in changes.items() if k in EDITABLE and v is not None}
    for secret in SECRET_FIELDS:
        if changes.get(secret) == "":
            changes.pop(secret)
    where = {k: changes.get(k, getattr(repo, k)) for k in ("url", "branch", "path", "mode")}
    fields = _check(**where)
    moved = [k for k in ("url", "branch", "path") if fields[k] != getattr(repo, k)]
    if moved and repo.links.exists():
        raise RepositoryConflict(f"{repo.name} holds {repo.links.count()} linked graph file(s): "
                                 f"{', '.join(moved)} cannot change; register another repository instead")
    for key, value in {**changes, **fields}.items():
        setattr(repo, key, value)
    repo.save()
    audit_record(actor=user, via=via, action="repository.update", target_type="repository", target=repo.name,
                 before=before, after=_public(repo))
    return repo


@transaction.atomic
def repository_delete(*, repository: Repository, user: Actor = None, via: str = "ui") -> None:
    """Forget a repository. Its graphs stay, with their revisions and the commits recorded on them."""
    audit_record(actor=user, via=via, action="repository.delete", target_type="repository",
                 target=repository.name, before=_public(repository))
    mirror = mirror_for(repository).path
    repository.delete()
    transaction.on_commit(lambda: shutil.rmtree(mirror, ignore_errors=True))


def mirror_for(repo: Repository) -> Mirror:
    folder = Path(settings.VAR_DIR) / "repos" / f"{repo.pk}.git"
    return Mirror(folder, repo.url, repo.branch, Auth(repo.username, repo.password, repo.ssh_key))


def repository_sync_later(repository: Repository) -> None:
    enqueue("repos.tasks.repository_sync", repository.pk)


# A webhook is answered from the shared cache, never a query per call: a delivery is taken once
# (its id kept a day: hosts retry with the same id), and while a sync of the repository waits in
# the queue another push adds none (the sync fetches the tip when it starts). Issue #42: 200
# replays of one delivery queued 200 syncs on the worker slots applies and scales need.
DELIVERY_SECONDS = 24 * 3600
QUEUED_SECONDS = 600  # a queued sync that never started (a lost worker) stops holding the next


def webhook_sync_later(*, repository: Repository, delivery: str) -> str:
    """Queue a sync for one push webhook: "queued", "duplicate" (this delivery was taken) or
    "coalesced" (a sync queued earlier has not started: it will see this push)."""
    if delivery and not cache.add(f"repos:delivery:{repository.pk}:{delivery[:200]}", 1, DELIVERY_SECONDS):
        return "duplicate"
    if not cache.add(_queued_key(repository.pk), 1, QUEUED_SECONDS):
        return "coalesced"
    repository_sync_later(repository)
    return "queued"


def sync_starting(repository_id: int) -> None:
    """A queued sync starts: a push from now on queues another."""
    cache.delete(_queued_key(repository_id))


def _queued_key(repository_id: int) -> str:
    return f"repos:sync-queued:{repository_id}"


def export_record(*, revision: Revision) -> Export | None:
    """Called for every new revision (repos/signals.py): one made in the product for a graph
    kept in Git is recorded for export, in the revision's own transaction, and exported once
    that commits. Revisions the sync itself stores are Git's already."""
    if importing_from_git.get():
        return None
    link = GraphLink.objects.filter(graph_id=revision.graph_id).select_related("repository").first()
    if link is None:
        return None
    export = Export.objects.create(revision=revision, repository=link.repository, base_blob=link.blob,
                                   base_commit=link.commit, requested_by=revision.created_by)
    enqueue("repos.tasks.repository_export", link.repository_id)
    return export


class NothingToCommit(Refused):
    """The graph's latest revision is in Git already, or the graph is not kept in a repository."""


@transaction.atomic
def graph_commit(*, graph, repository: Repository | None = None, user: Actor = None, via: str = "ui") -> Export:
    """Apply, where a GitOps tool applies from Git: the graph's latest revision as a commit. A
    revision made here is exported when it is saved; this sends one that is not in Git yet (made
    before the graph was linked, or whose push failed) and answers the export that carries it."""
    link = GraphLink.objects.filter(graph=graph).select_related("repository").first()
    if link is None:
        raise NothingToCommit(f"{graph.name} is not kept in a Git repository: register the repository that "
                              "holds its manifest (repositories page, or dynamo-cp repos add) and link the graph "
                              "to its file there (Link a graph)")
    if repository is not None and link.repository_id != repository.pk:
        raise NothingToCommit(f"{graph.name} is kept in {link.repository.name}, not in {repository.name}")
    head = graph.head
    came_from = getattr(head, "git_commit", None)
    if came_from is not None and came_from.direction == Direction.FROM_GIT:
        raise NothingToCommit(f"revision {head.number} of {graph.name} came from Git ({came_from.sha[:12]}): "
                              "it is there already")
    export = Export.objects.filter(revision=head).first()
    if export is None:
        export = Export.objects.create(revision=head, repository=link.repository, base_blob=link.blob,
                                       base_commit=link.commit, requested_by=user)
    elif export.state == ExportState.FAILED:
        Export.objects.filter(pk=export.pk).update(state=ExportState.PENDING, error="")
    audit_record(actor=user, via=via, action="graph.commit", target_type="graph", target=graph.name,
                 after={"revision": head.number, "repository": link.repository.name, "path": link.path})
    enqueue("repos.tasks.repository_export", link.repository_id)
    return export


class LinkRefused(Refused):
    """The file or the graph is linked already, or the path is not a graph's file here."""


@transaction.atomic
def graph_link(*, repository: Repository, graph, path: str, user: Actor = None, via: str = "ui") -> GraphLink:
    """Keep an existing graph in a repository's file: what a push alone never does (issue #42).
    The file's content becomes the graph's next revision at the sync this queues."""
    repo = Repository.objects.select_for_update(no_key=True).get(pk=repository.pk)
    path = path.strip().lstrip("/")
    problem = path_problem(path)
    if problem:
        raise RepositoryRefused(f"path: {problem}")
    if not is_manifest(repo, path) or ".." in path.split("/"):
        folder = f"{repo.path}/" if repo.path else "the repository's root"
        raise Unprocessable(f"path {path[:200]!r} is not a graph's file in {repo.name}: name a *.yaml or *.yml "
                                f"file directly in {folder}")
    held = GraphLink.objects.filter(graph=graph).select_related("repository").first()
    if held is not None:
        raise LinkRefused(f"{graph.name} is kept in {held.repository.name}:{held.path} already")
    link = GraphLink.objects.filter(repository=repo, path=path).select_related("graph").first()
    if link is not None and link.graph is not None:
        raise LinkRefused(f"{repo.name}:{path} holds graph {link.graph.name} already")
    fields = {"graph": graph, "state": LinkState.LINKED, "blob": "", "commit": "", "refused_commit": "",
              "refused_blob": "", "findings": [], "removed_commit": ""}
    link, _ = GraphLink.objects.update_or_create(repository=repo, path=path, defaults=fields)
    audit_record(actor=user, via=via, action="graph.link", target_type="graph", target=graph.name,
                 after={"repository": repo.name, "path": path})
    repository_sync_later(repo)  # after the commit (jobs.dispatch)
    return link


def link_state_counts(repo: Repository) -> dict[str, int]:
    counts = {state: 0 for state in LinkState.values}
    for state in repo.links.values_list("state", flat=True):
        counts[state] += 1
    return counts
