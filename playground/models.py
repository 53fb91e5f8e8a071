"""The conversations playground users keep.

A reply's timings live in ``Message.timing`` and are read through ``schema.ReplyTiming``."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from graphs.models import Graph

from .schema import ChatParams, ReplyTiming


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
