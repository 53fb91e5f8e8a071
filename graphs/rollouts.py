"""Rollback in one step: an earlier revision runs again as a new one, with the runtime's rolling
rules (graphs/runtimes/local/rollout.py on the local runtime; on Kubernetes, refused in the
middle of a rollout: the runtime's change_refused)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from audit.services import audit_record
from core.errors import OperationRefused

from . import services
from .models import Deployment, Graph, Operation
from .operations import graph_apply
from .runtimes.registry import get_runtime

if TYPE_CHECKING:
    from accounts.roles import Actor


@transaction.atomic
def graph_rollback(*, graph: Graph, revision_number: int, user: Actor = None, via: str = "ui",
                   dry_run: bool = False, force: bool = False) -> Operation:
    """Run revision ``revision_number`` again, in one step: it becomes the new head (a new revision,
    audited) and is applied where the graph runs, with the runtime's rolling rules. A dry run
    writes nothing and returns the diff against what runs."""

    deployment = Deployment.objects.filter(graph=graph).select_related("revision").first()
    if deployment is None or not deployment.active or deployment.revision is None:
        raise OperationRefused(f"{graph.name} is not deployed: there is nothing to roll back. Apply revision "
                               f"{revision_number} instead")
    target = graph.revisions.filter(number=revision_number).first()
    if target is None:
        raise OperationRefused(f"{graph.name} has no revision {revision_number}")
    where = {"runtime": deployment.runtime, "cluster": deployment.cluster_name, "namespace": deployment.namespace}
    if dry_run:
        return graph_apply(graph=graph, user=user, via=via, revision_number=revision_number, dry_run=True, **where)
    if target.spec == deployment.revision.spec and target.companions == deployment.revision.companions:
        raise OperationRefused(f"revision {revision_number} is what runs now (revision {deployment.revision.number}): "
                               "nothing to roll back")
    if not force and (busy := get_runtime(deployment.runtime).change_refused(deployment)):
        raise OperationRefused(busy)
    running = deployment.revision.number
    revision = services.graph_update(
        graph=graph, spec=target.graph_spec, user=user, via=via, companions=target.companions,
        source_yaml=target.source_yaml, source_api_version=target.source_api_version,
        message=f"rollback to revision {revision_number} (revision {running} was running)")
    audit_record(actor=user, via=via, action="graph.rollback", target_type="graph", target=graph.name,
                 before={"revision": running}, after={"revision": revision.number, "from": revision_number},
                 message=revision.message)
    return graph_apply(graph=graph, user=user, via=via, revision_number=revision.number, force=force, **where)
