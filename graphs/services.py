"""Every write to graphs and revisions goes through these functions. Views, the API, the
CLI and tasks call them; none of them saves a domain object itself."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from core.dgd.parse import import_manifest
from core.dgd.render import conversion_losses, default_api_version, losses_message, normalise_api_version, render
from core.documents import Bundle
from core.errors import ManifestError, Refused
from core.findings import Finding, Severity
from core.schema import structural_findings
from core.spec import GraphSpec
from core.specio import dump_yaml
from core.validation import Report, validate_manifest, validate_spec

from .companions import diff_text, file_text
from .models import Deployment, Graph, Revision

if TYPE_CHECKING:
    from accounts.roles import Actor


class GraphConflict(Refused):
    """The graph changed under the caller (stale revision) or the name is taken."""


# The graph list's own pages (graphs/urls.py: /graphs/new/, ...): a graph of one of these names would
# have a page nobody reaches (a test holds this set equal to the URLs' literal paths).
PAGE_NAMES = frozenset({"new", "import", "check", "_events"})

# Operational findings that refuse a save outright (not just an apply): typos, not drafts, and
# a name no cluster can take (its components' resource names pass Kubernetes' 63 characters).
REFUSED_ON_SAVE = {"replicas_absurd", "planner_config_invalid", "child_name_too_long"}


def _refuse_structural(spec: GraphSpec, source_api_version: str = "") -> None:
    """A spec whose manifest the CRD would refuse is never stored, nor one with a typo-sized
    mistake (replicas in the thousands). Judged in the API version it is kept in: a conversion
    nobody asked for is not a reason to refuse it (moving it to the other version is checked
    when that is asked, by revision_manifest)."""
    api_version = default_api_version(spec, source_api_version)
    errors = structural_findings(render(spec, api_version))
    if errors:
        raise ManifestError(errors)
    refused = [f for f in validate_spec(spec, api_version=api_version).findings if f.code in REFUSED_ON_SAVE]
    if refused:
        raise ManifestError(refused)


def _set_head(graph: Graph, revision: Revision) -> None:
    """``revision`` is the graph's head now, and what its search and label selectors read."""
    graph.search_text, graph.labels = graph.searchable(revision), revision.labels
    Graph.objects.filter(pk=graph.pk).update(head=revision, search_text=graph.search_text, labels=graph.labels)
    graph.head = revision


@transaction.atomic
def graph_create(*, spec: GraphSpec, user: Actor = None, description: str = "", message: str = "",
                 source_yaml: str = "", source_api_version: str = "", via: str = "ui",
                 companions: list[dict] | None = None) -> Graph:
    _refuse_structural(spec, source_api_version)
    if spec.name in PAGE_NAMES:
        raise ManifestError.single("metadata.name", f"{spec.name!r} is the address of a page of this product "
                                   f"(/graphs/{spec.name}/), so a graph of that name would have no page",
                                   "name_is_a_page", "name the graph otherwise")
    if Graph.objects.filter(name=spec.name).exists():
        raise GraphConflict(f"a graph named {spec.name!r} already exists")
    try:
        with transaction.atomic():
            graph = Graph.objects.create(name=spec.name, description=description, created_by=user)
    except IntegrityError:
        raise GraphConflict(f"a graph named {spec.name!r} already exists") from None
    revision = Revision.objects.create(
        graph=graph, number=1, spec=spec.model_dump(mode="json"), source_yaml=source_yaml,
        source_api_version=source_api_version, message=message or "created", created_by=user,
        companions=companions or [],
    )
    _set_head(graph, revision)
    audit_record(actor=user, via=via, action="graph.create", target_type="graph", target=graph.name,
                 after={"revision": 1, "spec": revision.spec}, message=revision.message)
    return graph


@transaction.atomic
def graph_update(*, graph: Graph, spec: GraphSpec, user: Actor = None, message: str = "",
                 expected_head: int | None = None, source_yaml: str = "", source_api_version: str = "",
                 via: str = "ui", companions: list[dict] | None = None) -> Revision:
    """A new revision. ``expected_head`` guards against overwriting someone else's edit.
    ``companions``: the objects the manifest file held beside the graph; None keeps the head's
    (an edit of the spec alone does not drop them)."""
    if spec.name != graph.name:
        raise ManifestError([Finding(Severity.ERROR, "rename", "metadata.name",
                                     f"this graph is {graph.name!r}; a graph cannot be renamed",
                                     "create a new graph from this manifest instead")])
    _refuse_structural(spec, source_api_version)
    locked = Graph.objects.select_for_update().get(pk=graph.pk)
    head = locked.head
    if companions is None:
        companions = head.companions if head else []
    if expected_head is not None and head is not None and head.number != expected_head:
        raise GraphConflict(f"{graph.name} is now at revision {head.number}, not {expected_head}: reload and retry")
    number = (head.number if head else 0) + 1
    revision = Revision.objects.create(
        graph=locked, number=number, spec=spec.model_dump(mode="json"), source_yaml=source_yaml,
        source_api_version=source_api_version, message=message or f"revision {number}", created_by=user,
        companions=companions,
    )
    _set_head(graph, revision)
    audit_record(actor=user, via=via, action="graph.update", target_type="graph", target=graph.name,
                 before={"revision": head.number, "spec": head.spec} if head else None,
                 after={"revision": number, "spec": revision.spec}, message=revision.message)
    return revision


def graph_import(*, obj: dict, user: Actor = None, text: str = "", dynamo_version: str | None = None,
                 message: str = "", via: str = "ui", companions: list[dict] | None = None,
                 ) -> tuple[Graph, Revision, Report]:
    """Create a graph from a manifest, or add a revision when the graph exists. Nothing is
    stored when the manifest has structural errors. ``companions``: the other objects of the
    file (core/documents.py), kept with the revision."""
    report = validate_manifest(obj, dynamo_version=dynamo_version)
    structural = [f for f in report.findings if f.severity == Severity.ERROR and (f.code.startswith(
        ("schema_", "api_version", "not_a_mapping", "kind", "invalid_", "type", "name_required", "gpu_count"))
        or f.code in REFUSED_ON_SAVE)]
    if structural or report.spec is None:
        raise ManifestError(structural or [f for f in report.findings if f.severity == Severity.ERROR])
    spec = report.spec
    api_version = obj.get("apiVersion", "")
    existing = Graph.objects.filter(name=spec.name).first()
    if existing is None:
        graph = graph_create(spec=spec, user=user, message=message or "imported", source_yaml=text,
                             source_api_version=api_version, via=via, companions=companions or [])
        return graph, graph.head, report
    head = existing.head
    if (head is not None and head.spec == spec.model_dump(mode="json")
            and (not companions or companions == head.companions)):
        # The same graph again (kubectl apply of an unchanged file): no empty revision; the head
        # stays, and callers tell "unchanged" by its number.
        return existing, head, report
    revision = graph_update(graph=existing, spec=spec, user=user, message=message or "imported",
                            source_yaml=text, source_api_version=api_version, via=via,
                            companions=companions or None)
    return existing, revision, report


@transaction.atomic
def graph_import_bundle(*, bundle: Bundle, user: Actor = None, text: str = "", dynamo_version: str | None = None,
                        message: str = "", via: str = "ui") -> list[tuple[Graph, Revision, Report]]:
    """Every graph of a manifest file (core/documents.py), each keeping the file's other
    objects, as ``kubectl apply -f`` would create them all: all of them or none. A file of the
    DGD alone keeps a graph's companions, as applying it leaves the cluster's ConfigMaps be."""
    return [graph_import(obj=obj, user=user, text=text if len(bundle.graphs) == 1 else "",
                         dynamo_version=dynamo_version, message=message, via=via, companions=bundle.companions)
            for obj in bundle.graphs]


def companions_finding(bundle: Bundle) -> Finding | None:
    """What an import does with the file's other objects, said where the findings are shown."""
    if not bundle.companions:
        return None
    names = ", ".join(f"{c['kind']} {c['metadata']['name']}" for c in bundle.companions[:8])
    more = f" and {len(bundle.companions) - 8} more" if len(bundle.companions) > 8 else ""
    return Finding(Severity.INFO, "companions_kept", "",
                   f"the file also holds {names}{more}: kept with the graph's revision, exported with it and "
                   "applied beside it by server-side apply on a cluster (the local runtime has no use for them)")


class GraphHasBenchmarks(GraphConflict):
    """Deleting the graph would delete benchmark runs: refused unless the caller says so."""

    def __init__(self, graph: Graph, run_ids: list[int]):
        self.run_ids = run_ids
        shown = ", ".join(f"#{pk}" for pk in run_ids[:20]) + (" …" if len(run_ids) > 20 else "")
        super().__init__(
            f"{graph.name} has {len(run_ids)} benchmark run{'s' if len(run_ids) != 1 else ''} ({shown}) that measured "
            "its revisions; deleting the graph deletes them too. Export what you want to keep, then delete with "
            "the benchmark runs (the API's ?with_benchmarks=true, the page's checkbox).")

    def as_dict(self) -> dict:
        return {**super().as_dict(), "benchmark_runs": self.run_ids}


@transaction.atomic
def graph_delete(*, graph: Graph, user: Actor = None, via: str = "ui", with_benchmarks: bool = False) -> None:
    """Delete a graph, its revisions and its history. A benchmark run is evidence measured
    against one revision; it is never dropped as a side effect: with runs, the caller must ask
    for ``with_benchmarks`` (the runs, their studies and recommendations go too, audited)."""
    graph = Graph.objects.select_for_update().get(pk=graph.pk)
    deployment = Deployment.objects.filter(graph=graph).first()
    if deployment is not None and deployment.active:
        raise GraphConflict(f"{graph.name} is deployed: delete its deployment first")
    # The reverse relation, not an import: benchmarks sit above graphs.
    runs = graph.benchmark_runs.order_by("pk")
    run_ids = list(runs.values_list("pk", flat=True))
    if run_ids and not with_benchmarks:
        raise GraphHasBenchmarks(graph, run_ids)
    active = [pk for pk, state in runs.values_list("pk", "state") if state in ("pending", "running")]
    if active:
        raise GraphConflict(f"{graph.name} has benchmark runs in progress ({', '.join(f'#{pk}' for pk in active)}): "
                            "cancel them first")
    audit_record(actor=user, via=via, action="graph.delete", target_type="graph", target=graph.name,
                 before={"revision": graph.head.number if graph.head else None,
                         "spec": graph.head.spec if graph.head else None, "benchmark_runs": run_ids})
    if run_ids:
        runs.delete()
    Graph.objects.filter(pk=graph.pk).update(head=None)
    graph.delete()


class LossyConversion(Refused):
    """Rendering a revision in the other API version would drop fields it has no place for."""


@transaction.atomic
def graph_archive(*, graph: Graph, note: str, user: Actor = None, via: str = "ui") -> Graph:
    """Retire a graph that is only kept as a record (an A/B study's variant): out of the lists,
    never applied again; everything it recorded stays. Refused while it is deployed: what runs
    must stay in sight."""
    deployment = Deployment.objects.filter(graph=graph).first()
    if deployment is not None and deployment.active:
        raise Refused(f"{graph.name} is deployed: delete its deployment before archiving it")
    if graph.archived_at is None:
        Graph.objects.filter(pk=graph.pk).update(archived_at=timezone.now(), archived_note=note[:300])
        graph.refresh_from_db(fields=["archived_at", "archived_note"])
        audit_record(actor=user, via=via, action="graph.archive", target_type="graph", target=graph.name,
                     message=note[:300])
    return graph


def revision_manifest(revision: Revision, api_version: str | None = None, dynamo_version: str | None = None) -> dict:
    """The revision as a DGD in ``api_version`` (None: the revision's own, Revision.api_version).
    Raises LossyConversion, naming each field, rather than drop one."""
    api_version = normalise_api_version(api_version) if api_version else revision.api_version
    losses = conversion_losses(revision.graph_spec, api_version)
    if losses:
        raise LossyConversion(losses_message(revision.graph_spec, api_version, losses))
    return render(revision.graph_spec, api_version, dynamo_version)


def revision_report(revision: Revision, api_version: str | None = None, dynamo_version: str | None = None) -> Report:
    api_version = normalise_api_version(api_version) if api_version else revision.api_version
    return validate_spec(revision.graph_spec, api_version=api_version, dynamo_version=dynamo_version)


def revision_export(revision: Revision, api_version: str | None = None, dynamo_version: str | None = None) -> str:
    """The export: the revision's DGD in ``api_version``, preceded by its companions (in their
    file's order) as one multi-document YAML file when it has any (graphs/companions.py).
    Raises LossyConversion as revision_manifest does."""
    return file_text(revision_manifest(revision, api_version, dynamo_version), revision.companions)


def revision_diff(old: Revision | None, new: Revision, api_version: str | None = None) -> str:
    """A unified diff of the two revisions' rendered manifests (each rendered whole, even where
    a conversion is lossy: a diff shows, it does not export), each followed by its companions
    as YAML documents: a changed ConfigMap shows here too."""
    api_version = normalise_api_version(api_version) if api_version else new.api_version
    before = (dump_yaml(render(old.graph_spec, api_version)) + diff_text(old.companions)
              ).splitlines(keepends=True) if old else []
    after = (dump_yaml(render(new.graph_spec, api_version)) + diff_text(new.companions)
             ).splitlines(keepends=True)
    name = new.graph.name
    return "".join(difflib.unified_diff(
        before, after,
        fromfile=f"{name}@{old.number}" if old else "/dev/null",
        tofile=f"{name}@{new.number}",
    ))


def spec_from_manifest(obj: dict, dynamo_version: str | None = None) -> GraphSpec:
    return import_manifest(obj, dynamo_version=dynamo_version)
