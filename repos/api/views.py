"""The repositories REST API. Reads need the viewer role, sync the operator role; registering,
changing and removing a repository (it holds credentials) need an admin. The webhook is called
by the Git host: no user, the shared secret instead."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.roles import Role
from availability.waiting import waits_on
from graphs.models import Graph

from .. import services
from ..models import Repository
from ..sync import repository_sync
from ..webhooks import WebhookRefused, verify
from . import serializers as s

_SETTABLE = ("url", "branch", "path", "mode", "username", "password", "ssh_key", "webhook_secret")


def _via(request) -> str:
    return "cli" if request.headers.get("X-Controlplane-Client") == "cli" else "api"


class CommitSerializer(s.serializers.Serializer):
    graph = s.serializers.RegexField(s.NAME, max_length=63)


class LinkRequestSerializer(s.serializers.Serializer):
    graph = s.serializers.RegexField(s.NAME, max_length=63)
    path = s.serializers.CharField(max_length=1000, help_text="the graph's file, e.g. graphs/alpha.yaml")


class RepositoryViewSet(viewsets.ModelViewSet):
    """Git repositories whose folder of manifests holds graphs, one per file."""

    queryset = Repository.objects.all()
    serializer_class = s.RepositorySerializer
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    required_roles = {"create": Role.ADMIN, "update": Role.ADMIN, "partial_update": Role.ADMIN,
                      "destroy": Role.ADMIN, "sync": Role.OPERATOR,
                      "commit": Role.OPERATOR, "link": Role.OPERATOR}

    def perform_create(self, serializer):
        d = serializer.validated_data
        serializer.instance = services.repository_create(
            name=d["name"], user=self.request.user, via=_via(self.request),
            **{k: d[k] for k in _SETTABLE if k in d})

    def perform_update(self, serializer):
        d = serializer.validated_data
        if "name" in d and d["name"] != serializer.instance.name:
            raise services.RepositoryConflict(f"this repository is {serializer.instance.name!r}; a repository "
                                              "cannot be renamed (register another one)")
        serializer.instance = services.repository_update(
            repository=serializer.instance, user=self.request.user, via=_via(self.request),
            **{k: d[k] for k in _SETTABLE if k in d})

    def perform_destroy(self, instance):
        services.repository_delete(repository=instance, user=self.request.user, via=_via(self.request))

    @extend_schema(request=None, responses={
        200: OpenApiTypes.OBJECT,
        409: OpenApiResponse(OpenApiTypes.OBJECT, description="git could not fetch the branch (unreachable, "
                             "refused credentials, no such repository), or another sync of the repository is "
                             "running now: the same body, its error saying why")})
    @waits_on("the Git host")
    @action(detail=True, methods=["post"])
    def sync(self, request, name=None):
        """Fetch the branch now and turn each new commit into revisions; answers what it did.
        A fetch that fails is a 409: the request was fine and the control plane is up; the
        repository as registered (its URL, branch or credentials) cannot be fetched now."""
        repo = self.get_object()
        result = repository_sync(repository=repo, via=_via(request), wait=False)
        code = status.HTTP_409_CONFLICT if result.error else status.HTTP_200_OK
        return Response(result.as_dict(), status=code)

    @extend_schema(request=CommitSerializer, responses={202: s.ExportSerializer})
    @action(detail=True, methods=["post"])
    def commit(self, request, name=None):
        """Apply where a GitOps tool applies from Git: a graph's latest revision as a commit."""
        repo = self.get_object()
        data = CommitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        graph = get_object_or_404(Graph, name=data.validated_data["graph"])
        export = services.graph_commit(graph=graph, repository=repo, user=request.user, via=_via(request))
        export.refresh_from_db()
        return Response(s.ExportSerializer(export).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=LinkRequestSerializer, responses={201: s.LinkSerializer})
    @action(detail=True, methods=["post"])
    def link(self, request, name=None):
        """Keep an existing graph in one of the repository's files (a push alone never does):
        the file becomes the graph's next revision at the sync this queues."""
        repo = self.get_object()
        data = LinkRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        graph = get_object_or_404(Graph, name=data.validated_data["graph"])
        link = services.graph_link(repository=repo, graph=graph, path=data.validated_data["path"],
                                   user=request.user, via=_via(request))
        return Response(s.LinkSerializer(link).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: s.LinkSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def links(self, request, name=None):
        """The repository's manifest files and the graph each holds."""
        repo = self.get_object()
        page = self.paginate_queryset(repo.links.select_related("graph").order_by("path"))
        return self.get_paginated_response(s.LinkSerializer(page, many=True).data)

    @extend_schema(responses={200: s.ExportSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def exports(self, request, name=None):
        """The product's changes on their way to Git: pushed, proposed, or in conflict."""
        repo = self.get_object()
        page = self.paginate_queryset(repo.exports.select_related("revision__graph").order_by("-id"))
        return self.get_paginated_response(s.ExportSerializer(page, many=True).data)


class WebhookView(APIView):
    """A push webhook (GitHub, GitLab, Gitea). A push to the repository's branch syncs it."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=OpenApiTypes.OBJECT, responses={202: OpenApiTypes.OBJECT})
    def post(self, request, name: str):
        repo = get_object_or_404(Repository, name=name)
        try:
            push = verify(request.headers, request.body, repo.webhook_secret)
        except WebhookRefused as exc:
            return Response({"detail": str(exc)}, status=exc.status)
        if push.branch != repo.branch:
            what = f"a push to {push.branch}" if push.branch else f"a {push.event or 'non-push'} event"
            return Response({"detail": f"{what}: {repo.name} follows {repo.branch}; nothing to sync",
                             "synced": False}, status=status.HTTP_200_OK)
        outcome = services.webhook_sync_later(repository=repo, delivery=push.delivery)
        if outcome == "duplicate":
            return Response({"detail": f"delivery {push.delivery} was taken already: ignored", "synced": False},
                            status=status.HTTP_200_OK)
        said = "sync queued" if outcome == "queued" else "a sync queued earlier has not started and will take it"
        return Response({"detail": f"{push.provider} push to {repo.branch}: {said}", "synced": True,
                         "after": push.after}, status=status.HTTP_202_ACCEPTED)
