"""The playground's pages: chat, side by side, kept conversations, and the pages where admins
and operators set up the OpenAI endpoint (chat policies, API limits, gateway exposure; written
through endpoint.services). The chat itself goes through the OpenAI endpoint
(endpoint.proxy.chat_completions), the same one API clients use."""

from __future__ import annotations

import yaml
from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from pydantic import ValidationError

from accounts.roles import Role, role_required, user_role
from core import untrusted
from core.untrusted import query_int
from endpoint import services as endpoint_services
from endpoint.access import chat_graphs, may_chat_with
from endpoint.models import ApiLimit, GraphExposure, PlaygroundPolicy
from graphs.models import Graph

from . import exposures, services
from .forms import ApiLimitForm, PolicyForm
from .models import Conversation
from .schema import ConversationIn

DEFAULT_PARAMS = {"temperature": 0.7, "top_p": 1.0, "max_tokens": 256}


def _page_context(request) -> dict:
    targets = exposures.chat_targets(chat_graphs(request.user))
    return {
        "targets": targets,
        "defaults": DEFAULT_PARAMS,
        "viewer_without_access": not targets and user_role(request.user) == Role.VIEWER,
    }


def _conversation_data(conversation: Conversation) -> dict:
    return {
        "id": conversation.pk,
        "title": conversation.title,
        "graph": conversation.graph_name,
        "system_prompt": conversation.system_prompt,
        "params": conversation.chat_params.model_dump(mode="json", exclude_none=True),
        "messages": [{"role": m.role, "content": m.content,
                      "timing": m.reply_timing.model_dump(mode="json", exclude_none=True) if m.timing else None}
                     for m in conversation.messages.all()],
        "save_url": reverse("playground:conversation_update", args=[conversation.pk]),
    }


@role_required(Role.VIEWER)
@require_GET
def chat(request):
    context = _page_context(request)
    conversation_id = query_int(request.GET, "c")
    if conversation_id is not None:
        conversation = get_object_or_404(Conversation.objects.prefetch_related("messages"),
                                         pk=conversation_id, owner=request.user)
        context["conversation"] = _conversation_data(conversation)
    return render(request, "playground/chat.html", context)


@role_required(Role.VIEWER)
@require_GET
def compare(request):
    return render(request, "playground/compare.html", _page_context(request))


@role_required(Role.VIEWER)
@require_GET
def conversation_list(request):
    conversations = (Conversation.objects.filter(owner=request.user)
                     .prefetch_related("messages").order_by("-updated_at", "-id")[:200])
    return render(request, "playground/conversations.html", {"conversations": conversations})


def _json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": {"message": message, "code": status}}, status=status)


def _save(request, conversation: Conversation | None) -> JsonResponse:
    try:
        data = ConversationIn.model_validate(untrusted.load_json(request.body.decode("utf-8") or "{}"))
    except (ValueError, ValidationError) as exc:
        return _json_error(400, f"not a conversation: {exc}")
    graph = Graph.objects.filter(name=data.graph).first()
    if graph is None:
        return _json_error(400, f"no graph named {data.graph!r}")
    if not may_chat_with(request.user, graph):
        return _json_error(403, "your role does not allow chatting with this graph")
    try:
        conversation = services.conversation_save(owner=request.user, data=data, graph=graph,
                                                  conversation=conversation)
    except services.QuotaExceeded as exc:
        response = _json_error(exc.status, exc.message)
        if exc.retry_after:
            response["Retry-After"] = str(exc.retry_after)
        return response
    return JsonResponse({
        "id": conversation.pk,
        "title": conversation.title,
        "url": f"{reverse('playground:chat')}?c={conversation.pk}",
        "save_url": reverse("playground:conversation_update", args=[conversation.pk]),
    }, status=201 if request.resolver_match.url_name == "conversation_create" else 200)


@role_required(Role.VIEWER)
@require_POST
def conversation_create(request):
    return _save(request, None)


@role_required(Role.VIEWER)
@require_POST
def conversation_update(request, pk: int):
    return _save(request, get_object_or_404(Conversation, pk=pk, owner=request.user))


@role_required(Role.VIEWER)
@require_POST
def conversation_delete(request, pk: int):
    conversation = get_object_or_404(Conversation, pk=pk, owner=request.user)
    services.conversation_delete(conversation=conversation, owner=request.user)
    messages.success(request, f"Conversation “{conversation.title}” deleted.")
    return redirect("playground:conversations")


@role_required(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def policies(request):
    if request.method == "POST":
        form = PolicyForm(request.POST)
        if form.is_valid():
            d = form.cleaned_data
            endpoint_services.policy_set(graph=d["graph"], viewers_may_chat=d["viewers_may_chat"], user=request.user)
            verb = "may" if d["viewers_may_chat"] else "may not"
            messages.success(request, f"Viewers {verb} chat with {d['graph'].name}.")
            return redirect("playground:policies")
        messages.error(request, "That graph does not exist.")
    allowed = set(PlaygroundPolicy.objects.filter(viewers_may_chat=True).values_list("graph_id", flat=True))
    graphs = [(g, g.pk in allowed) for g in Graph.objects.select_related("deployment").order_by("name")]
    return render(request, "playground/policies.html", {"graphs": graphs})


@role_required(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def api_limits(request):
    """Limits on the OpenAI endpoint per user or per token (scripts), beside the defaults."""
    from django.conf import settings

    form = ApiLimitForm()
    if request.method == "POST" and "delete" in request.POST:
        limit = ApiLimit.objects.filter(pk=request.POST.get("delete")).select_related("user").first()
        if limit is None:
            messages.error(request, "That limit does not exist (any more).")
        else:
            endpoint_services.api_limit_delete(limit=limit, by=request.user)
            messages.success(request, f"Limit for {limit} removed: the defaults apply.")
        return redirect("playground:api_limits")
    if request.method == "POST":
        form = ApiLimitForm(request.POST)
        if form.is_valid():
            d = form.cleaned_data
            limit = endpoint_services.api_limit_set(
                user=d["user"], token_id=d["token"] or "", token_label=d["token_label"],
                requests_per_minute=d["requests_per_minute"], concurrent_streams=d["concurrent_streams"],
                by=request.user)
            messages.success(request, f"Limit for {limit} saved.")
            return redirect("playground:api_limits")
    rows = ApiLimit.objects.select_related("user", "updated_by").order_by("user__username", "token_id")
    status = 400 if form.errors else 200
    return render(request, "playground/api_limits.html", {
        "form": form, "limits": rows, "default_rate": settings.PLAYGROUND_RATE_PER_MINUTE,
        "default_streams": settings.PLAYGROUND_MAX_CONCURRENT_STREAMS}, status=status)


def gateway_manifest(graph: Graph) -> str:
    """The objects that expose ``graph`` through its cluster's gateway, as YAML for kubectl."""
    spec = graph.head.graph_spec
    deployment = getattr(graph, "deployment", None)
    namespace = (deployment.namespace if deployment and deployment.namespace else None) or spec.namespace or "default"
    objects = endpoint_services.exposure_objects(graph=graph, dgd_name=spec.dgd_name or spec.name,
                                                 namespace=namespace, spec=spec, applied_only=False)
    return yaml.safe_dump_all(objects, sort_keys=False)


@role_required(Role.OPERATOR)
@require_http_methods(["GET", "POST"])
def exposure(request, graph: str):
    """Expose a graph's OpenAI endpoint through its cluster's gateway: the options, the URL and
    the objects to apply beside the DGD."""
    graph = get_object_or_404(Graph.objects.select_related("head", "deployment"), name=graph)
    status = 200
    if request.method == "POST" and "delete" in request.POST:
        endpoint_services.exposure_delete(graph=graph, by=request.user)
        messages.success(request, f"{graph.name} is reached through the control plane only.")
        return redirect("playground:exposure", graph.name)
    if request.method == "POST":
        fields = ("host", "gateway_name", "gateway_namespace", "ingress_class", "tls_secret")
        try:
            endpoint_services.exposure_set(graph=graph, by=request.user,
                                           **{f: request.POST.get(f, "") for f in fields},
                                           apply_with_graph=bool(request.POST.get("apply_with_graph")))
            messages.success(request, f"{graph.name}'s endpoint is exposed through the cluster's gateway.")
            return redirect("playground:exposure", graph.name)
        except ValueError as exc:
            messages.error(request, f"Not saved: {exc}")
            status = 400
    found = GraphExposure.objects.filter(graph=graph).first()
    return render(request, "playground/exposure.html", {
        "graph": graph, "exposure": found, "in_effect": exposures.in_effect(graph, found),
        "form": request.POST if status == 400 else found,
        "manifest": gateway_manifest(graph) if found else ""}, status=status)
