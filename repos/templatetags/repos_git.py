"""The graph page's Git card: where the graph is kept, the state of its file, the last change
on its way to Git, and, where Argo CD or Flux applies it, what keeps their syncs from
reverting the replicas an autoscaler owns."""

from django import template

from ..gitops import gitops_view
from ..models import Export, GraphLink

register = template.Library()


@register.inclusion_tag("repos/_graph_git.html", takes_context=True)
def git_card(context, graph):
    link = GraphLink.objects.select_related("repository").filter(graph=graph).first()
    export = Export.objects.filter(revision_id=graph.head_id).first() if graph.head_id else None
    deployment = getattr(graph, "deployment", None) if hasattr(graph, "deployment") else None
    return {"graph": graph, "link": link, "export": export, "csrf_token": context.get("csrf_token"),
            "can_operate": context.get("can_operate"), **gitops_view(graph, deployment)}
