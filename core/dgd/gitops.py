"""Which GitOps tool, if any, applies a live DynamoGraphDeployment: read from the marks Argo CD
and Flux leave on the objects they apply. Pure: an object in, a verdict out.

* Argo CD tracks what it applied by the annotation ``argocd.argoproj.io/tracking-id``
  (``<app>:<group>/<kind>:<namespace>/<name>``; annotation tracking, the default since 3.0) or,
  with label tracking, by ``app.kubernetes.io/instance`` (Helm sets that label too: with
  ``app.kubernetes.io/managed-by: Helm`` it is Helm's, not Argo CD's).
* Flux's kustomize-controller labels every object with ``kustomize.toolkit.fluxcd.io/name`` and
  ``kustomize.toolkit.fluxcd.io/namespace`` (its Kustomization)."""

from __future__ import annotations

from typing import Any

ARGOCD_TRACKING = "argocd.argoproj.io/tracking-id"
INSTANCE_LABEL = "app.kubernetes.io/instance"
FLUX_PREFIX = "kustomize.toolkit.fluxcd.io/"
ARGOCD, FLUX = "Argo CD", "Flux"


def gitops_owner(obj: dict[str, Any] | None) -> dict[str, str] | None:
    """{"tool", "application", "namespace", "evidence"} for an object a GitOps tool applies, else None."""
    meta = (obj or {}).get("metadata") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    tracking = annotations.get(ARGOCD_TRACKING)
    if isinstance(tracking, str) and tracking:
        app = tracking.split(":", 1)[0]
        return {"tool": ARGOCD, "application": app, "namespace": "",
                "evidence": f"annotation {ARGOCD_TRACKING}={tracking}"}
    flux = {k: v for k, v in labels.items() if isinstance(k, str) and k.startswith(FLUX_PREFIX)}
    if flux:
        name = str(flux.get(FLUX_PREFIX + "name", ""))
        return {"tool": FLUX, "application": name, "namespace": str(flux.get(FLUX_PREFIX + "namespace", "")),
                "evidence": "labels " + ", ".join(f"{k}={v}" for k, v in sorted(flux.items()))}
    instance = labels.get(INSTANCE_LABEL)
    if isinstance(instance, str) and instance and labels.get("app.kubernetes.io/managed-by") != "Helm":
        return {"tool": ARGOCD, "application": instance, "namespace": "",
                "evidence": f"label {INSTANCE_LABEL}={instance} (Argo CD label tracking)"}
    return None
