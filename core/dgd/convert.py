"""Moving a graph between DGD API versions as the Dynamo operator's conversion webhook does.

The operator converts every field either to its place in the other version or, where that version
has none, into a private annotation (``nvidia.com/dgd-spec``) that the way back reads, so that a
round trip gives the object back (deploy/operator/api/CONVERSION.md, "Sparse Payloads", commit
2a6da14c). ``render`` builds a spec in its own version's shape; ``to_beta`` / ``to_alpha`` then
move the fields only the other version knows (``extra_v1alpha1`` / ``extra_v1beta1``) the same
way. Where the other version truly has no place (a value its schema rejects, a field the
operator does not know), ``conversion_losses`` names it and the export is refused. Pure: no
Django.

Citations are to github.com/ai-dynamo/dynamo at commit 2a6da14c, files under
deploy/operator/api/v1alpha1/: shared_spec_conversion.go (SSC), dynamographdeployment_conversion.go
(DGDC) and preservation.go."""

from __future__ import annotations

import copy
import json
from typing import Any

from core.dgd.convert_pod import main_container, restore_hub_only
from core.spec import QUANTITY, GraphSpec

V1ALPHA1 = "nvidia.com/v1alpha1"
V1BETA1 = "nvidia.com/v1beta1"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"  # SSC:68, the v1alpha1 default when gpuType is unset
# DGDC:49-53: one private annotation holds what the other version cannot represent; on a
# v1beta1 object it holds v1alpha1 fields, on a v1alpha1 object v1beta1 fields.
PAYLOAD = "nvidia.com/dgd-spec"
SIDECAR = "sidecar-frontend"  # SSC:61-64, the container a v1alpha1 frontendSidecar becomes
BETA_TYPES = ("frontend", "worker", "prefill", "decode", "planner", "epp")
# SSC:316-390 saveSharedAlphaOnlySpec: v1alpha1 component fields with no v1beta1 place, kept in
# the payload and restored by restoreSharedAlphaOnlySimpleFields (SSC:234-255).
ALPHA_SAVED = ("subComponentType", "dynamoNamespace", "autoscaling", "ingress", "annotations", "labels",
               "serviceName", "sharedMemory")
# SSC:371-386: a disabled feature is absence in v1beta1; the v1alpha1 object is kept.
ALPHA_DISABLED = ("scalingAdapter", "gpuMemoryService", "failover")
PROBES = ("livenessProbe", "readinessProbe")
# SSC:1150-1170: GPU memory service modes are spelled differently (v1alpha1 common.go:209-215,
# v1beta1 common.go:213-217); a value neither knows is carried as written.
GMS_MODE_TO_BETA = {"intraPod": "IntraPod", "interPod": "InterPod"}
GMS_MODE_TO_ALPHA = {v: k for k, v in GMS_MODE_TO_BETA.items()}


def with_gms_mode(feature: dict[str, Any], modes: dict[str, str]) -> dict[str, Any]:
    out = _deep(feature)
    if isinstance(out.get("mode"), str):
        out["mode"] = modes.get(out["mode"], out["mode"])
    return out


def _deep(value: Any) -> Any:
    return copy.deepcopy(value)


def read_payload(metadata: dict[str, Any], *, written_by: str) -> dict[str, Any]:
    """The payload's spec when the object was converted from ``written_by`` (a v1alpha1 payload
    lists ``services``, a v1beta1 one ``components``), removed from ``metadata`` as
    scrubDGDInternalAnnotations does (DGDC:541-548); {} otherwise. A payload of the object's own
    version stays: it is the user's annotation until the object changes version again."""
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict) or PAYLOAD not in annotations:
        return {}
    try:
        decoded = json.loads(annotations[PAYLOAD])
    except (TypeError, ValueError):
        return {}
    # A legacy payload is the bare spec (preservation.go:60-66).
    spec = decoded.get("spec", decoded) if isinstance(decoded, dict) else None
    keys = ("components",) if written_by == V1BETA1 else ("services", "pvcs")
    if not isinstance(spec, dict) or not any(k in spec for k in keys):
        return {}
    annotations.pop(PAYLOAD)
    if not annotations:
        metadata.pop("annotations")  # delAnnFromObj drops an emptied map (SSC:113-124)
    return spec


def write_payload(metadata: dict[str, Any], spec: dict[str, Any]) -> None:
    if spec:
        # preservation.go:39-48: {"version": 1, "spec": ...}, compact JSON as Go writes it.
        text = json.dumps({"version": 1, "spec": spec}, separators=(",", ":"), sort_keys=True)
        metadata.setdefault("annotations", {})[PAYLOAD] = text


def alpha_resources_as_container(resources: dict[str, Any]) -> dict[str, Any]:
    """v1alpha1 ``resources`` as a container's: cpu and memory by name, gpu under gpuType (else
    nvidia.com/gpu), custom keys as written, claims kept (resourcesToNative, SSC:2489-2545)."""
    out: dict[str, Any] = {}
    for side in ("requests", "limits"):
        given = resources.get(side)
        if not isinstance(given, dict):
            continue
        part: dict[str, Any] = {}
        for key, value in given.items():
            if key != "custom" and not _quantity(value):
                continue  # itemToResourceList skips "" and what ParseQuantity rejects (SSC:2517-2540)
            if key in ("cpu", "memory"):
                part[key] = value
            elif key == "gpu":
                part[given.get("gpuType") or DEFAULT_GPU_RESOURCE] = value
            elif key == "custom" and isinstance(value, dict):
                part.update({k: v for k, v in value.items() if _quantity(v)})
        if part:
            out[side] = part
    if resources.get("claims"):
        out["claims"] = _deep(resources["claims"])
    return out


def _quantity(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool) and bool(QUANTITY.match(str(value)))


def merge_under(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` under ``into``: what ``into`` says wins (mergeExtraPodSpecMainContainer merges
    mainContainer over the dedicated fields with override, SSC:1482-1504)."""
    out = _deep(into)
    for side, values in extra.items():
        if isinstance(values, dict) and isinstance(out.get(side, {}), dict):
            out[side] = {**values, **(out.get(side) or {})}
        elif side not in out:
            out[side] = _deep(values)
    return out


def merge_envs(common: list[Any], specific: list[Any]) -> list[Any]:
    """``specific`` over ``common`` by name, in order (mergeEnvs, SSC:2635-2657): how v1alpha1
    envs and extraPodSpec.mainContainer.env make one container env."""
    out: list[Any] = []
    seen: dict[Any, int] = {}
    for entry in [*common, *specific]:
        name = entry.get("name") if isinstance(entry, dict) else None
        if name in seen:
            out[seen[name]] = _deep(entry)
        else:
            seen[name] = len(out)
            out.append(_deep(entry))
    return out


def strip_resources(resources: dict[str, Any], projected: dict[str, Any]) -> dict[str, Any] | None:
    """``resources`` less ``projected``, or None when ``projected`` is no longer all there."""
    out = _deep(resources)
    for side, values in projected.items():
        have = out.get(side)
        if side == "claims":
            if have != values:
                return None
            out.pop(side)
            continue
        if not isinstance(have, dict) or any(have.get(k, object()) != v for k, v in values.items()):
            return None
        for key in values:
            have.pop(key)
        if not have:
            out.pop(side)
    return out


# ------------------------------------------------------------------ v1alpha1 -> v1beta1


def to_beta(spec: GraphSpec, obj: dict[str, Any], alpha: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """Move the v1alpha1-only fields of ``spec`` into ``obj`` (its v1beta1 rendering) as
    ConvertTo does (DGDC:71-193, SSC:138-223); ``alpha`` is each service as v1alpha1 writes it,
    whose split between dedicated fields and extraPodSpec.mainContainer the payload keeps.
    Returns what has no place."""
    losses: list[tuple[str, str]] = []
    body, metadata = obj["spec"], obj["metadata"]
    restored = read_payload(metadata, written_by=V1BETA1)
    save: dict[str, Any] = {}
    for key, value in spec.extra_v1alpha1.items():
        if key == "pvcs":
            save["pvcs"] = _deep(value)  # DGDC:134-136
        elif key == "topologyConstraint" and isinstance(value, dict):
            # DGDC:632-639: topologyProfile is v1beta1's clusterTopologyName.
            out = {k: _deep(v) for k, v in value.items() if k != "topologyProfile"}
            if "topologyProfile" in value:
                out["clusterTopologyName"] = value["topologyProfile"]
            body["topologyConstraint"] = out
        else:
            losses.append((f"spec.{key}", f"the operator does not convert spec.{key} to {V1BETA1}"))
    hub = {c.get("name"): c for c in restored.get("components") or [] if isinstance(c, dict)}
    services: dict[str, Any] = {}
    for service, comp in zip(spec.services, body["components"], strict=True):
        kept = _service_to_beta(service, comp, alpha.get(service.name) or {}, losses)
        if service.pod_template_keys is None and "frontendSidecar" not in comp and _only_generated(comp):
            # SSC:1449-1464: from v1alpha1 fields that hold nothing for the pod (a compilation-cache
            # mount does not count, SSC:2598-2605), no podTemplate.
            comp.pop("podTemplate")
        if kept:
            services[service.name] = kept
        if service.name in hub:
            restore_hub_only(comp, hub[service.name])
    if services:
        save["services"] = services
    write_payload(metadata, save)
    return losses


def _only_generated(comp: dict[str, Any]) -> bool:
    template = comp.get("podTemplate")
    if not isinstance(template, dict) or set(template) != {"spec"} or set(template["spec"]) != {"containers"}:
        return False
    containers = template["spec"]["containers"]
    cache = comp.get("compilationCache") or {}
    mount = {"name": cache.get("pvcName"), "mountPath": cache.get("mountPath", "")}
    return (len(containers) == 1 and containers[0].get("name") == "main"
            and set(containers[0]) <= {"name", "volumeMounts"}
            and all(m == mount for m in containers[0].get("volumeMounts", [])))


def _pod(comp: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The component's podTemplate.spec and its main container, made where missing."""
    pod = comp.setdefault("podTemplate", {}).setdefault("spec", {})
    main = main_container(pod)
    if main is None:
        main = {"name": "main"}
        pod.setdefault("containers", []).insert(0, main)
    return pod, main


def _service_to_beta(service, comp: dict[str, Any], written: dict[str, Any], losses: list) -> dict[str, Any]:
    extra = service.extra_v1alpha1
    path = f"spec.services.{service.name}"
    save: dict[str, Any] = _main_container_origins(service, written)
    if written.get("envFromSecret") == "":
        # SSC:346-348 + 2276-2278: an empty envFromSecret makes no envFrom; the payload keeps it. A
        # named one is the main container's sole envFrom Secret, which import reads back as it.
        save["envFromSecret"] = ""
    written_pod = written.get("extraPodSpec") if isinstance(written.get("extraPodSpec"), dict) else {}
    main_env_from = (written_pod.get("mainContainer") or {}).get("envFrom")
    if "extraPodSpec" in written and pod_is_zero(written_pod):
        # SSC:366-370 + 2232-2234: an extraPodSpec that holds nothing is kept as written.
        save["extraPodSpec"] = _deep(written_pod)
    elif "envFromSecret" not in written and sole_secret(main_env_from):
        # SSC:457-462: where the Secret was written; the way back keeps the list (SSC:2339-2341).
        save.setdefault("extraPodSpec", {}).setdefault("mainContainer", {})["envFrom"] = _deep(main_env_from)
    if written.get("envFromSecret") and main_env_from:
        # SSC:1482-1504: mergo.Merge WithOverride lets a non-empty mainContainer.envFrom replace the
        # list built from envFromSecret (SSC:1553-1558), and the way back does not restore it
        # (restoreEnvFromSecretFromPreserved, SSC:2272-2290): the operator drops it.
        losses.append((f"{path}.envFromSecret",
                       "extraPodSpec.mainContainer.envFrom replaces it in the operator's conversion"))
    for key, value in service.extra.items():
        if key == "modelRef" and isinstance(value, dict) and value.get("name") == "":
            losses.append((f"{path}.modelRef.name", f"{V1BETA1} requires a modelRef name (v1beta1/common.go:136-140)"))
    experimental: dict[str, Any] = {}
    for key, value in extra.items():
        if key == "componentType":
            # SSC:396-404: the type is the componentType as written; prefill and decode are
            # v1beta1 types, any other value its schema's enum rejects.
            if value not in BETA_TYPES:
                losses.append((f"{path}.componentType",
                               f"componentType {value!r} is not a {V1BETA1} type ({', '.join(BETA_TYPES)})"))
            elif value in ("prefill", "decode") and extra.get("subComponentType", value) != value:
                # SSC:406-413 + 235-237: the way back writes worker + subComponentType <type>, and the
                # saved subComponentType only fills an empty one: the operator loses this one.
                losses.append((f"{path}.subComponentType",
                               f"the operator gives componentType {value} back as worker with subComponentType "
                               f"{value}, not {extra['subComponentType']!r}"))
        elif key in ALPHA_SAVED or (key in ALPHA_DISABLED and not (isinstance(value, dict) and value.get("enabled"))):
            save[key] = _deep(value)
        elif key == "failover" and isinstance(value.get("numShadows"), int) and value["numShadows"] > 1:
            # v1beta1/common.go:340-347: the operator makes exactly one shadow; its schema refuses more.
            losses.append((f"{path}.failover.numShadows", f"{V1BETA1} allows at most one shadow"))
        elif key in ("gpuMemoryService", "failover"):
            # SSC:1382-1407: an enabled feature moves under experimental, without "enabled".
            experimental[key] = with_gms_mode({k: v for k, v in value.items() if k != "enabled"}, GMS_MODE_TO_BETA)
        elif key == "checkpoint":
            experimental["checkpoint"] = _deep(value)  # SSC:1401-1404, "enabled" kept
        elif key == "resources" and isinstance(value, dict):
            # SSC:1547-1549 + 1491: dedicated resources under mainContainer's own.
            _pod_spec, main = _pod(comp)
            main["resources"] = merge_under(main.get("resources") or {}, alpha_resources_as_container(value))
            _gpu_under_type(main["resources"], value, (written_pod.get("mainContainer") or {}).get("resources"))
        elif key in PROBES:
            _pod_spec, main = _pod(comp)
            main.setdefault(key, _deep(value))  # SSC:1560-1565, mainContainer's probe wins (1491)
            save[key] = _deep(value)
        elif key == "volumeMounts" and isinstance(value, list):
            cache = next((m for m in value if isinstance(m, dict) and m.get("useAsCompilationCache")), None)
            if cache is not None and not cache.get("name"):
                # SSC:190-200 would write compilationCache.pvcName "", which v1beta1's schema refuses.
                losses.append((f"{path}.volumeMounts",
                               f"a compilation-cache mount without a name has no {V1BETA1} place"))
                continue
            _volume_mounts_to_beta(value, comp)
            if not _single_cache_mount(value):
                save[key] = _deep(value)  # SSC:354-357 + 444-479: where each mount was written
        elif key == "frontendSidecar" and isinstance(value, dict):
            pod, _main_container = _pod(comp)
            if any(isinstance(c, dict) and c.get("name") == SIDECAR for c in pod.get("containers") or []):
                # SSC:2244-2249: the v1alpha1 webhook rejects this pair; nothing to convert.
                losses.append((f"{path}.frontendSidecar",
                               f"extraPodSpec already has a container named {SIDECAR}"))
                continue
            pod["containers"].append(_sidecar_container(value))  # SSC:2151-2171
            comp["frontendSidecar"] = SIDECAR  # SSC:1537-1541
            save[key] = _deep(value)  # SSC:375-378
        else:
            losses.append((f"{path}.{key}", f"the operator does not convert {key} to {V1BETA1}"))
    if experimental:
        comp["experimental"] = experimental
    return save


def _gpu_under_type(resources: dict[str, Any], alpha: dict[str, Any], main_own: Any) -> None:
    """The modelled GPU count under limits.gpuType (resourcesToNative, SSC:2489-2545), unless
    mainContainer wrote a GPU limit of its own, which wins (SSC:1491)."""
    gpu_type = (alpha.get("limits") or {}).get("gpuType") if isinstance(alpha.get("limits"), dict) else None
    limits = resources.get("limits") or {}
    own = (main_own or {}).get("limits") if isinstance(main_own, dict) else None
    if (gpu_type and gpu_type != DEFAULT_GPU_RESOURCE and DEFAULT_GPU_RESOURCE in limits and gpu_type not in limits
            and not (isinstance(own, dict) and DEFAULT_GPU_RESOURCE in own)):
        limits[gpu_type] = limits.pop(DEFAULT_GPU_RESOURCE)


def pod_is_zero(pod: dict[str, Any]) -> bool:
    """extraPodSpecIsZero (SSC:2225-2230): no pod field and an empty main container."""
    main = pod.get("mainContainer") or {}
    return (isinstance(main, dict) and all(v in (None, [], {}) for v in main.values())
            and all(v in (None, [], {}) for k, v in pod.items() if k != "mainContainer"))


def sole_secret(env_from: Any) -> str | None:
    """The Secret an envFrom list holds when it holds that alone (envFromSecretMatches)."""
    if isinstance(env_from, list) and len(env_from) == 1 and isinstance(env_from[0], dict) \
            and set(env_from[0]) == {"secretRef"} and isinstance(env_from[0]["secretRef"], dict) \
            and set(env_from[0]["secretRef"]) == {"name"} and env_from[0]["secretRef"]["name"]:
        return env_from[0]["secretRef"]["name"]
    return None


def _main_container_origins(service, written: dict[str, Any]) -> dict[str, Any]:
    """What of extraPodSpec.mainContainer the way back cannot tell from the dedicated fields it
    merges with (saveSharedMainContainerOrigins, SSC:444-479): its name, its env beside envs, its
    resources beside resources when the GPU is there or resources holds more than the GPU."""
    main = (written.get("extraPodSpec") or {}).get("mainContainer") or {}
    save: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    if "name" in main:
        kept["name"] = main["name"]
    if "env" in main:
        kept["env"] = _deep(main["env"])
        if "envs" in written:
            save["envs"] = _deep(written["envs"])
    limits = (main.get("resources") or {}).get("limits")
    if ("resources" in service.extra_v1alpha1 or main.get("resources") == {}
            or (isinstance(limits, dict) and DEFAULT_GPU_RESOURCE in limits)):
        if "resources" in main:
            kept["resources"] = _deep(main["resources"])
        if "resources" in written:
            save["resources"] = _deep(written["resources"])
    if kept:
        save["extraPodSpec"] = {"mainContainer": kept}
    return save


def _volume_mounts_to_beta(mounts: list[dict[str, Any]], comp: dict[str, Any]) -> None:
    # SSC:190-200: the first cache mount is compilationCache; SSC:1566-1572 + 1498: every mount
    # is also a main-container mount, after mainContainer's own.
    cache = next((m for m in mounts if isinstance(m, dict) and m.get("useAsCompilationCache")), None)
    if cache is not None:
        comp["compilationCache"] = {"pvcName": cache.get("name"),
                                    **({"mountPath": cache["mountPoint"]} if cache.get("mountPoint") else {})}
    # A mount without mountPoint has no container place; the operator picks the backend's path.
    projected = [mount_as_container(m) for m in mounts if isinstance(m, dict) and m.get("mountPoint")]
    if projected:
        _pod_spec, main = _pod(comp)
        main["volumeMounts"] = [*(main.get("volumeMounts") or []), *projected]


def _single_cache_mount(mounts: list[Any]) -> bool:
    """One cache mount with its path: compilationCache alone gives it back (SSC:1012-1021)."""
    # Without mountPoint (or with ""), compilationCache has no mountPath and gives the mount back
    # without one (mountPath is omitempty, v1beta1/common.go:69).
    return (len(mounts) == 1 and isinstance(mounts[0], dict) and mounts[0].get("useAsCompilationCache") is True
            and "name" in mounts[0] and set(mounts[0]) <= {"name", "mountPoint", "useAsCompilationCache"})


def mount_as_container(mount: dict[str, Any]) -> dict[str, Any]:
    return {"name": mount.get("name"), "mountPath": mount.get("mountPoint", "")}


def _sidecar_container(sidecar: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": SIDECAR}
    for key, target in (("image", "image"), ("args", "args"), ("envs", "env")):
        if sidecar.get(key):
            out[target] = _deep(sidecar[key])
    if sidecar.get("envFromSecret"):
        out["envFrom"] = [{"secretRef": {"name": sidecar["envFromSecret"]}}]
    return out
