"""The graph page's line about its OpenAI endpoint (templates/graphs/detail.html)."""

from django import template
from django.urls import reverse

from endpoint.models import GraphExposure

register = template.Library()


@register.simple_tag(takes_context=True)
def openai_endpoint(context, graph) -> str:
    """The base URL an OpenAI client uses for ``graph``: through its cluster's gateway when it is
    exposed there, else the control plane's relay."""
    try:
        exposure = graph.exposure  # read with the graph where the page asked for it (endpoint.apps)
    except GraphExposure.DoesNotExist:
        exposure = None
    if exposure is not None:
        return exposure.options.url()
    return context["request"].build_absolute_uri(reverse("api:playground-models", args=[graph.name])).removesuffix(
        "/models")
