"""Where a gateway exposure's URL is the graph's OpenAI endpoint: only where its objects are
applied, that is beside the graph's DGD on the cluster the graph is deployed on. Saved on a
graph that runs on the local runtime, or not applied with the graph, the exposure is a manifest
to apply by hand: its host does not reach the graph, and the pages show the control plane's
relay instead (issue #43, item 1)."""

from __future__ import annotations

from dataclasses import replace

from django.urls import reverse

from endpoint.access import ChatTarget
from endpoint.models import GraphExposure


def exposure_of(graph) -> GraphExposure | None:
    try:
        return graph.exposure  # read with the graph where the page asked for it (endpoint.apps)
    except GraphExposure.DoesNotExist:
        return None


def in_effect(graph, exposure: GraphExposure | None) -> bool:
    """``exposure``'s objects go beside ``graph``'s DGD on the cluster it is deployed on: it asks to
    be applied with the graph, and the graph's live deployment is on a cluster (the Kubernetes
    runtime applies them with every apply there; the local runtime has no gateway)."""
    if exposure is None or not exposure.apply_with_graph:
        return False
    deployment = getattr(graph, "deployment", None)
    return bool(deployment and deployment.active and deployment.cluster_id)


def relay_url(request, graph_name: str) -> str:
    """The control plane's own OpenAI endpoint for a graph (endpoint.proxy), as clients reach it."""
    return request.build_absolute_uri(reverse("api:playground-models", args=[graph_name])).removesuffix("/models")


def endpoint_url(request, graph) -> str:
    """The base URL an OpenAI client uses for ``graph``: its gateway's when the exposure is in
    effect, else the relay's."""
    exposure = exposure_of(graph)
    return exposure.options.url() if in_effect(graph, exposure) else relay_url(request, graph.name)


def chat_targets(targets: list[ChatTarget]) -> list[ChatTarget]:
    """``targets`` with the gateway URL kept only where the exposure is in effect (one query)."""
    exposed = [t.graph_id for t in targets if t.gateway_url]
    if not exposed:
        return targets
    effective = set(GraphExposure.objects.filter(
        graph_id__in=exposed, apply_with_graph=True, graph__deployment__active=True,
        graph__deployment__cluster__isnull=False).values_list("graph_id", flat=True))
    return [t if t.graph_id in effective else replace(t, gateway_url="") for t in targets]
