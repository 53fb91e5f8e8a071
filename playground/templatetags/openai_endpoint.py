"""The graph page's line about its OpenAI endpoint (templates/graphs/detail.html)."""

from django import template

from playground import exposures

register = template.Library()


@register.inclusion_tag("playground/_endpoint_line.html", takes_context=True)
def openai_endpoint_line(context, graph) -> dict:
    """The URL an OpenAI client uses for ``graph`` and, when an exposure is saved but does not
    reach the graph, why its host is not that URL."""
    request = context["request"]
    exposure = exposures.exposure_of(graph)
    effective = exposures.in_effect(graph, exposure)
    return {"graph": graph, "can_operate": context.get("can_operate"),
            "url": exposure.options.url() if effective else exposures.relay_url(request, graph.name),
            "pending": exposure.options.url() if exposure is not None and not effective else ""}
