"""Read paths for lists of graphs: what the graph list page and the API list show, without
loading any revision's spec or any applied manifest (a spec is kilobytes of JSON; a list shows
three of its fields)."""

from __future__ import annotations

from django.db.models import F, QuerySet

from .models import Graph

# The spec fields a list shows: columns of the head revision, copied from its spec when it was
# stored (Revision.save), so that a list reads no JSON at all.
SUMMARY_FIELDS = ("model", "backend", "dynamo_version")


def graph_summaries() -> QuerySet[Graph]:
    """Graphs ordered by name, each with ``head_model``, ``head_backend`` and
    ``head_dynamo_version`` annotated and only the columns a list row needs loaded."""
    return (
        Graph.objects.select_related("head", "deployment")
        .only("name", "description", "created_at", "updated_at", "head__number",
              "deployment__state", "deployment__graph_id")
        .annotate(**{f"head_{field}": F(f"head__{field}") for field in SUMMARY_FIELDS})
        .order_by("name")
    )
