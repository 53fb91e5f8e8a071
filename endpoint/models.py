"""Who may call a graph's OpenAI endpoint and how much, and how a cluster's gateway reaches it.

These models began in the playground app and keep its tables (``db_table``): endpoint's first
migration only moved them in Django's state."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from graphs.models import Graph
from graphs.runtimes.kubernetes.gateway import Exposure


class PlaygroundPolicy(models.Model):
    """Per-graph chat settings, edited by admins. No row means the defaults: operators and
    admins may chat (in the playground or through the OpenAI endpoint), viewers may not."""

    graph = models.OneToOneField(Graph, on_delete=models.CASCADE, related_name="playground_policy")
    viewers_may_chat = models.BooleanField(default=False)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "playground_playgroundpolicy"
        verbose_name_plural = "playground policies"

    def __str__(self) -> str:
        return f"{self.graph.name}: viewers {'may' if self.viewers_may_chat else 'may not'} chat"


class ApiLimit(models.Model):
    """Admin-set limits on the OpenAI endpoint (``/api/playground/{graph}/v1/...``) for one
    user, or for one of the user's API tokens. The most specific row applies: the token's,
    else the user's (``token_id`` ""), else the PLAYGROUND_* settings. Each limit counts the
    requests of what it names: a token's row counts that token's requests only."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_limits")
    # "" = every request of the user; else admission.token_id() of one of the user's tokens.
    token_id = models.CharField(max_length=64, blank=True)
    token_label = models.CharField(max_length=100, blank=True)  # what the admin picked, as shown then
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)  # None: the setting's default
    concurrent_streams = models.PositiveIntegerField(null=True, blank=True)  # None: the setting's default
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "playground_apilimit"
        constraints = [models.UniqueConstraint(fields=["user", "token_id"], name="api_limit_per_user_or_token")]

    def __str__(self) -> str:
        what = f"token {self.token_label or self.token_id}" if self.token_id else "every request"
        return f"{self.user}: {what}"


class GraphExposure(models.Model):
    """How a graph's OpenAI endpoint is reached on its cluster: through the cluster's gateway
    (a Gateway API HTTPRoute, an ingress-nginx Ingress, or both; graphs.runtimes.kubernetes.gateway renders
    them), the control plane only authorizing (endpoint/authorize.py). No row: only through
    the control plane's own relay."""

    graph = models.OneToOneField(Graph, on_delete=models.CASCADE, related_name="exposure")
    host = models.CharField(max_length=253)
    gateway_name = models.CharField(max_length=253, blank=True)  # the HTTPRoute's parent Gateway
    gateway_namespace = models.CharField(max_length=63, blank=True)
    ingress_class = models.CharField(max_length=253, blank=True)  # "": no Ingress
    tls_secret = models.CharField(max_length=253, blank=True)
    # Applied by the Kubernetes runtime beside the DGD with every apply of the graph.
    apply_with_graph = models.BooleanField(default=False)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "playground_graphexposure"

    def __str__(self) -> str:
        return f"{self.graph.name} on {self.host}"

    @property
    def options(self) -> Exposure:
        return Exposure(host=self.host, gateway_name=self.gateway_name, gateway_namespace=self.gateway_namespace,
                        ingress_class=self.ingress_class, tls_secret=self.tls_secret)
