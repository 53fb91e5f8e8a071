"""Moving a graph between DGD API versions without losing a field.

A spec imported from one version keeps the fields only that version knows in
``extra_v1alpha1`` / ``extra_v1beta1``. Rendering it in the other version must carry each of
them to the place the other version has for it, and where it has none, say so: a conversion
that would drop a field is refused with the field named (``conversion_losses``), never done
silently. Pure: no Django."""

from __future__ import annotations

import copy
from typing import Any

from core.spec import GraphSpec, Service

V1ALPHA1 = "nvidia.com/v1alpha1"
V1BETA1 = "nvidia.com/v1beta1"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# v1alpha1 component fields that the operator ignores (checks.py says so on import): dropping
# them changes nothing the cluster does.
ALPHA_IGNORED = {"dynamoNamespace", "autoscaling"}
# v1alpha1 component fields whose v1beta1 place is the main container, spelled the same.
ALPHA_TO_CONTAINER = ("livenessProbe", "readinessProbe")


def alpha_resources_as_container(resources: dict[str, Any]) -> dict[str, Any]:
    """v1alpha1 ``resources`` ({requests, limits}: cpu, memory, gpu, gpuType, custom; claims)
    as a Kubernetes container's resources, which is what the operator makes of them."""
    out: dict[str, Any] = {}
    for side in ("requests", "limits"):
        given = resources.get(side)
        if not isinstance(given, dict):
            continue
        part: dict[str, Any] = {}
        gpu_key = given.get("gpuType") or DEFAULT_GPU_RESOURCE
        for key, value in given.items():
            if key in ("cpu", "memory"):
                part[key] = value
            elif key == "gpu":
                part[gpu_key] = value
            elif key == "custom" and isinstance(value, dict):
                part.update(value)
        if part:
            out[side] = part
    if resources.get("claims"):
        out["claims"] = copy.deepcopy(resources["claims"])
    return out


def merge_resources(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` added to container resources ``into``; what ``into`` already says wins."""
    out = copy.deepcopy(into)
    for side, values in extra.items():
        if isinstance(values, dict):
            out[side] = {**values, **(out.get(side) or {})}
        elif side not in out:
            out[side] = values
    return out


def _alpha_resources_carried(resources: Any) -> bool:
    if not isinstance(resources, dict):
        return False
    known = {"requests", "limits", "claims"}
    parts = {"cpu", "memory", "gpu", "gpuType", "custom"}
    return set(resources) <= known and all(
        isinstance(resources.get(side, {}), dict) and set(resources.get(side, {})) <= parts
        for side in ("requests", "limits"))


def carried_to_beta(service: Service) -> dict[str, Any]:
    """The v1alpha1-only fields of ``service`` that v1beta1 has a place for, as main-container
    fields: {"resources": ..., "livenessProbe": ..., ...}."""
    alpha = service.extra_v1alpha1
    out: dict[str, Any] = {}
    if _alpha_resources_carried(alpha.get("resources")):
        res = alpha_resources_as_container(alpha["resources"])
        if res:
            out["resources"] = res
    for key in ALPHA_TO_CONTAINER:
        if key in alpha:
            out[key] = copy.deepcopy(alpha[key])
    return out


def conversion_losses(spec: GraphSpec, api_version: str) -> list[tuple[str, str]]:
    """(path in the source manifest, why) for every field that rendering ``spec`` in
    ``api_version`` would drop. Empty when nothing is lost (the usual case)."""
    losses: list[tuple[str, str]] = []
    if api_version == V1BETA1:
        for key in spec.extra_v1alpha1:
            losses.append((f"spec.{key}", f"nvidia.com/v1beta1 has no spec.{key}"))
        for s in spec.services:
            carried = set(carried_to_beta(s))
            for key in s.extra_v1alpha1:
                if key in ALPHA_IGNORED or key in carried:
                    continue
                if key == "resources" and "resources" not in carried:
                    why = "its keys have no place in a container's resources"
                else:
                    why = f"nvidia.com/v1beta1 components have no {key}"
                losses.append((f"spec.services.{s.name}.{key}", why))
    else:
        for key in spec.extra_v1beta1:
            losses.append((f"spec.{key}", f"nvidia.com/v1alpha1 has no spec.{key}"))
        for i, s in enumerate(spec.services):
            for key in s.extra_v1beta1:
                losses.append((f"spec.components[{i}].{key}", f"nvidia.com/v1alpha1 services have no {key}"))
    return losses


def losses_message(spec: GraphSpec, api_version: str, losses: list[tuple[str, str]]) -> str:
    listed = "; ".join(f"{path} ({why})" for path, why in losses)
    other = V1ALPHA1 if api_version == V1BETA1 else V1BETA1
    return (f"{spec.name} cannot be converted to {api_version} without losing {len(losses)} field"
            f"{'s' if len(losses) != 1 else ''}: {listed}. Keep it in {other}, or remove those fields first.")
