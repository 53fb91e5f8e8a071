"""The shape of a v1beta1 podTemplate that v1alpha1 cannot hold, kept in the ``nvidia.com/dgd-spec``
payload as the operator keeps it (sparseSharedHubOnlyPodTemplate and its inverse
restoreSharedPodTemplateHubOnlyFields).

v1alpha1 has no container list order (mainContainer is apart, sidecars follow), no way to say
"no main container" (the way back always builds one from the dedicated fields) and no empty
podTemplate. The payload records only those facts: the container names in their order when the
way back would order them differently, an entry-less podTemplate when the v1beta1 object had no
``main`` container or an empty podTemplate. ``restore_hub_only`` puts the payload's v1beta1-only
fields back on a component converted from v1alpha1. Citations: github.com/ai-dynamo/dynamo at commit
2a6da14c, deploy/operator/api/v1alpha1/shared_spec_conversion.go (SSC). Pure: no Django."""

from __future__ import annotations

import copy
from typing import Any

MAIN = "main"
SIDECAR = "sidecar-frontend"
# SSC:1449-1460 hasPodTemplateContent: the v1alpha1 fields from which the way back builds a podTemplate.
CONTENT = ("resources", "envFromSecret", "livenessProbe", "readinessProbe", "extraPodMetadata", "frontendSidecar")


def _names(template: dict[str, Any] | None) -> list[Any]:
    spec = (template or {}).get("spec") or {}
    return [c.get("name") for c in spec.get("containers") or [] if isinstance(c, dict)]


def projected_names(svc: dict[str, Any]) -> list[Any] | None:
    """The container names the way back builds from the v1alpha1 service ``svc``: main first,
    then extraPodSpec's own containers, then the frontend sidecar (buildSharedPodTemplateFromAlpha,
    SSC:1506-1535); None where it builds no podTemplate (SSC:1462-1464)."""
    pod = svc.get("extraPodSpec") if isinstance(svc.get("extraPodSpec"), dict) else {}
    mounts = [m for m in svc.get("volumeMounts") or [] if isinstance(m, dict) and not m.get("useAsCompilationCache")]
    content = (any(svc.get(k) is not None for k in CONTENT) or bool(svc.get("envs")) or bool(mounts)
               or any(v not in (None, [], {}) for v in pod.values()))
    if not content:
        return None
    sidecars = [c.get("name") for c in pod.get("containers") or [] if isinstance(c, dict) and c.get("name") != MAIN]
    return [MAIN, *sidecars, *([SIDECAR] if svc.get("frontendSidecar") is not None else [])]


def save_shape(template: dict[str, Any] | None, svc: dict[str, Any],
               frontend_sidecar: str | None) -> dict[str, Any] | None:
    """What of ``template`` (the v1beta1 podTemplate as written) the v1alpha1 service ``svc`` loses,
    as a podTemplate for the payload ({} is itself a marker), or None (SSC:642-671)."""
    if template is None:
        return None
    names = _names(template)
    projected = projected_names(svc)
    generated_main = projected is not None and MAIN not in names  # SSC:680-686
    # SSC:654: ObjectMeta's strings are omitempty, so metadata of empty values is none.
    meta = template.get("metadata") or {}
    empty = projected is None and not names and all(v in ("", {}, []) for v in meta.values())
    order = False
    if projected is not None:  # SSC:688-700
        order = names != [n for n in projected if n != MAIN or MAIN in names]
    kept = [{"name": n} for n in names if order or (frontend_sidecar is not None and n == frontend_sidecar)]
    if not (generated_main or empty or kept):
        return None
    return {"spec": {"containers": kept}} if kept else {}


def restore_shape(comp: dict[str, Any], saved: dict[str, Any]) -> None:
    """The saved shape back on the component ``comp`` built from v1alpha1 (SSC:1737-1761)."""
    template = comp.get("podTemplate")
    saved_names = _names(saved)
    spec = (template or {}).get("spec")
    if isinstance(spec, dict) and MAIN not in saved_names:
        # SSC:1864-1883: a main container with nothing but its name was made by the way back.
        containers = spec.get("containers") or []
        if {"name": MAIN} in containers:
            containers.remove({"name": MAIN})
        if not containers:
            spec.pop("containers", None)
    if isinstance(spec, dict) and len(saved_names) >= 2 and sorted(map(str, _names(template))) == sorted(
            map(str, saved_names)):
        # SSC:1836-1862: the containers in the order the v1beta1 object wrote them.
        by_name = {c.get("name"): c for c in spec["containers"]}
        spec["containers"] = [by_name[n] for n in saved_names]
    if isinstance(spec, dict) and not spec:
        template.pop("spec")
    if template is None:
        if not saved:
            comp["podTemplate"] = {}  # SSC:1755-1757: the empty podTemplate the object had
    elif not template and saved:
        comp.pop("podTemplate")  # nilIfEmptyPodTemplate (SSC:1760)


def main_container(pod_spec: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in pod_spec.get("containers") or [] if isinstance(c, dict) and c.get("name") == MAIN), None)


def restore_hub_only(comp: dict[str, Any], saved: dict[str, Any]) -> None:
    """Back from v1alpha1: the v1beta1-only fields the payload kept (SSC:1690-1761)."""
    pod = (comp.get("podTemplate") or {}).get("spec") or {}
    names = [c.get("name") for c in pod.get("containers") or [] if isinstance(c, dict)]
    template = saved.get("podTemplate") if isinstance(saved.get("podTemplate"), dict) else None
    if "frontendSidecar" in saved and "frontendSidecar" not in comp and (
            saved["frontendSidecar"] in names or saved["frontendSidecar"] not in _names(template)):
        # SSC:1711-1720: the reference comes back unless the container it named was deleted since.
        comp["frontendSidecar"] = saved["frontendSidecar"]
    experimental = saved.get("experimental")
    if isinstance(experimental, dict):
        if "experimental" not in comp:
            comp["experimental"] = copy.deepcopy(experimental)  # SSC:1700-1701
        elif "grove" in experimental:
            comp["experimental"].setdefault("grove", copy.deepcopy(experimental["grove"]))  # SSC:1702-1707
    template = template or {}
    meta = template.get("metadata")
    if isinstance(meta, dict) and meta:
        target = comp.setdefault("podTemplate", {}).setdefault("metadata", {})
        for key, value in meta.items():
            target.setdefault(key, copy.deepcopy(value))  # SSC:1938-1944
    saved_main = main_container(template.get("spec") or {})
    cache = comp.get("compilationCache")
    main = main_container(pod)
    if "podTemplate" in saved and isinstance(cache, dict) and main is not None:
        # SSC:1902-1916: a cache mount that v1alpha1 made and the v1beta1 object did not have (nor
        # its main container, when it had none).
        saved_main = saved_main or {}
        mount = {"name": cache.get("pvcName"), "mountPath": cache.get("mountPath", "")}
        if mount not in (saved_main.get("volumeMounts") or []) and mount in (main.get("volumeMounts") or []):
            main["volumeMounts"].remove(mount)
            if not main["volumeMounts"]:
                main.pop("volumeMounts")
    if "podTemplate" in saved:
        restore_shape(comp, template)

