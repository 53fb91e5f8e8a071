"""Version conversion hooks (the real cluster calls the Dynamo operator's conversion webhook).

Objects are stored in the version they were last written in and converted when read, listed or
watched through the other version. The DGD conversion maps v1alpha1 ``spec.services`` (map) to
v1beta1 ``spec.components`` (list) and back, including ``componentType: worker`` +
``subComponentType`` <-> ``type: prefill|decode``, ``extraPodSpec.mainContainer`` <-> the ``main``
container of ``podTemplate``, ``resources.limits.gpu`` <-> ``nvidia.com/gpu`` limits,
``scalingAdapter.enabled`` <-> presence, ``sharedMemory`` <-> ``sharedMemorySize``,
``envs``/``envFromSecret`` -> container ``env``/``envFrom`` and ``status.services`` <->
``status.components``. Alpha-only fields with no beta equivalent (``dynamoNamespace``,
``autoscaling``, ``ingress``, ``volumeMounts``, ``pvcs``...) are kept in an annotation and restored
on the way back, as the operator does; the round trip is close to, not exactly, the real webhook's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .patches import clone

Converter = Callable[[dict[str, Any], str], dict[str, Any]]
STASH = "emulator.k8s.io/v1alpha1-fields"
BETA_TYPES = ("frontend", "worker", "prefill", "decode", "planner", "epp")
_COPIED = ("replicas", "minAvailable", "modelRef", "multinode", "globalDynamoNamespace", "runtimeVersionOverride",
           "topologyConstraint", "providerOverride", "eppConfig", "frontendSidecar")
_EXPERIMENTAL = ("checkpoint", "gpuMemoryService", "failover")
_ALPHA_ONLY = ("dynamoNamespace", "autoscaling", "ingress", "volumeMounts", "serviceName", "annotations",
               "labels")
_GRAPH_SAME = ("annotations", "backendFramework", "experimental", "labels", "priorityClassName",
               "providerOverride", "restart", "topologyConstraint")


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
    group, current = _group_version(obj)
    if current == version:
        return obj
    out = clone(obj)
    out["apiVersion"] = f"{group}/{version}"
    spec = out.get("spec") or {}
    status = out.get("status") or {}
    if version == "v1beta1":
        out["spec"] = _spec_to_beta(spec, out.setdefault("metadata", {}))
        if "services" in status:
            status["components"] = {k: _status_to_beta(v) for k, v in (status.pop("services") or {}).items()}
    else:
        out["spec"] = _spec_to_alpha(spec, out.setdefault("metadata", {}))
        if "components" in status:
            status["services"] = {k: _status_to_alpha(v) for k, v in (status.pop("components") or {}).items()}
    return out


def _status_to_beta(entry: dict[str, Any]) -> dict[str, Any]:
    """v1alpha1 has a required ``componentName``; v1beta1 only ``componentNames``."""
    out = {k: v for k, v in entry.items() if k != "componentName"}
    if entry.get("componentName") and not out.get("componentNames"):
        out["componentNames"] = [entry["componentName"]]
    return out


def _status_to_alpha(entry: dict[str, Any]) -> dict[str, Any]:
    return {"componentName": (entry.get("componentNames") or [""])[0], **entry}


def _spec_to_beta(spec: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    beta = {k: spec[k] for k in _GRAPH_SAME if k in spec}
    if "envs" in spec:
        beta["env"] = spec["envs"]
    stash: dict[str, Any] = {"graph": {k: spec[k] for k in ("pvcs",) if k in spec}, "services": {}}
    components = []
    for name, svc in (spec.get("services") or {}).items():
        components.append(_service_to_component(name, svc or {}))
        kept = {k: svc[k] for k in _ALPHA_ONLY if k in (svc or {})}
        if kept:
            stash["services"][name] = kept
    if "services" in spec:
        beta["components"] = components
    if stash["graph"] or stash["services"]:
        meta.setdefault("annotations", {})[STASH] = json.dumps(stash, sort_keys=True)
    return beta


def _service_to_component(name: str, svc: dict[str, Any]) -> dict[str, Any]:
    comp: dict[str, Any] = {"name": name}
    ctype, sub = svc.get("componentType"), svc.get("subComponentType")
    if ctype == "worker" and sub in ("prefill", "decode"):
        comp["type"] = sub
    elif ctype in BETA_TYPES:
        comp["type"] = ctype
    comp.update({k: svc[k] for k in _COPIED if k in svc})
    if (svc.get("scalingAdapter") or {}).get("enabled"):
        comp["scalingAdapter"] = {}
    shm = svc.get("sharedMemory") or {}
    if shm.get("disabled"):
        comp["sharedMemorySize"] = "0"
    elif shm.get("size") is not None:
        comp["sharedMemorySize"] = shm["size"]
    experimental = {k: svc[k] for k in _EXPERIMENTAL if k in svc}
    if experimental:
        comp["experimental"] = experimental
    pod_spec = dict(svc.get("extraPodSpec") or {})
    main = {k: v for k, v in (pod_spec.pop("mainContainer", None) or {}).items() if k != "name"}
    main = {"name": "main", **main}
    for side in ("limits", "requests"):
        wanted = (svc.get("resources") or {}).get(side) or {}
        res = {}
        if wanted.get("gpu") is not None:
            res[wanted.get("gpuType") or "nvidia.com/gpu"] = wanted["gpu"]
        res.update({k: wanted[k] for k in ("cpu", "memory") if k in wanted})
        res.update(wanted.get("custom") or {})
        if res:
            main.setdefault("resources", {}).setdefault(side, {}).update(res)
    if svc.get("envs"):
        main["env"] = [*main.get("env", []), *svc["envs"]]
    if svc.get("envFromSecret"):
        main["envFrom"] = [*main.get("envFrom", []), {"secretRef": {"name": svc["envFromSecret"]}}]
    for probe in ("livenessProbe", "readinessProbe"):
        if probe in svc:
            main[probe] = svc[probe]
    others = [c for c in pod_spec.get("containers", []) if c.get("name") != "main"]
    pod_spec["containers"] = [main, *others]
    template: dict[str, Any] = {"spec": pod_spec}
    pod_meta = svc.get("extraPodMetadata") or {}
    if pod_meta:
        template["metadata"] = {k: pod_meta[k] for k in ("labels", "annotations") if k in pod_meta}
    comp["podTemplate"] = template
    return comp


def _spec_to_alpha(spec: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    alpha = {k: spec[k] for k in _GRAPH_SAME if k in spec}
    if "env" in spec:
        alpha["envs"] = spec["env"]
    annotations = meta.get("annotations") or {}
    stash = json.loads(annotations.pop(STASH, "{}") or "{}")
    if not annotations and "annotations" in meta:
        del meta["annotations"]
    alpha.update(stash.get("graph") or {})
    if "components" in spec:
        alpha["services"] = {}
        for comp in spec["components"] or []:
            svc = _component_to_service(comp)
            svc.update((stash.get("services") or {}).get(comp.get("name"), {}))
            alpha["services"][comp.get("name", "")] = svc
    return alpha


def _component_to_service(comp: dict[str, Any]) -> dict[str, Any]:
    svc: dict[str, Any] = {}
    ctype = comp.get("type")
    if ctype in ("prefill", "decode"):
        svc["componentType"], svc["subComponentType"] = "worker", ctype
    elif ctype:
        svc["componentType"] = ctype
    svc.update({k: comp[k] for k in _COPIED if k in comp})
    if "scalingAdapter" in comp:
        svc["scalingAdapter"] = {"enabled": True}
    if "sharedMemorySize" in comp:
        size = comp["sharedMemorySize"]
        svc["sharedMemory"] = {"disabled": True} if str(size) == "0" else {"size": size}
    svc.update((comp.get("experimental") or {}).items())
    template = comp.get("podTemplate") or {}
    pod_spec = dict(template.get("spec") or {})
    containers = list(pod_spec.pop("containers", []) or [])
    main = next((c for c in containers if c.get("name") == "main"), containers[0] if containers else None)
    if main is not None:
        containers.remove(main)
        main = {k: v for k, v in main.items() if k != "name"}
        limits = (main.get("resources") or {}).get("limits") or {}
        if "nvidia.com/gpu" in limits:
            main = clone(main)
            svc["resources"] = {"limits": {"gpu": str(main["resources"]["limits"].pop("nvidia.com/gpu"))}}
        pod_spec["mainContainer"] = main
    if containers:
        pod_spec["containers"] = containers
    if pod_spec:
        svc["extraPodSpec"] = pod_spec
    if template.get("metadata"):
        svc["extraPodMetadata"] = template["metadata"]
    return svc


BUILTIN_CONVERTERS: dict[tuple[str, str], Converter] = {
    ("nvidia.com", "dynamographdeployments"): convert_dgd,
    ("nvidia.com", "dynamographdeploymentscalingadapters"): convert_dgdsa,
}
