"""Read paths for lists of graphs: what the graph list page and the API list show, without
loading any revision's spec or any applied manifest (a spec is kilobytes of JSON; a list shows
three of its fields)."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import Count, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Window
from django.db.models.fields.json import HasKey, KeyTextTransform
from django.db.models.functions import Coalesce
from django.db.models.lookups import In

from core.labels import Requirement

from .models import Graph, GraphState, Pod, searched_for

# The spec fields a list shows: columns of the head revision, copied from its spec when it was
# stored (Revision.save), so that a list reads no JSON at all.
SUMMARY_FIELDS = ("model", "backend", "dynamo_version")

def listed(graphs: QuerySet[Graph], *, archived: bool = False) -> QuerySet[Graph]:
    """Live graphs, or (``archived``) only the archived ones: a list shows one or the other."""
    return graphs.filter(archived_at__isnull=not archived)


@dataclass(frozen=True)
class GraphFilter:
    """What a list of graphs is narrowed to, the same in the page, the API and the CLI: ``search``
    in the name, the description or the model; where the graph runs (``namespace``, ``cluster``,
    ``runtime``: the deployment's own); its ``state`` (``not_deployed`` includes graphs never
    applied); its head revision's ``labels`` (a label selector's requirements, all met, as
    ``kubectl get -l`` meets them). Empty: no narrowing."""

    search: str = ""
    namespace: str = ""
    cluster: str = ""
    runtime: str = ""
    state: str = ""
    labels: tuple[Requirement, ...] = ()

    def apply(self, graphs: QuerySet[Graph]) -> QuerySet[Graph]:
        if self.search:
            graphs = graphs.filter(search_text__contains=searched_for(self.search))
        if self.namespace:
            graphs = graphs.filter(deployment__namespace=self.namespace)
        if self.cluster:
            graphs = graphs.filter(deployment__cluster__name=self.cluster)
        if self.runtime:
            graphs = graphs.filter(deployment__runtime=self.runtime)
        if self.state == GraphState.NOT_DEPLOYED:
            graphs = graphs.filter(Q(deployment__isnull=True) | Q(deployment__state=GraphState.NOT_DEPLOYED))
        elif self.state:
            graphs = graphs.filter(deployment__state=self.state)
        for requirement in self.labels:
            graphs = graphs.filter(_label_condition(requirement))
        return graphs

    @property
    def narrowed(self) -> bool:
        return any((self.search, self.namespace, self.cluster, self.runtime, self.state, self.labels))


def _label_condition(requirement: Requirement) -> Q:
    """One requirement on the graph's labels (its head revision's): ``!=`` and ``notin`` hold for
    a graph without the key, as in Kubernetes. Where the database has JSON containment
    (PostgreSQL) a value is matched by containment, else by the key's text (SQLite)."""
    has = Q(HasKey(F("labels"), requirement.key))
    if requirement.operator == "exists":
        return has
    if requirement.operator == "!":
        return ~has
    if connection.features.supports_json_field_contains:
        equal = Q()
        for value in requirement.values:
            equal |= Q(labels__contains={requirement.key: value})
    else:
        equal = has & Q(In(KeyTextTransform(requirement.key, "labels"), list(requirement.values)))
    return equal if requirement.operator in ("=", "in") else ~equal


def graph_summaries(*, archived: bool = False, where: GraphFilter = GraphFilter()) -> QuerySet[Graph]:
    """Graphs ordered by name, each with ``head_model``, ``head_backend`` and
    ``head_dynamo_version`` annotated and only the columns a list row needs loaded."""
    return (
        where.apply(listed(Graph.objects, archived=archived)).select_related("head", "deployment")
        .only("name", "description", "created_at", "updated_at", "archived_at", "archived_note", "head__number",
              "deployment__state", "deployment__graph_id")
        .annotate(**{f"head_{field}": F(f"head__{field}") for field in SUMMARY_FIELDS})
        .order_by("name")
    )


# What one row of the graph list page shows, in this order (graph_list_rows).
LIST_ROW = ("name", "description", "head_model", "head_backend", "head_dynamo_version", "head_number",
            "live_state", "pods_ready", "pods_total", "updated_at", "head_labels")


def _pod_count(**filters) -> Coalesce:
    pods = (Pod.objects.filter(deployment__graph=OuterRef("pk"), **filters).order_by()
            .values("deployment__graph").annotate(n=Count("id")).values("n"))
    return Coalesce(Subquery(pods, output_field=IntegerField()), 0)


def graph_list_rows(where: GraphFilter = GraphFilter(), *, archived: bool = False) -> QuerySet:
    """The graph list page's rows as plain tuples (LIST_ROW), one query for a page of them: pod
    counts are correlated subqueries, which the database runs for the rows of the page only.
    No model is built per row (building 150 of them was half of the page's time)."""
    graphs = where.apply(listed(Graph.objects.all(), archived=archived))
    return (graphs.order_by("name")
            .annotate(**{f"head_{field}": F(f"head__{field}") for field in SUMMARY_FIELDS},
                      head_number=F("head__number"), head_labels=F("labels"),
                      live_state=F("deployment__state"),
                      pods_ready=_pod_count(ready=True), pods_total=_pod_count())
            .values_list(*LIST_ROW))


LIST_PAGE_SIZE = 50
_WINDOWED_PAGES = 10_000  # deeper pages (and nonsense numbers) take Paginator's own path


def graph_list_page(where: GraphFilter = GraphFilter(), *, archived: bool = False, number: str | None = None) -> Page:
    """A page of graph_list_rows (``?page=``, as Paginator.get_page reads it) and the count of
    them all. A search reads every graph to find its matches and order them (the name index
    cannot find them), so there the count rides on the page's one query, a window over the
    matches, instead of a second query. Otherwise the page walks the name index and
    stops at its last row, and the count is a query of its own."""
    rows = graph_list_rows(where, archived=archived)
    paginator = Paginator(rows, LIST_PAGE_SIZE)
    if where.search:
        try:
            wanted = int(number or 1)
        except ValueError:
            wanted = 1
        if 1 <= wanted <= _WINDOWED_PAGES:
            start = (wanted - 1) * LIST_PAGE_SIZE
            counted = list(rows.annotate(matched=Window(Count("pk")))[start:start + LIST_PAGE_SIZE])
            if counted:  # else past the end, or nothing matches: Paginator says which
                paginator.count = counted[0][-1]
                return paginator._get_page([row[:-1] for row in counted], wanted, paginator)
    return paginator.get_page(number)
