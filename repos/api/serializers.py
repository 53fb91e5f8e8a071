"""Repositories as the API shows them: credentials and the webhook secret are accepted and
never returned (each shows only whether it is set)."""

from __future__ import annotations

from rest_framework import serializers

from ..models import Export, GraphLink, Mode, Repository
from ..services import BRANCH_PATTERN, PATH_PATTERN, URL_PATTERN

NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class RepositorySerializer(serializers.ModelSerializer):
    name = serializers.RegexField(NAME, max_length=63, error_messages={
        "invalid": "must be lower-case letters, digits and '-'"})
    url = serializers.RegexField(URL_PATTERN, max_length=500, error_messages={
        "invalid": "is not a Git URL: use https://, ssh://, git@host:path or file:// (a password goes in the "
                   "password field, not in the URL)"})
    branch = serializers.RegexField(BRANCH_PATTERN, max_length=200, default="main", error_messages={
        "invalid": "is not a valid branch name"})
    path = serializers.RegexField(PATH_PATTERN, max_length=500, default="", allow_blank=True, error_messages={
        "invalid": "must be a folder inside the repository (names joined by '/', no '..')"})
    mode = serializers.ChoiceField(choices=Mode.choices, default=Mode.DIRECT)
    username = serializers.CharField(max_length=200, write_only=True, required=False, allow_blank=True)
    password = serializers.CharField(max_length=4096, write_only=True, required=False, allow_blank=True,
                                     trim_whitespace=False, style={"input_type": "password"})
    ssh_key = serializers.CharField(max_length=16384, write_only=True, required=False, allow_blank=True,
                                    trim_whitespace=False, style={"input_type": "password"})
    webhook_secret = serializers.CharField(max_length=500, write_only=True, required=False, allow_blank=True,
                                           trim_whitespace=False, style={"input_type": "password"})
    credentials = serializers.SerializerMethodField()
    graphs = serializers.SerializerMethodField()
    webhook_url = serializers.SerializerMethodField()

    class Meta:
        model = Repository
        fields = ["name", "url", "branch", "path", "mode", "username", "password", "ssh_key", "webhook_secret",
                  "credentials", "state", "synced_commit", "synced_at", "last_sync", "error", "graphs",
                  "webhook_url", "created_at", "updated_at"]
        read_only_fields = ["state", "synced_commit", "synced_at", "last_sync", "error", "created_at", "updated_at"]

    def get_credentials(self, obj) -> dict[str, bool]:
        return {f"{f}_set": bool(getattr(obj, f)) for f in ("username", "password", "ssh_key", "webhook_secret")}

    def get_graphs(self, obj) -> int:
        return obj.links.count()

    def get_webhook_url(self, obj) -> str:
        request = self.context.get("request")
        path = f"/api/repos/{obj.name}/webhook/"
        return request.build_absolute_uri(path) if request else path


class LinkSerializer(serializers.ModelSerializer):
    graph = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = GraphLink
        fields = ["path", "graph", "state", "blob", "commit", "api_version", "refused_commit", "findings",
                  "removed_commit", "updated_at"]


class ExportSerializer(serializers.ModelSerializer):
    graph = serializers.CharField(source="revision.graph.name", read_only=True)
    revision = serializers.IntegerField(source="revision.number", read_only=True)

    class Meta:
        model = Export
        fields = ["id", "graph", "revision", "state", "branch", "commit", "error", "base_commit", "merged_text",
                  "base_text", "ours_text", "theirs_text", "created_at", "finished_at"]
