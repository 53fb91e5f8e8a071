"""Git → product: every new commit that changes a manifest file becomes the next revision of
its graph, through the same lossless importer and validation as an uploaded manifest.

Syncs of one repository run one at a time, from fetch to the last revision: a lock on a file
beside its mirror (held while git talks to the host, which may not answer for as long as
git's stall bound) and, once the fetch is done, the repository's row lock for the import. So a
webhook, the periodic task and a command arriving together sync once each, in turn, and the
second finds nothing new; and no database lock or transaction waits on a Git host, where a
paused host would hold every other sync's query past its deadline (bench/faults.py git-pause
measured pages answered 503 while the row lock spanned the fetch). The row lock is FOR NO KEY
UPDATE: a revision saved meanwhile records its export with a foreign key to the repository
(FOR KEY SHARE), and must not wait on the sync while holding its graph's lock, which the sync
needs (tests/repos/test_repos_concurrency.py found it).
Each file is imported in its own savepoint: a file that does not validate is refused (its
findings and commit recorded on the link) while the others go on.

Whoever can push is not a product user (issue #42): a file never takes over a graph that is not
already linked to it (an operator links one explicitly: services.graph_link), and a revision
from Git is credited to no user; the commit's author, which Git does not verify, is kept as
text on the revision's message and its commit record. A path no link can hold (too long, not
storable text) is refused without a link; any other failure of a sync is recorded on its
repository, with nothing of that sync kept, and never raised to the caller."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from core.documents import load_bundle
from core.errors import ManifestError
from core.findings import Finding, Severity
from core.validation import validate_manifest
from graphs.models import Graph
from graphs.services import graph_create, graph_update

from . import kustomize
from .git import Commit, GitError, Mirror, MirrorBusy
from .models import Direction, GraphLink, LinkState, Repository, RevisionCommit, SyncState
from .paths import is_manifest, path_problem
from .services import importing_from_git, mirror_for

log = logging.getLogger(__name__)



@dataclass
class SyncResult:
    commit: str | None = None
    commits: int = 0
    imported: list[dict] = field(default_factory=list)  # {"graph", "revision", "commit", "path"}
    removed: list[dict] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)  # {"path", "commit", "findings"}
    error: str = ""

    def as_dict(self) -> dict:
        return {"commit": self.commit, "commits": self.commits, "imported": self.imported[:200],
                "removed": self.removed[:200], "refused": self.refused[:200], "error": self.error,
                "counts": {"imported": len(self.imported), "removed": len(self.removed),
                           "refused": len(self.refused)}}


def repository_sync(*, repository: Repository, via: str = "system", wait: bool = True) -> SyncResult:
    """Fetch the branch and bring every linked graph up to its tip. Git failing (unreachable,
    credentials refused) is recorded on the repository, not raised: the periodic task retries.
    ``wait=False`` (a person pressed Sync now): while another sync of this repository runs, the
    answer says so at once and nothing is recorded, instead of queueing behind a host that may
    not answer for as long as git's stall bound; and git gives up on a stalled host after
    INTERACTIVE_STALL_SECONDS, not STALL_SECONDS."""
    repo = Repository.objects.get(pk=repository.pk)
    mirror = mirror_for(repo)
    mirror.interactive = not wait  # and a host that stops sending is given up on sooner
    try:
        with mirror.exclusive(wait=wait):
            return _sync(repository, repo, mirror, via)
    except MirrorBusy:
        return SyncResult(error=f"a sync of {repo.name} is running now; its result shows on the repository "
                                "when it ends (git gives up on a host that does not answer)")


def _sync(repository: Repository, repo: Repository, mirror: Mirror, via: str) -> SyncResult:
    result = SyncResult()
    with transaction.atomic():
        try:
            tip = mirror.fetch()  # no row lock yet: only the file lock waits on the Git host
            result.commit = tip
            repo = Repository.objects.select_for_update(no_key=True).get(pk=repository.pk)
            with transaction.atomic():  # a failure keeps nothing of this sync
                _bring_up_to(repo, mirror, tip, result)
        except GitError as exc:
            result.error = str(exc)
        except Exception as exc:  # a file or a commit no one foresaw: recorded, never raised
            log.exception("syncing repository %s failed", repo.name)
            result = SyncResult(commit=result.commit, error=unexpected(exc))
        now = timezone.now()
        fields = {"synced_at": now, "last_sync": result.as_dict(), "error": result.error,
                  "state": SyncState.FAILED if result.error else SyncState.OK}
        if not result.error and result.commit:
            fields["synced_commit"] = result.commit
        Repository.objects.filter(pk=repo.pk).update(**fields)
        for key, value in fields.items():
            setattr(repository, key, value)
    if result.imported or result.removed or result.refused:
        audit_record(via=via, action="repository.sync", target_type="repository", target=repo.name,
                     after=result.as_dict()["counts"], message=f"synced to {(result.commit or '')[:12]}")
    return result


def repository_failed(*, repository: Repository, error: BaseException) -> None:
    """Record a failure that escaped the sync itself (the database, say) on the repository,
    where its page shows it; never raises (the periodic task goes on to the next one)."""
    try:
        Repository.objects.filter(pk=repository.pk).update(state=SyncState.FAILED, error=unexpected(error),
                                                           synced_at=timezone.now())
    except Exception:
        log.exception("recording the failure of repository %s failed too", repository.name)


def unexpected(exc: BaseException) -> str:
    """A repository's error for a failure no check foresaw (its first line: never a trace)."""
    text = (str(exc).strip().splitlines() or [""])[0]
    for folder in (str(settings.VAR_DIR), str(settings.BASE_DIR)):  # viewers read this: no server paths
        text = text.replace(folder, "…")
    text = text[:300]
    return (f"the sync stopped at an unexpected error and kept nothing of this sync: {exc.__class__.__name__}"
            + (f": {text}" if text else ""))


def _bring_up_to(repo: Repository, mirror: Mirror, tip: str, result: SyncResult) -> None:
    since = repo.synced_commit or None
    found = kustomize.units(repo, mirror, tip)
    # A folder that is itself a kustomize directory: its files are the build's, never graphs alone.
    plain = not any(unit.folder == repo.path for unit in found)
    if since and mirror.is_ancestor(since, tip):
        for sha in mirror.commits_between(since, tip, repo.path):
            result.commits += 1
            commit = mirror.commit(sha)
            for change in mirror.changes(sha, repo.path):
                if not plain or not is_manifest(repo, change.path):
                    continue
                if change.status == "D":
                    _remove(repo, change.path, commit, result)
                else:
                    blob = mirror.blob_id(sha, change.path)
                    if blob:
                        _import(repo, mirror, change.path, blob, commit, result)
        if plain:
            _import_new_links(repo, mirror, tip, result)
        _sync_units(repo, mirror, tip, found, result)
        for link in GraphLink.objects.filter(repository=repo).exclude(state=LinkState.REMOVED):
            if kustomize.is_unit_path(link.path) and link.path not in {u.path for u in found}:
                _remove(repo, link.path, mirror.commit(tip), result)
        return
    # The first sync, or a branch whose history was rewritten: compare the tip with what is linked.
    files = {p: b for p, b in mirror.files(tip, repo.path).items() if plain and is_manifest(repo, p)}
    for path, blob in sorted(files.items()):
        link = GraphLink.objects.filter(repository=repo, path=path).first()
        if link is not None and blob in (link.blob, link.refused_blob):
            continue
        result.commits += 1
        _import(repo, mirror, path, blob, mirror.commit(mirror.last_commit_of(tip, path)), result)
    _sync_units(repo, mirror, tip, found, result)
    kept = [*files, *(unit.path for unit in found)]
    gone = GraphLink.objects.filter(repository=repo).exclude(path__in=kept).exclude(state=LinkState.REMOVED)
    for link in gone:
        _remove(repo, link.path, mirror.commit(tip), result)


def _import_new_links(repo: Repository, mirror: Mirror, tip: str, result: SyncResult) -> None:
    """Files an operator linked to a graph since (services.graph_link): imported from the tip,
    whether or not a new commit changed them."""
    new = GraphLink.objects.filter(repository=repo, state=LinkState.LINKED, blob="", graph__isnull=False)
    for link in new:
        if kustomize.is_unit_path(link.path):
            continue  # built and compared by _sync_units
        blob = mirror.blob_id(tip, link.path)
        if blob:
            result.commits += 1
            _import(repo, mirror, link.path, blob, mirror.commit(mirror.last_commit_of(tip, link.path)), result)


def _refuse(repo: Repository, path: str, blob: str, commit: Commit, findings: list[Finding],
            result: SyncResult) -> None:
    if path_problem(path):  # no link can hold it: the last sync's result says why
        result.refused.append({"path": path[:200] + "…", "commit": commit.sha, "unlinked": True,
                               "findings": [f.as_dict() for f in findings]})
        return
    link, _ = GraphLink.objects.get_or_create(repository=repo, path=path)
    shown = [f.as_dict() for f in findings]
    GraphLink.objects.filter(pk=link.pk).update(
        state=LinkState.INVALID, refused_commit=commit.sha,
        refused_blob=blob, findings=shown, updated_at=timezone.now())
    result.refused.append({"path": path, "commit": commit.sha, "findings": shown})


def _revision_message(repo: Repository, commit: Commit) -> str:
    """What the revision (and its audit record) says: the commit's subject, and its author as
    the commit states it, which nothing verifies."""
    author = f"{commit.author_name} <{commit.author_email}>" if commit.author_email else commit.author_name
    origin = f" (from {repo.name} at {commit.sha[:12]}; commit author, unverified: {author[:200] or 'none'})"
    subject = commit.subject or f"commit {commit.sha[:12]}"
    return subject[:480 - len(origin)] + origin


def _sync_units(repo: Repository, mirror: Mirror, tip: str, found: list, result: SyncResult) -> None:
    """Build each kustomize directory at the tip (repos/kustomize.py); import what changed."""
    for unit in found:
        link = GraphLink.objects.filter(repository=repo, path=unit.path).first()
        folders = kustomize.folders_read(mirror, tip, unit)
        # The commit that last changed anything the build reads (a base, a component elsewhere).
        commit = mirror.commit(mirror.last_commit_of(tip, *(folder or "." for folder in folders)))
        try:
            data = kustomize.build_unit(mirror, tip, unit, folders)
        except ManifestError as exc:
            # Refused once per commit of the folder: kept until the folder (or the tip) changes.
            marker = kustomize.blob_id(f"{commit.sha}:{exc}".encode())
            if link is None or marker != link.refused_blob:
                where = f"{unit.folder or '.'} (kubectl kustomize) at {commit.sha[:12]}"
                _refuse(repo, unit.path, marker, commit, [Finding(f.severity, f.code, f.path, f"{where}: {f.message}",
                                                                  f.fix) for f in exc.findings], result)
            continue
        blob = kustomize.blob_id(data)
        if link is not None and blob in (link.blob, link.refused_blob):
            continue
        result.commits += 1
        _import(repo, mirror, unit.path, blob, commit, result, data=data)


def _import(repo: Repository, mirror: Mirror, path: str, blob: str, commit: Commit, result: SyncResult,
            data: bytes | None = None) -> None:
    """Import one file (``data``: a kustomize directory's build, else the blob is read)."""
    link = GraphLink.objects.filter(repository=repo, path=path).select_related("graph").first()
    if link is not None and blob == link.blob:
        return  # the product's own export, or a commit that put back what is stored
    where = f"{path[:200]} at {commit.sha[:12]}"
    try:
        problem = path_problem(path)
        if problem:
            raise ManifestError.single("", problem, "path", "rename the file")
        if data is None:
            size = mirror.blob_size(blob)
            if size > settings.MAX_MANIFEST_BYTES:  # refused before it is read into memory
                raise ManifestError.single("", f"the file is {size:,} bytes; a manifest may have at most "
                                               f"{settings.MAX_MANIFEST_BYTES:,}", "too_large")
            data = mirror.read_blob(blob)
        bundle = load_bundle(data, max_bytes=settings.MAX_MANIFEST_BYTES)
        if len(bundle.graphs) > 1:
            raise ManifestError.single("", f"the file holds {len(bundle.graphs)} DynamoGraphDeployments; a graph kept "
                                           "in Git is one file", "several_graphs",
                                       "put each DynamoGraphDeployment in a file of its own (its ConfigMaps and "
                                       "other objects may stay beside it)")
        obj = bundle.manifest
        report = validate_manifest(obj)
        errors = [f for f in report.findings if f.severity == Severity.ERROR]
        if errors or report.spec is None:
            raise ManifestError(errors or [Finding(Severity.ERROR, "invalid", "", "not a graph")])
        spec = report.spec
        graph = link.graph if link is not None else None
        if graph is None:
            existing = Graph.objects.filter(name=spec.name).first()
            other = GraphLink.objects.filter(graph=existing).exclude(repository=repo, path=path).first() \
                if existing else None
            if other is not None:
                raise ManifestError.single("metadata.name", f"graph {spec.name!r} is already kept in "
                                           f"{other.repository.name}:{other.path}", "gitops_taken",
                                           "give this manifest another metadata.name, or remove one of the files")
            if existing is not None:
                # A push is not a product user: it never takes over a graph made here.
                raise ManifestError.single("metadata.name", f"graph {spec.name!r} exists and is not kept in Git; "
                                           "a file does not take over a graph", "gitops_adopt",
                                           f"an operator who wants this file to hold it links it: Link a graph "
                                           f"on the repository's page (graph {spec.name}, file {path[:200]})")
        elif spec.name != graph.name:
            raise ManifestError.single("metadata.name", f"{path} holds graph {graph.name!r}; it now names "
                                       f"{spec.name!r}, and a graph cannot be renamed", "rename",
                                       "put the new graph in a new file")
        text = data.decode("utf-8")
        message = _revision_message(repo, commit)
        user = None  # the repository's, not a product user's: Git does not verify who committed
        api_version = obj.get("apiVersion", "")
        token = importing_from_git.set(True)
        try:
            with transaction.atomic():
                if graph is None:
                    graph = graph_create(spec=spec, user=user, message=message, source_yaml=text,
                                         source_api_version=api_version, via="git", companions=bundle.companions)
                    revision = graph.head
                else:
                    revision = graph_update(graph=graph, spec=spec, user=user, message=message, source_yaml=text,
                                            source_api_version=api_version, via="git", companions=bundle.companions)
                RevisionCommit.objects.create(
                    revision=revision, repository=repo, direction=Direction.FROM_GIT, path=path, sha=commit.sha,
                    branch=repo.branch, author_name=commit.author_name, author_email=commit.author_email,
                    message=(commit.subject + ("\n\n" + commit.body if commit.body else ""))[:10000],
                    committed_at=commit.committed_at)
                GraphLink.objects.update_or_create(repository=repo, path=path, defaults={
                    "graph": graph, "state": LinkState.LINKED, "blob": blob, "commit": commit.sha,
                    "api_version": api_version, "refused_commit": "", "refused_blob": "", "findings": [],
                    "removed_commit": ""})
        finally:
            importing_from_git.reset(token)
    except ManifestError as exc:
        findings = [Finding(f.severity, f.code, f.path, f"{where}: {f.message}", f.fix) for f in exc.findings]
        _refuse(repo, path, blob, commit, findings, result)
        return
    except UnicodeDecodeError:
        _refuse(repo, path, blob, commit, [Finding(Severity.ERROR, "encoding", "", f"{where}: not UTF-8 text")], result)
        return
    result.imported.append({"graph": graph.name, "revision": revision.number, "commit": commit.sha, "path": path})


def _remove(repo: Repository, path: str, commit: Commit, result: SyncResult) -> None:
    """The file is gone: its graph stays, with every revision, marked removed from Git."""
    link = GraphLink.objects.filter(repository=repo, path=path).select_related("graph").first()
    if link is None:
        return
    if link.graph_id is None:
        link.delete()  # a file that never became a graph: nothing to keep
        return
    GraphLink.objects.filter(pk=link.pk).update(state=LinkState.REMOVED, removed_commit=commit.sha,
                                                updated_at=timezone.now())
    result.removed.append({"graph": link.graph.name, "commit": commit.sha, "path": path})
