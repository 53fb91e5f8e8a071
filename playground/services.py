"""Every write of the playground: kept conversations."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Sum

from endpoint import limits
from graphs.models import Graph

from .models import Conversation, Message
from .schema import ConversationIn

TITLE_FROM_PROMPT = 60  # characters of the first prompt that name an untitled conversation


def _title(data: ConversationIn) -> str:
    if data.title.strip():
        return data.title.strip()
    first = next((m.content for m in data.messages if m.role == "user" and m.content.strip()), "")
    first = " ".join(first.split())
    if not first:
        return f"Chat with {data.graph}"
    return first if len(first) <= TITLE_FROM_PROMPT else first[:TITLE_FROM_PROMPT - 1] + "…"


class QuotaExceeded(Exception):
    """A save the owner's quota or save rate does not allow: ``status`` 413 or 429."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def _size(data: ConversationIn) -> int:
    return len(data.system_prompt.encode()) + sum(len(m.content.encode()) for m in data.messages)


def _check_quota(owner, size: int, conversation: Conversation | None) -> None:
    """Refuse a save that would pass the owner's count or bytes quota, or their save rate.
    Called with the owner's row locked, so that two saves cannot both slip under a quota."""
    rate = settings.PLAYGROUND_CONVERSATION_SAVES_PER_MINUTE
    refusal = limits.count_event(f"saves:u:{owner.pk}", rate)
    if refusal is not None:
        raise QuotaExceeded(429, f"more than {rate} conversation saves in a minute: the next is possible in "
                                 f"{refusal} s", refusal)
    others = Conversation.objects.filter(owner=owner).exclude(pk=getattr(conversation, "pk", None))
    count_cap, bytes_cap = settings.PLAYGROUND_CONVERSATIONS_MAX, settings.PLAYGROUND_CONVERSATION_BYTES
    if conversation is None and others.count() >= count_cap:
        raise QuotaExceeded(413, f"you keep {count_cap} conversations, the most allowed: delete one on the "
                                 "Conversations page to keep a new one")
    used = others.aggregate(total=Sum("size_bytes"))["total"] or 0
    if used + size > bytes_cap:
        raise QuotaExceeded(413, f"your conversations would take {used + size:,} bytes, more than the "
                                 f"{bytes_cap:,} allowed: delete some on the Conversations page")


@transaction.atomic
def conversation_save(*, owner, data: ConversationIn, graph: Graph | None,
                      conversation: Conversation | None = None) -> Conversation:
    """Create a conversation, or replace the turns of ``conversation`` (which ``owner`` must
    own) with ``data``'s. The page posts the whole conversation after every reply. Raises
    QuotaExceeded past the owner's quota (PLAYGROUND_CONVERSATIONS_MAX, _BYTES) or save rate."""
    if conversation is not None and conversation.owner_id != owner.pk:
        raise PermissionError("only the owner may change a conversation")
    # Lock the owner: two tabs saving must not interleave turns nor both slip under the quota.
    get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
    size = _size(data)
    _check_quota(owner, size, conversation)
    if conversation is None:
        conversation = Conversation(owner=owner)
    conversation.size_bytes = size
    conversation.graph = graph
    conversation.graph_name = data.graph
    conversation.title = _title(data)
    conversation.system_prompt = data.system_prompt
    conversation.params = data.params.model_dump(mode="json", exclude_none=True)
    conversation.save()
    conversation.messages.all().delete()
    Message.objects.bulk_create([
        Message(conversation=conversation, position=i, role=m.role, content=m.content,
                timing=m.timing.model_dump(mode="json", exclude_none=True) if m.timing else None)
        for i, m in enumerate(data.messages)
    ])
    return conversation


@transaction.atomic
def conversation_delete(*, conversation: Conversation, owner) -> None:
    if conversation.owner_id != owner.pk:
        raise PermissionError("only the owner may delete a conversation")
    conversation.delete()
