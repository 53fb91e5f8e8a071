"""Product → Git: a revision made in the product for a graph kept in Git becomes a commit, its
author the user and its message the revision's, pushed to the branch (or, in propose mode, to
a review branch ``dynamo-cp/<graph>-r<N>``).

Nothing in Git is ever overwritten. A commit is built on the branch tip just fetched and
pushed without force, and only while Git still holds what the product last agreed with
(``GraphLink.blob``) and no newer revision came from Git: otherwise the export is a conflict,
its three sides kept on the row with git's diff3 of them, and the product's version is pushed
to the review branch, based on the commit the change was made from. Git's side becomes the
graph's next revision at the next sync: both sides are kept."""

from __future__ import annotations

import posixpath

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.dgd.render import V1BETA1, normalise_api_version, render
from core.documents import is_dgd
from core.errors import ManifestError
from core.specio import load_documents
from graphs.companions import file_text

from .git import GitError, Mirror
from .kustomize import is_unit_path
from .models import Direction, Export, ExportState, GraphLink, LinkState, Mode, Repository, RevisionCommit
from .services import mirror_for

PUSH_ATTEMPTS = 3  # a push refused because someone pushed in between is rebuilt on the new tip


def review_branch(graph_name: str, number: int) -> str:
    return f"dynamo-cp/{graph_name}-r{number}"


def manifest_text(export: Export, link: GraphLink, existing: bytes | None = None) -> bytes:
    """The revision as the file will hold it, in the API version the file already uses: with
    its companions (the ConfigMaps, PVCs... kept beside the DGD), the DGD where ``existing``
    (the file as Git holds it) has it, else after them (graphs/companions.py)."""
    api_version = normalise_api_version(link.api_version or V1BETA1)
    revision = export.revision
    return file_text(render(revision.graph_spec, api_version), revision.companions,
                     dgd_at=_dgd_position(existing)).encode()


def _dgd_position(existing: bytes | None) -> int | None:
    """How many objects the file has before its DGD (None: unknown, or no file yet)."""
    if not existing:
        return None
    try:
        documents = load_documents(existing, max_bytes=settings.MAX_MANIFEST_BYTES)
    except ManifestError:
        return None
    return next((i for i, d in enumerate(documents) if is_dgd(d)), None)


def _author(export: Export) -> tuple[str, str]:
    user = export.requested_by or export.revision.created_by
    if user is None:
        return "Dynamo Control Plane", "dynamo-cp@localhost"
    name = user.get_full_name() or user.username
    return name, user.email or f"{user.username}@dynamo-cp.invalid"


def _message(export: Export) -> str:
    revision = export.revision
    return (f"{revision.message or f'revision {revision.number}'}\n\n"
            f"Dynamo-CP-Revision: {revision.graph.name}@{revision.number}\n")


def repository_export(*, repository: Repository) -> list[Export]:
    """Export every revision waiting on this repository, oldest first: each graph's changes
    reach Git in the order they were made."""
    done = []
    with transaction.atomic():
        repo = Repository.objects.select_for_update(no_key=True).get(pk=repository.pk)
        waiting = list(Export.objects.filter(repository=repo, state__in=[ExportState.PENDING, ExportState.FAILED])
                       .select_related("revision__graph", "revision__created_by", "requested_by")
                       .order_by("revision__graph_id", "revision__number"))
        if not waiting:
            return done
        mirror = mirror_for(repo)
        try:
            mirror.fetch()
        except GitError as exc:
            Export.objects.filter(pk__in=[e.pk for e in waiting]).update(state=ExportState.FAILED, error=str(exc))
            return done
        for export in waiting:
            _export_one(repo, mirror, export)
            done.append(export)
    return done


def _finish(export: Export, state: str, **fields) -> None:
    fields.update(state=state, finished_at=timezone.now())
    Export.objects.filter(pk=export.pk).update(**fields)
    for key, value in fields.items():
        setattr(export, key, value)


def _export_one(repo: Repository, mirror: Mirror, export: Export) -> None:
    export.refresh_from_db(fields=["base_blob", "base_commit"])  # an earlier export of the graph may have moved it
    revision = export.revision
    link = GraphLink.objects.filter(graph_id=revision.graph_id, repository=repo).first()
    if link is None:
        _finish(export, ExportState.FAILED, error="the graph is no longer kept in this repository")
        return
    if is_unit_path(link.path):
        _finish(export, ExportState.FAILED, error=f"{revision.graph.name} is built in Git from the kustomize directory "
                f"{posixpath.dirname(link.path) or '.'}: the product does not write kustomize sources; make the "
                "change there (its next sync brings it here)")
        return
    ours = manifest_text(export, link, mirror.read_blob(export.base_blob) if export.base_blob else None)
    author_name, author_email = _author(export)
    for _attempt in range(PUSH_ATTEMPTS):
        tip = mirror.tip()
        theirs_blob = mirror.blob_id(tip, link.path) if tip else None
        newer_from_git = RevisionCommit.objects.filter(
            revision__graph_id=revision.graph_id, revision__number__gt=revision.number,
            direction=Direction.FROM_GIT).exists()
        if theirs_blob != (export.base_blob or None) or newer_from_git or link.state == LinkState.REMOVED:
            _conflict(repo, mirror, export, link, ours, theirs_blob, author_name, author_email)
            return
        propose = repo.mode == Mode.PROPOSE
        branch = review_branch(revision.graph.name, revision.number) if propose else repo.branch
        try:
            commit, blob = mirror.write_file_commit(parent=tip, path=link.path, content=ours, message=_message(export),
                                                    author_name=author_name, author_email=author_email)
            mirror.push(commit, branch)
        except GitError as exc:
            error = str(exc)
            if exc.rejected and not propose:
                try:
                    mirror.fetch()  # someone pushed in between: look again at what Git holds now
                    continue
                except GitError as again:
                    error = str(again)
            _finish(export, ExportState.FAILED, error=error)
            return
        if propose:
            _finish(export, ExportState.PROPOSED, branch=branch, commit=commit)
            return
        _finish(export, ExportState.PUSHED, branch=branch, commit=commit)
        _record_pushed(repo, link, export, tip, commit, blob, author_name, author_email)
        return
    _finish(export, ExportState.FAILED, error=f"the branch kept moving: {PUSH_ATTEMPTS} pushes were refused")


def _record_pushed(repo, link, export, parent, commit, blob, author_name, author_email) -> None:
    GraphLink.objects.filter(pk=link.pk).update(blob=blob, commit=commit, updated_at=timezone.now())
    link.blob, link.commit = blob, commit
    # Later exports of the same graph were made on top of this one: their base is this commit.
    Export.objects.filter(revision__graph_id=export.revision.graph_id, state=ExportState.PENDING,
                          base_blob=export.base_blob, revision__number__gt=export.revision.number
                          ).update(base_blob=blob, base_commit=commit)
    if repo.synced_commit == (parent or ""):
        # Nothing unsynced lies under our commit: the next sync need not walk it.
        Repository.objects.filter(pk=repo.pk).update(synced_commit=commit)
        repo.synced_commit = commit
    RevisionCommit.objects.create(
        revision=export.revision, repository=repo, direction=Direction.TO_GIT, path=link.path, sha=commit,
        branch=repo.branch, author_name=author_name[:200], author_email=author_email[:200],
        message=_message(export), committed_at=timezone.now().isoformat(timespec="seconds"))


def _conflict(repo, mirror, export, link, ours, theirs_blob, author_name, author_email) -> None:
    """Git changed the file since the change was made: keep both, overwrite nothing."""
    base = mirror.read_blob(export.base_blob) if export.base_blob else b""
    theirs = mirror.read_blob(theirs_blob) if theirs_blob else b""
    number = export.revision.number
    merged = mirror.merge_file(ours, base, theirs, (f"product r{number}", "base", f"git {repo.branch}"))
    fields = {"base_text": base.decode("utf-8", "replace"), "ours_text": ours.decode(),
              "theirs_text": theirs.decode("utf-8", "replace"), "merged_text": merged,
              "error": ("the file was removed from Git since" if theirs_blob is None else
                        "the file changed in Git since this change was made")}
    branch = review_branch(export.revision.graph.name, number)
    parent = export.base_commit or mirror.tip()
    try:
        commit, _blob = mirror.write_file_commit(parent=parent, path=link.path, content=ours,
                                                 message=_message(export), author_name=author_name,
                                                 author_email=author_email)
        mirror.push(commit, branch)
        fields.update(branch=branch, commit=commit)
    except GitError as exc:
        fields["error"] += f"; the review branch {branch} could not be pushed: {exc}"
    _finish(export, ExportState.CONFLICT, **fields)
