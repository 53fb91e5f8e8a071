"""What the Kubernetes API server and the Dynamo operator's admission webhooks answer to a DGD create
or update, before anything is sent: the CRD's CEL rules (core.cel, on the object in the version it
was sent in), the operator's defaulting webhook, and its validating webhook's rules, as the operator
runs them (``deploy/operator/internal/webhook/validation/dynamographdeployment_handler.go`` at
ai-dynamo/dynamo commit 2a6da14c, lines 60-139):

* create: ``Validate`` with the runtime-version rules at the paths of the version sent;
* update: ``Validate`` without the runtime-version rules; only if it passes, ``ValidateUpdate``
  (the update rules, and the runtime-version ratchet at the paths of the version sent). An object
  being deleted is not validated.

The webhook sees v1beta1 (the API server converts first); a v1alpha1 object is converted with the
product's conversion (or ``to_beta``), and its v1alpha1-only fields are checked on the object sent.
The errors print as the API server prints them (``str(error)``: ``<path>: <type>: <detail>``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.cel import RuleError, rule_errors
from core.schema import openapi_schema

from . import alpha as _alpha
from . import create as _create
from . import update as _update
from .errors import FieldError, obj
from .provider import default_target

OPERATOR_PRINCIPAL = "system:serviceaccount:dynamo-system:dynamo-platform-dynamo-operator-controller-manager"
V1ALPHA1, V1BETA1 = "nvidia.com/v1alpha1", "nvidia.com/v1beta1"


@dataclass(frozen=True)
class Cluster:
    """What the webhook learns from the operator's configuration and the cluster. The defaults judge a
    manifest without a cluster: Grove and checkpoints on (upstream's defaults in its envtests), and the
    look-ups that need the cluster (InferencePool API, ClusterTopologyBinding) skipped."""

    grove: bool = True
    checkpoint: bool = True
    inference_pool: bool | None = None
    topologies: dict[str, list[str]] | None = None  # ClusterTopologyBinding name -> its level domains
    operator_principal: str = OPERATOR_PRINCIPAL


def product_to_beta(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The v1beta1 view of a v1alpha1 manifest, by the product's conversion (None: it cannot)."""
    from core.dgd.parse import import_manifest
    from core.dgd.render import render
    from core.errors import ManifestError

    try:
        beta = render(import_manifest(manifest), V1BETA1)
    except (ManifestError, KeyError, TypeError, ValueError):
        return None
    beta["metadata"] = copy.deepcopy(obj(manifest.get("metadata")))
    return beta


def default(dgd: dict[str, Any], *, create: bool, cluster: Cluster) -> dict[str, Any]:
    """The operator's defaulting webhook on a v1beta1 object (webhook/defaulting/
    dynamographdeployment_handler.go@2a6da14c:65-176): replicas 1, the workload provider chosen on
    create, ``minAvailable`` 1 on a Grove-selected DGD, provider-override targets. A copy."""
    dgd = copy.deepcopy(dgd)
    meta = dgd.setdefault("metadata", {})
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    provider, selected = annotations.get("nvidia.com/workload-provider"), True
    if provider is None and create:
        grove = cluster.grove and str(annotations.get("nvidia.com/enable-grove", "")).lower() != "false"
        provider = "grove" if grove else "component"
        meta["annotations"] = {**annotations, "nvidia.com/workload-provider": provider}
    elif provider is None:
        selected, provider = False, ""
    spec = obj(dgd.get("spec"))
    default_target(spec.get("providerOverride"), provider, "root", None)
    for comp in spec.get("components") or []:
        if not isinstance(comp, dict):
            continue
        comp.setdefault("replicas", 1)
        if selected and provider == "grove":
            comp.setdefault("minAvailable", 1)
        default_target(comp.get("providerOverride"), provider, "component", comp)
        for role in ("leader", "worker"):
            default_target(obj(obj(comp.get("multinode")).get(role)).get("providerOverride"), provider,
                           f"multinode.{role}", comp)
    return dgd


def admission_errors(new: dict[str, Any], old: dict[str, Any] | None = None, *, username: str = "",
                     source: str = V1BETA1, new_alpha: dict[str, Any] | None = None,
                     old_alpha: dict[str, Any] | None = None, cluster: Cluster = Cluster()) -> list[FieldError]:
    """The validating webhook's errors for ``new`` (v1beta1, defaults applied), created or updating
    ``old``; ``source`` is the API version the request was sent in, ``*_alpha`` its v1alpha1 views."""
    alpha_source = source == V1ALPHA1
    if old is None:  # ValidateCreate -> Validate(obj, source)
        found = _create.validate(new, cluster, runtime_versions=not alpha_source)
        if new_alpha is not None:
            found += _alpha.validate(new_alpha, runtime_versions=alpha_source)
        return found
    if obj(new.get("metadata")).get("deletionTimestamp"):
        return []
    found = _create.validate(new, cluster, runtime_versions=False)  # Validate(newObj, disabled)
    if new_alpha is not None:
        found += _alpha.validate(new_alpha, runtime_versions=False)
    if found:
        return found
    found = _update.validate_update(new, old, username=username, operator_principal=cluster.operator_principal,
                                    runtime_versions=not alpha_source)
    if alpha_source and new_alpha is not None and old_alpha is not None:
        found += [_mark(f) for f in _alpha.validate_update(new_alpha, old_alpha)]
    return found


def _mark(error: FieldError) -> FieldError:
    import dataclasses

    return dataclasses.replace(error, update=True)


def crd_rule_errors(manifest: dict[str, Any], old: dict[str, Any] | None = None) -> list[RuleError]:
    """The CRD's CEL rules on ``manifest`` in its own API version (transition rules when ``old``)."""
    schema = openapi_schema(str(manifest.get("apiVersion")))
    if schema is None:
        return []
    body = {k: v for k, v in manifest.items() if k != "metadata"}
    before = None if old is None else {k: v for k, v in old.items() if k != "metadata"}
    return rule_errors(schema, body) if before is None else rule_errors(schema, body, before)


def _views(manifest: dict[str, Any], to_beta: Callable | None) -> tuple[dict | None, dict | None]:
    if manifest.get("apiVersion") == V1ALPHA1:
        return (to_beta or product_to_beta)(manifest), manifest
    return manifest, None


def create_errors(manifest: dict[str, Any], *, cluster: Cluster = Cluster(),
                  to_beta: Callable | None = None) -> list[FieldError | RuleError]:
    """What the API server answers to a create of ``manifest`` (either API version): the CRD's CEL
    rules' errors, or, when they pass, the validating webhook's."""
    beta, alpha = _views(manifest, to_beta)
    found: list[FieldError | RuleError] = list(crd_rule_errors(_defaulted_source(manifest, cluster, create=True)))
    if beta is not None and not found:  # the API server calls the webhooks only on a valid object
        found += admission_errors(default(beta, create=True, cluster=cluster), source=manifest.get("apiVersion"),
                                  new_alpha=alpha, cluster=cluster)
    return found


def update_errors(old: dict[str, Any], new: dict[str, Any], username: str = "", *, cluster: Cluster = Cluster(),
                  to_beta: Callable | None = None) -> list[FieldError | RuleError]:
    """Everything the API server refuses in an update of ``old`` (as stored, same API version) to
    ``new``; ``error.update`` (or ``RuleError.transition``) marks what only an update refuses."""
    beta, alpha = _views(new, to_beta)
    old_beta, old_alpha = _views(old, to_beta)
    found: list[FieldError | RuleError] = list(crd_rule_errors(_defaulted_source(new, cluster, create=False), old))
    if beta is not None and old_beta is not None and not found:
        found += admission_errors(default(beta, create=False, cluster=cluster), old_beta, username=username,
                                  source=new.get("apiVersion"), new_alpha=alpha, old_alpha=old_alpha, cluster=cluster)
    return found


def _defaulted_source(manifest: dict[str, Any], cluster: Cluster, *, create: bool) -> dict[str, Any]:
    """The object as the CEL rules see it: after the defaulting webhook (replicas, minAvailable)."""
    if manifest.get("apiVersion") != V1ALPHA1:
        return default(manifest, create=create, cluster=cluster)
    out = copy.deepcopy(manifest)
    annotations = obj(obj(out.get("metadata")).get("annotations"))
    grove = cluster.grove and str(annotations.get("nvidia.com/enable-grove", "")).lower() != "false"
    provider = annotations.get("nvidia.com/workload-provider", "grove" if grove and create else "")
    for service in obj(obj(out.get("spec")).get("services")).values():
        if isinstance(service, dict):
            service.setdefault("replicas", 1)
            if provider == "grove":
                service.setdefault("minAvailable", 1)
    return out


__all__ = [
    "Cluster",
    "FieldError",
    "RuleError",
    "admission_errors",
    "crd_rule_errors",
    "create_errors",
    "default",
    "update_errors",
]
