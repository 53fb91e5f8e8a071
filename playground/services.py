"""Every write of the playground: policies and kept conversations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from audit.services import audit_record
from graphs.models import Graph

from . import admission
from .models import ApiLimit, Conversation, Message, PlaygroundPolicy
from .schema import ConversationIn

if TYPE_CHECKING:
    from accounts.roles import Actor

TITLE_FROM_PROMPT = 60  # characters of the first prompt that name an untitled conversation


@transaction.atomic
def policy_set(*, graph: Graph, viewers_may_chat: bool, user: Actor = None, via: str = "ui") -> PlaygroundPolicy:
    before = PlaygroundPolicy.objects.filter(graph=graph).values_list("viewers_may_chat", flat=True).first()
    policy, _ = PlaygroundPolicy.objects.update_or_create(
        graph=graph, defaults={"viewers_may_chat": viewers_may_chat, "updated_by": user})
    audit_record(actor=user, via=via, action="playground.policy", target_type="graph", target=graph.name,
                 before={"viewers_may_chat": bool(before)}, after={"viewers_may_chat": viewers_may_chat})
    # Admissions remembered under the old policy must not outlive it (in this process; other
    # processes forget within PLAYGROUND_ADMISSION_TTL): now, and again once committed, in
    # case a request re-remembered the old policy in between.
    admission.forget()
    transaction.on_commit(admission.forget)
    return policy


@transaction.atomic
def api_limit_set(*, user, token_id: str = "", token_label: str = "", requests_per_minute: int | None,
                  concurrent_streams: int | None, by=None, via: str = "ui") -> ApiLimit:
    """Set the OpenAI endpoint's limits of ``user`` (token_id "") or of one of its tokens;
    None keeps a limit at the setting's default."""
    for name, value in (("requests_per_minute", requests_per_minute), ("concurrent_streams", concurrent_streams)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a whole number of 0 or more (or empty for the default)")
    before = ApiLimit.objects.filter(user=user, token_id=token_id).values(
        "requests_per_minute", "concurrent_streams").first()
    limit, _ = ApiLimit.objects.update_or_create(
        user=user, token_id=token_id,
        defaults={"token_label": token_label, "requests_per_minute": requests_per_minute,
                  "concurrent_streams": concurrent_streams, "updated_by": by})
    audit_record(actor=by, via=via, action="playground.api_limit", target_type="user", target=user.username,
                 before=before or {}, after={"token": token_label or token_id or "(every request)",
                                             "requests_per_minute": requests_per_minute,
                                             "concurrent_streams": concurrent_streams})
    admission.forget()  # admissions carry their limits
    transaction.on_commit(admission.forget)
    return limit


@transaction.atomic
def api_limit_delete(*, limit: ApiLimit, by=None, via: str = "ui") -> None:
    audit_record(actor=by, via=via, action="playground.api_limit", target_type="user", target=limit.user.username,
                 before={"requests_per_minute": limit.requests_per_minute,
                         "concurrent_streams": limit.concurrent_streams}, after={})
    limit.delete()
    admission.forget()
    transaction.on_commit(admission.forget)


def _title(data: ConversationIn) -> str:
    if data.title.strip():
        return data.title.strip()
    first = next((m.content for m in data.messages if m.role == "user" and m.content.strip()), "")
    first = " ".join(first.split())
    if not first:
        return f"Chat with {data.graph}"
    return first if len(first) <= TITLE_FROM_PROMPT else first[:TITLE_FROM_PROMPT - 1] + "…"


@transaction.atomic
def conversation_save(*, owner, data: ConversationIn, graph: Graph | None,
                      conversation: Conversation | None = None) -> Conversation:
    """Create a conversation, or replace the turns of ``conversation`` (which ``owner`` must
    own) with ``data``'s. The page posts the whole conversation after every reply."""
    if conversation is None:
        conversation = Conversation(owner=owner)
    elif conversation.owner_id != owner.pk:
        raise PermissionError("only the owner may change a conversation")
    else:
        # Lock the row: two tabs saving the same conversation must not interleave their turns.
        Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
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
