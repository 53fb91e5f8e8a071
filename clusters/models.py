"""Registered Kubernetes clusters: how to reach each one, which namespaces graphs may use
there, and what the last check and the watchers saw of it.

The connection part is written by admins (services.cluster_create / cluster_update); the
health part only by the periodic check and the cluster watchers, so pages read it and never
call a cluster."""

from __future__ import annotations

from django.db import models


class Cluster(models.Model):
    name = models.SlugField(max_length=63, unique=True)
    description = models.CharField(max_length=300, blank=True)
    # How to reach it: the control plane's own service account (when it runs in-cluster), or
    # a kubeconfig file on the control plane's host and one of its contexts. An empty path
    # means the client's default ($KUBECONFIG, then ~/.kube/config); an empty context means
    # the file's current context.
    in_cluster = models.BooleanField(default=False)
    kubeconfig = models.CharField(max_length=500, blank=True)
    context = models.CharField(max_length=200, blank=True)
    namespaces = models.JSONField(default=list)  # list[str]: the namespaces graphs may use
    # Health, from the last check or watch (never from a page).
    reachable = models.BooleanField(null=True)  # None: never checked
    server_version = models.CharField(max_length=60, blank=True)
    dgd_versions = models.JSONField(default=list)  # served nvidia.com versions of DynamoGraphDeployment
    dgdsa_versions = models.JSONField(default=list)  # ... of DynamoGraphDeploymentScalingAdapter
    gpu_allocatable = models.PositiveIntegerField(null=True, blank=True)  # nvidia.com/gpu on ready nodes
    gpu_free = models.IntegerField(null=True, blank=True)  # allocatable minus what bound pods request
    checked_at = models.DateTimeField(null=True, blank=True)
    watched_at = models.DateTimeField(null=True, blank=True)  # the watchers last heard from it
    error = models.TextField(blank=True)  # why the last check or watch failed ("" when it worked)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def dynamo_installed(self) -> bool:
        return bool(self.dgd_versions)

    @property
    def connection_label(self) -> str:
        if self.in_cluster:
            return "in-cluster service account"
        path = self.kubeconfig or "default kubeconfig"
        return f"{path} · context {self.context or '(current)'}"

    def allows(self, namespace: str) -> bool:
        return namespace in (self.namespaces or [])
