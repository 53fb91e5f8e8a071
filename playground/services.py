"""Every write of the playground: policies and kept conversations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Sum

from audit.services import audit_record
from core.spec import DNS1123_SUBDOMAIN
from graphs.models import Graph
from graphs.runtimes.kubernetes.gateway import gateway_objects

from . import admission, limits
from .models import ApiLimit, Conversation, GraphExposure, Message, PlaygroundPolicy
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


def exposure_objects(*, graph: Graph, dgd_name: str, namespace: str, spec, applied_only: bool = True) -> list[dict]:
    """The objects exposing ``graph`` through its cluster's gateway ([] without an exposure, or,
    with ``applied_only``, one not applied with the graph): what the runtime applies beside the DGD."""
    exposure = GraphExposure.objects.filter(graph=graph).first()
    if exposure is None or (applied_only and not exposure.apply_with_graph):
        return []
    frontend = next((s.name for s in spec.services if s.role == "frontend"), "Frontend")
    return gateway_objects(graph=graph.name, dgd_name=dgd_name, namespace=namespace, frontend=frontend,
                           exposure=exposure.options)


@transaction.atomic
def exposure_set(*, graph: Graph, host: str, gateway_name: str = "", gateway_namespace: str = "",
                 ingress_class: str = "", tls_secret: str = "", apply_with_graph: bool = False, by=None,
                 via: str = "ui") -> GraphExposure:
    """Expose ``graph``'s OpenAI endpoint through its cluster's gateway on ``host`` (a Gateway
    API Gateway, an ingress-nginx class, or both). Raises ValueError naming the field."""
    values = {"host": host.strip().lower(), "gateway_name": gateway_name.strip(),
              "gateway_namespace": gateway_namespace.strip(), "ingress_class": ingress_class.strip(),
              "tls_secret": tls_secret.strip()}
    for name, value in values.items():
        if value and (len(value) > 253 or not DNS1123_SUBDOMAIN.match(value)):
            raise ValueError(f"{name}: {value!r} is not a Kubernetes/DNS name (lower-case letters, digits, '-', '.')")
    if not values["host"]:
        raise ValueError("host: the hostname clients will call, e.g. llm.example.com")
    if not values["gateway_name"] and not values["ingress_class"]:
        raise ValueError("gateway_name: name a Gateway API Gateway, an ingress class, or both")
    values["apply_with_graph"] = bool(apply_with_graph)
    before = GraphExposure.objects.filter(graph=graph).values(*values).first()
    exposure, _ = GraphExposure.objects.update_or_create(graph=graph, defaults={**values, "updated_by": by})
    audit_record(actor=by, via=via, action="playground.exposure", target_type="graph", target=graph.name,
                 before=before or {}, after=values)
    return exposure


@transaction.atomic
def exposure_delete(*, graph: Graph, by=None, via: str = "ui") -> None:
    before = GraphExposure.objects.filter(graph=graph).values("host").first()
    if before:
        GraphExposure.objects.filter(graph=graph).delete()
        audit_record(actor=by, via=via, action="playground.exposure", target_type="graph", target=graph.name,
                     before=before, after={})
