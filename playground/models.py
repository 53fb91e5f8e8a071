"""Who may chat with which graph, and the conversations operators keep.

A reply's timings live in ``Message.timing`` and are read through ``schema.ReplyTiming``."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from graphs.models import Graph
from graphs.runtimes.kubernetes.gateway import Exposure

from .schema import ChatParams, ReplyTiming


class PlaygroundPolicy(models.Model):
    """Per-graph playground settings, edited by admins. No row means the defaults: operators
    and admins may chat, viewers may not."""

    graph = models.OneToOneField(Graph, on_delete=models.CASCADE, related_name="playground_policy")
    viewers_may_chat = models.BooleanField(default=False)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "playground policies"

    def __str__(self) -> str:
        return f"{self.graph.name}: viewers {'may' if self.viewers_may_chat else 'may not'} chat"


class Conversation(models.Model):
    """A chat kept by its owner. ``graph_name`` survives the graph's deletion so the list still
    says where a conversation happened."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    graph = models.ForeignKey(Graph, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    graph_name = models.CharField(max_length=63)
    title = models.CharField(max_length=200)
    system_prompt = models.TextField(blank=True)
    params = models.JSONField(default=dict)  # a ChatParams, read through .chat_params
    # UTF-8 bytes of its prompt and turns, kept by services.conversation_save: what the per-user
    # quota (PLAYGROUND_CONVERSATION_BYTES) adds up without reading every message.
    size_bytes = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.title

    @property
    def chat_params(self) -> ChatParams:
        return ChatParams.model_validate(self.params)


class MessageRole(models.TextChoices):
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"


class Message(models.Model):
    """One turn. Assistant turns carry the reply's timing (client-measured and, where the
    frontend reported it, the server-side breakdown)."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    position = models.PositiveIntegerField()
    role = models.CharField(max_length=10, choices=MessageRole.choices)
    content = models.TextField(blank=True)
    timing = models.JSONField(null=True, blank=True)  # a ReplyTiming, read through .reply_timing
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation_id", "position"]
        constraints = [models.UniqueConstraint(fields=["conversation", "position"], name="message_position_unique")]

    def __str__(self) -> str:
        return f"{self.conversation_id}#{self.position} {self.role}"

    @property
    def reply_timing(self) -> ReplyTiming | None:
        return ReplyTiming.model_validate(self.timing) if self.timing else None


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
        constraints = [models.UniqueConstraint(fields=["user", "token_id"], name="api_limit_per_user_or_token")]

    def __str__(self) -> str:
        what = f"token {self.token_label or self.token_id}" if self.token_id else "every request"
        return f"{self.user}: {what}"


class GraphExposure(models.Model):
    """How a graph's OpenAI endpoint is reached on its cluster: through the cluster's gateway
    (a Gateway API HTTPRoute, an ingress-nginx Ingress, or both; graphs.runtimes.kubernetes.gateway renders
    them), the control plane only authorizing (playground/authorize.py). No row: only through
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

    def __str__(self) -> str:
        return f"{self.graph.name} on {self.host}"

    @property
    def options(self) -> Exposure:
        return Exposure(host=self.host, gateway_name=self.gateway_name, gateway_namespace=self.gateway_namespace,
                        ingress_class=self.ingress_class, tls_secret=self.tls_secret)
