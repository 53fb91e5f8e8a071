"""Git repositories that hold graphs (one DynamoGraphDeployment per file), the link from each
file to its graph, the commit behind each revision, and the product's changes on their way
to Git."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Mode(models.TextChoices):
    DIRECT = "direct", "Commit to the branch"  # a product change is pushed to the branch itself
    PROPOSE = "propose", "Propose on a review branch"  # pushed to dynamo-cp/<graph>-r<N>, for a pull request


class SyncState(models.TextChoices):
    NEVER = "never", "Never synced"  # registered, not fetched yet
    OK = "ok", "Synced"  # the last sync fetched the branch and went through every commit
    FAILED = "failed", "Sync failed"  # git could not fetch (unreachable, refused credentials); error says why


class Repository(models.Model):
    """One branch of a Git repository whose ``path/*.yaml`` files are graphs. The credentials
    and the webhook secret are write-only: no page, API answer, log or audit record shows them."""

    name = models.SlugField(max_length=63, unique=True)
    url = models.CharField(max_length=500)  # https://, ssh://, user@host:path or file://
    branch = models.CharField(max_length=200, default="main")
    path = models.CharField(max_length=500, blank=True)  # the folder of manifests; "" is the root
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.DIRECT)
    username = models.CharField(max_length=200, blank=True)
    password = models.TextField(blank=True)  # a password or access token for https
    ssh_key = models.TextField(blank=True)  # a private key for ssh
    webhook_secret = models.CharField(max_length=500, blank=True)
    state = models.CharField(max_length=10, choices=SyncState.choices, default=SyncState.NEVER)
    synced_commit = models.CharField(max_length=40, blank=True)  # the branch tip the last sync reached
    synced_at = models.DateTimeField(null=True, blank=True)
    last_sync = models.JSONField(default=dict, blank=True)  # what the last sync did: counts and refusals
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "repositories"

    def __str__(self) -> str:
        return self.name


class LinkState(models.TextChoices):
    LINKED = "linked", "In Git"  # the graph's head revision came from, or went to, this file
    # the latest commit of the file did not validate; the graph keeps its last good revision
    INVALID = "invalid", "Refused"
    REMOVED = "removed", "Removed from Git"  # the file was deleted; the graph stays, marked


class GraphLink(models.Model):
    """One manifest file of a repository and the graph it holds. ``blob`` is the content the
    product and Git last agreed on: a product change is pushed only while Git still has it."""

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="links")
    path = models.CharField(max_length=1000)
    graph = models.OneToOneField("graphs.Graph", null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="git_link")
    state = models.CharField(max_length=10, choices=LinkState.choices, default=LinkState.LINKED)
    blob = models.CharField(max_length=40, blank=True)
    commit = models.CharField(max_length=40, blank=True)  # the commit that holds ``blob``
    api_version = models.CharField(max_length=40, blank=True)  # the file's, kept when the product writes it
    refused_commit = models.CharField(max_length=40, blank=True)
    refused_blob = models.CharField(max_length=40, blank=True)
    findings = models.JSONField(default=list, blank=True)  # why refused_commit was refused (Finding.as_dict)
    removed_commit = models.CharField(max_length=40, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["repository_id", "path"]
        constraints = [models.UniqueConstraint(fields=["repository", "path"], name="graph_link_path_unique")]

    def __str__(self) -> str:
        return f"{self.repository.name}:{self.path}"


class Direction(models.TextChoices):
    FROM_GIT = "from_git", "From Git"  # the revision was imported from this commit
    TO_GIT = "to_git", "To Git"  # the revision was made in the product and pushed as this commit


class RevisionCommit(models.Model):
    """The Git commit behind one revision, either way."""

    revision = models.OneToOneField("graphs.Revision", on_delete=models.CASCADE, related_name="git_commit")
    # SET_NULL: a repository removed leaves its graphs' history as it was, commits included.
    repository = models.ForeignKey(Repository, null=True, on_delete=models.SET_NULL, related_name="+")
    direction = models.CharField(max_length=10, choices=Direction.choices)
    path = models.CharField(max_length=1000)
    sha = models.CharField(max_length=40)
    branch = models.CharField(max_length=250)
    author_name = models.CharField(max_length=200, blank=True)
    author_email = models.CharField(max_length=200, blank=True)
    message = models.TextField(blank=True)
    committed_at = models.CharField(max_length=40, blank=True)  # as git wrote it (ISO 8601 with its zone)

    def __str__(self) -> str:
        return self.sha[:12]


class ExportState(models.TextChoices):
    PENDING = "pending", "Pending"  # recorded with the revision, waiting for the export task
    PUSHED = "pushed", "Pushed"  # committed to the branch
    PROPOSED = "proposed", "Proposed"  # committed to a review branch (propose mode)
    CONFLICT = "conflict", "Conflict"  # Git changed the file since: kept on a review branch, nothing overwritten
    FAILED = "failed", "Failed"  # git refused (credentials, unreachable); error says why; retried by the next export


EXPORT_ACTIVE = (ExportState.PENDING, ExportState.FAILED)


class Export(models.Model):
    """A revision made in the product for a graph kept in Git, on its way to a commit. Recorded
    in the revision's own transaction, so none is lost if the worker is not running."""

    revision = models.OneToOneField("graphs.Revision", on_delete=models.CASCADE, related_name="git_export")
    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="exports")
    state = models.CharField(max_length=10, choices=ExportState.choices, default=ExportState.PENDING)
    base_blob = models.CharField(max_length=40, blank=True)  # what Git held when the change was made
    base_commit = models.CharField(max_length=40, blank=True)
    branch = models.CharField(max_length=250, blank=True)
    commit = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True)
    # A conflict keeps all three sides and git merge-file's diff3 of them.
    base_text = models.TextField(blank=True)
    ours_text = models.TextField(blank=True)
    theirs_text = models.TextField(blank=True)
    merged_text = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"export of revision {self.revision_id}: {self.state}"
