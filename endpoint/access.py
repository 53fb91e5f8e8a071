"""Who may chat with which graph, and where its frontend is.

Operators and admins may chat with any serving graph; viewers only where an admin allowed it
(``PlaygroundPolicy.viewers_may_chat``). The upstream URL comes only from the graph's
Deployment.endpoint, written by the runtime: never from the request."""

from __future__ import annotations

import json
from dataclasses import dataclass

from accounts.roles import Role, user_role
from graphs.engines import graph_simulation
from graphs.models import Graph, GraphState

from .models import PlaygroundPolicy
from .upstream import CHAT_PATH, BadEndpoint, frontend_base

# A deployment in these states has no frontend worth calling.
NOT_SERVING = (GraphState.NOT_DEPLOYED, GraphState.FAILED, GraphState.DELETING)


class ChatRefused(Exception):
    """The user may not chat with this graph, or it is not serving. ``status`` is the HTTP
    status to answer with, ``kind`` the error type in the OpenAI-shaped body."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class ChatTarget:
    graph_id: int
    name: str
    model: str
    base: str  # the frontend's base URL: its OpenAI routes are base + "/v1/..."
    state: str
    # Why the graph's replies come from Dynamo's mocker ("" when a real engine answers).
    simulated: str = ""
    gateway_url: str = ""  # the OpenAI base URL through the cluster's gateway, when exposed there
    # Dynamo worker instance id -> pod name (the local runtime's report), for the reply timing.
    workers: tuple[tuple[str, str], ...] = ()

    @property
    def workers_json(self) -> str:
        return json.dumps(dict(self.workers))

    @property
    def url(self) -> str:
        """The frontend's chat-completions URL."""
        return self.base + CHAT_PATH


def may_chat(role: Role, policy: PlaygroundPolicy | None) -> bool:
    if role >= Role.OPERATOR:
        return True
    return role == Role.VIEWER and policy is not None and policy.viewers_may_chat


def _model(graph: Graph) -> str:
    spec = graph.head.spec if graph.head else {}
    return (spec or {}).get("model") or ""


def _simulated(graph: Graph) -> str:
    deployment = graph.deployment
    if deployment.revision is None:
        return ""
    simulation = graph_simulation(deployment.revision.graph_spec, deployment.runtime)
    return f"{simulation.label}: {simulation.reason}" if simulation else ""


def _serving(graph: Graph) -> bool:
    deployment = getattr(graph, "deployment", None)
    return bool(deployment and deployment.active and deployment.endpoint and deployment.state not in NOT_SERVING)


def chat_target(user, graph_name: str) -> ChatTarget:
    """The graph ``user`` wants to chat with, or ChatRefused."""
    role = user_role(user)
    if role == Role.NONE:
        raise ChatRefused(403, "permission_denied", "your role does not allow the playground")
    graph = (Graph.objects.select_related("head", "deployment", "deployment__revision", "playground_policy")
             .filter(name=graph_name).first())
    if graph is None:
        raise ChatRefused(404, "not_found", f"no graph named {graph_name!r}")
    if not may_chat(role, getattr(graph, "playground_policy", None)):
        raise ChatRefused(403, "permission_denied",
                          "viewers may not chat with this graph; an admin can allow it in the playground policies")
    if not _serving(graph):
        state = graph.deployment.state if hasattr(graph, "deployment") else GraphState.NOT_DEPLOYED
        raise ChatRefused(503, "graph_not_serving", f"graph {graph.name!r} is not serving (state: {state})")
    try:
        base = frontend_base(graph.deployment.endpoint)
    except BadEndpoint as exc:
        raise ChatRefused(502, "bad_endpoint", str(exc)) from None
    return ChatTarget(graph.pk, graph.name, _model(graph), base, graph.deployment.state, _simulated(graph))


def chat_graphs(user) -> list[ChatTarget]:
    """Every serving graph ``user`` may chat with, by name."""
    role = user_role(user)
    out = []
    for graph in Graph.objects.select_related("head", "deployment", "deployment__revision",
                                              "playground_policy", "exposure").order_by("name"):
        if not _serving(graph) or not may_chat(role, getattr(graph, "playground_policy", None)):
            continue
        try:
            base = frontend_base(graph.deployment.endpoint)
        except BadEndpoint:
            continue
        workers = (graph.deployment.runtime_info or {}).get("workers") or {}
        exposure = getattr(graph, "exposure", None)
        out.append(ChatTarget(graph.pk, graph.name, _model(graph), base, graph.deployment.state,
                              _simulated(graph), exposure.options.url() if exposure else "",
                              tuple(sorted(workers.items()))))
    return out


def may_chat_with(user, graph: Graph) -> bool:
    """``user`` may chat with ``graph`` (serving or not): for keeping conversations."""
    return may_chat(user_role(user), PlaygroundPolicy.objects.filter(graph=graph).first())
