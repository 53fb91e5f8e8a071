"""Version conversion hooks (the real cluster calls the Dynamo operator's conversion webhook).

Objects are stored in the version they were last written in and converted when read, listed or
watched through the other version. The DGD spec converts as the operator's webhook does
(deploy/operator/api/v1alpha1/*_conversion.go at upstream commit 2a6da14c), through the
product's own port of it (core/dgd/convert.py, tested on upstream's manifests in
tests/core/test_conversion_upstream.py): one implementation of the operator's rules, not two that
can drift apart. Status converts here (dynamographdeployment_conversion.go:650-851).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .patches import clone

Converter = Callable[[dict[str, Any], str], dict[str, Any]]


def relabel(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """The default hook (conversion strategy None): only ``apiVersion`` changes."""
    out = dict(obj)
    out["apiVersion"] = f"{obj['apiVersion'].split('/')[0]}/{version}"
    return out


def _group_version(obj: dict[str, Any]) -> tuple[str, str]:
    group, _, version = obj["apiVersion"].rpartition("/")
    return group, version


def convert_dgdsa(obj: dict[str, Any], version: str) -> dict[str, Any]:
    group, current = _group_version(obj)
    if current == version:
        return obj
    out = clone(obj)
    out["apiVersion"] = f"{group}/{version}"
    ref = (out.get("spec") or {}).get("dgdRef")
    if isinstance(ref, dict):
        old, new = ("serviceName", "componentName") if version == "v1beta1" else ("componentName", "serviceName")
        if old in ref:
            ref[new] = ref.pop(old)
    return out


def convert_dgd(obj: dict[str, Any], version: str) -> dict[str, Any]:
    from core.dgd.parse import import_manifest
    from core.dgd.render import render

    group, current = _group_version(obj)
    if current == version:
        return obj
    source = clone(obj)
    status = source.pop("status", None)
    out = render(import_manifest(source), f"{group}/{version}")
    if isinstance(status, dict):
        out["status"] = _status(status, to_beta=version == "v1beta1")
    return out


def _status(status: dict[str, Any], *, to_beta: bool) -> dict[str, Any]:
    out = clone(status)
    old, new = ("services", "components") if to_beta else ("components", "services")
    if old in out:
        entry = _status_to_beta if to_beta else _status_to_alpha
        out[new] = {k: entry(v) for k, v in (out.pop(old) or {}).items()}
    rolling = out.get("rollingUpdate")
    if isinstance(rolling, dict):  # DGDC:784-804: updatedServices <-> updatedComponents
        old, new = ("updatedServices", "updatedComponents") if to_beta else ("updatedComponents", "updatedServices")
        if old in rolling:
            rolling[new] = rolling.pop(old)
    return out


def _status_to_beta(entry: dict[str, Any]) -> dict[str, Any]:
    """DGDC:806-825 + 356-364: v1alpha1's componentName becomes componentNames when that is empty."""
    out = {k: v for k, v in entry.items() if k != "componentName"}
    if entry.get("componentName") and not out.get("componentNames"):
        out["componentNames"] = [entry["componentName"]]
    return out


def _status_to_alpha(entry: dict[str, Any]) -> dict[str, Any]:
    """DGDC:827-851: componentName is the last of componentNames."""
    names = entry.get("componentNames") or []
    return {**entry, "componentName": names[-1] if names else ""}


BUILTIN_CONVERTERS: dict[tuple[str, str], Converter] = {
    ("nvidia.com", "dynamographdeployments"): convert_dgd,
    ("nvidia.com", "dynamographdeploymentscalingadapters"): convert_dgdsa,
}
