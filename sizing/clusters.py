"""DGDR on clusters: an estimate's inputs applied to a registered cluster as a
DynamoGraphDeploymentRequest, its status followed (the operator's phase, and its own message on
failure), and the DGD its profiler chose adopted as a graph revision through the importer.

Applied with server-side apply under the control plane's field manager (applying twice changes
nothing). ``autoApply`` is false by default: the control plane adopts the generated DGD and
applies it itself, so the graph has one owner and its revisions, diffs and rollbacks; with
``auto_apply`` the operator creates the DGD and the adopted graph follows it. Only v1beta1 is
written; a status is kept whole, unknown fields included."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from clusters.kubernetes import APPLY_PATCH, FIELD_MANAGER, KubeFailure, UnusableSettings, connect
from clusters.models import Cluster
from clusters.resources import custom_path
from graphs import services as graph_services

from . import dgdr
from .models import DeploymentRequest, Estimate
from .services import SizingConflict, SizingRefused

if TYPE_CHECKING:
    from accounts.roles import Actor

PLURAL = "dynamographdeploymentrequests"
GENERATED = "nvidia.com/generated-dgd-spec"  # where the operator keeps the DGD it generated


def _path(req: DeploymentRequest) -> str:
    return custom_path(dgdr.API_VERSION, PLURAL, req.namespace, req.name)


def dgdr_apply(*, estimate: Estimate, cluster: Cluster, namespace: str, name: str, dynamo_version: str | None = None,
               auto_apply: bool = False, user: Actor = None, via: str = "ui") -> DeploymentRequest:
    """Render, check against the DGDR CRD, apply. Raises SizingRefused (bad input, a namespace the
    cluster does not allow, the API server's refusal in its words); records nothing then."""
    if not cluster.allows(namespace):
        raise SizingConflict(f"namespace: {cluster.name} allows graphs in {', '.join(cluster.namespaces) or 'none'}, "
                            f"not {namespace!r}")
    obj = dgdr.render(estimate.estimate_inputs, name=name, namespace=namespace, dynamo_version=dynamo_version,
                      auto_apply=auto_apply)
    errors = dgdr.schema_errors(obj)
    if errors:
        raise SizingRefused("the DGDR does not match its CRD: " + "; ".join(errors))
    query = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict"), ("force", "true")]
    try:
        with connect(cluster) as kube:
            kube.call("PATCH", custom_path(dgdr.API_VERSION, PLURAL, namespace, name), query=query, body=obj,
                      content_type=APPLY_PATCH, what=f"apply DynamoGraphDeploymentRequest {namespace}/{name} on "
                                                     f"cluster {cluster.name}")
    except UnusableSettings as exc:  # the cluster's registration must be fixed first: the state, 409
        raise SizingConflict(str(exc)) from None
    except KubeFailure as exc:
        raise SizingRefused(str(exc)) from None
    try:
        with transaction.atomic():
            req, _ = DeploymentRequest.objects.update_or_create(
                cluster=cluster, namespace=namespace, name=name,
                defaults={"estimate": estimate, "manifest": obj, "requested_by": user if user and user.pk else None})
    except IntegrityError:  # a concurrent apply of the same name recorded it first
        req = DeploymentRequest.objects.get(cluster=cluster, namespace=namespace, name=name)
    audit_record(actor=user, via=via, action="sizing.dgdr.apply", target_type="cluster", target=cluster.name,
                 after={"dgdr": f"{namespace}/{name}", "estimate": estimate.pk, "spec": obj["spec"]})
    return dgdr_refresh(req)


def _message(status: dict[str, Any]) -> str:
    """The operator's latest word: a failed condition's message first, else the newest condition's."""
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Succeeded"]
    failed = [c for c in conditions if c.get("status") == "False" and status.get("phase") == "Failed"]
    chosen = (failed or sorted(conditions, key=lambda c: c.get("lastTransitionTime") or ""))[-1:] or [{}]
    return str(chosen[0].get("message", ""))


def dgdr_refresh(req: DeploymentRequest) -> DeploymentRequest:
    """Read the DGDR's status from its cluster and keep it (the whole status, unknown fields too)."""
    try:
        with connect(req.cluster) as kube:
            live = kube.get(_path(req), what=f"read DynamoGraphDeploymentRequest {req.namespace}/{req.name}")
    except UnusableSettings as exc:  # the cluster's registration must be fixed first: the state, 409
        raise SizingConflict(str(exc)) from None
    except KubeFailure as exc:
        raise SizingRefused(str(exc)) from None
    if live is None:
        req.phase, req.message, req.last_status = "", "the DGDR is no longer on the cluster", {}
    else:
        status = live.get("status") or {}
        req.phase, req.message, req.last_status = status.get("phase", ""), _message(status), status
        req.last_status = {**status, "generatedDgd": (live.get("metadata", {}).get("annotations") or {}).get(GENERATED)}
    req.read_at = timezone.now()
    DeploymentRequest.objects.filter(pk=req.pk).update(phase=req.phase, message=req.message,
                                                       last_status=req.last_status, read_at=req.read_at)
    return req


def dgdr_adopt(*, req: DeploymentRequest, graph_name: str, user: Actor = None, via: str = "ui"):
    """The DGD the profiler chose, as a revision of graph ``graph_name`` (created when new),
    through the lossless importer. Refused until the operator has generated it."""
    req = dgdr_refresh(req)
    text = req.last_status.get("generatedDgd")
    selected = (req.last_status.get("profilingResults") or {}).get("selectedConfig")
    obj = yaml.safe_load(text) if text else selected
    if not isinstance(obj, dict):
        raise SizingConflict(f"DGDR {req.namespace}/{req.name} is {req.phase or 'not read'}: the operator has not "
                            f"generated a DGD yet{': ' + req.message if req.message else ''}")
    obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "name": graph_name}}
    graph, revision, report = graph_services.graph_import(
        obj=obj, user=user, text=yaml.safe_dump(obj, sort_keys=False), via=via,
        message=f"adopted from DGDR {req.namespace}/{req.name} on {req.cluster.name} (estimate #{req.estimate_id})")
    DeploymentRequest.objects.filter(pk=req.pk).update(graph=graph)
    return graph, revision, report
