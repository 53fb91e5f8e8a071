"""v1beta1 -> v1alpha1 as the Dynamo operator's ConvertFrom does (convert.py has the other way
and the payload annotation).

A v1alpha1 rendering of a spec imported from v1beta1 gets each v1beta1-only field at its
v1alpha1 place; where v1alpha1 has none, the field goes into the ``nvidia.com/dgd-spec``
payload. When the v1beta1 object was itself converted from v1alpha1, its payload gives back the
v1alpha1 fields and where they were written (a flat ``volumeMounts`` entry rather than a
main-container mount, a service-level probe...), as long as the live object still holds what
they became. Citations: github.com/ai-dynamo/dynamo at commit 2a6da14c,
deploy/operator/api/v1alpha1/shared_spec_conversion.go (SSC) and
dynamographdeployment_conversion.go (DGDC). Pure: no Django."""

from __future__ import annotations

import copy
from typing import Any

from core.dgd.convert import (
    ALPHA_DISABLED,
    ALPHA_SAVED,
    GMS_MODE_TO_ALPHA,
    PROBES,
    SIDECAR,
    V1ALPHA1,
    alpha_resources_as_container,
    merge_envs,
    merge_under,
    mount_as_container,
    pod_is_zero,
    read_payload,
    sole_secret,
    with_gms_mode,
    write_payload,
)
from core.dgd.convert_pod import projected_names, save_shape
from core.spec import GraphSpec


def to_alpha(spec: GraphSpec, obj: dict[str, Any], beta: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """Move the v1beta1-only fields of ``spec`` into ``obj`` (its v1alpha1 rendering) as
    ConvertFrom does (DGDC:375-480, SSC:526-595); ``beta`` is each component as v1beta1 writes
    it, whose podTemplate shape the payload keeps. Returns what has no place."""
    losses: list[tuple[str, str]] = []
    body, metadata = obj["spec"], obj["metadata"]
    restored = read_payload(metadata, written_by=V1ALPHA1)
    for key, value in spec.extra_v1beta1.items():
        if key == "topologyConstraint" and isinstance(value, dict):
            # DGDC:641-648: v1beta1's clusterTopologyName is v1alpha1's topologyProfile.
            out = {k: copy.deepcopy(v) for k, v in value.items() if k != "clusterTopologyName"}
            if "clusterTopologyName" in value:
                out["topologyProfile"] = value["clusterTopologyName"]
            body["topologyConstraint"] = out
        else:
            losses.append((f"spec.{key}", f"the operator does not convert spec.{key} to {V1ALPHA1}"))
    saved = restored.get("services") if isinstance(restored.get("services"), dict) else {}
    components = []
    for i, service in enumerate(spec.services):
        svc = body["services"][service.name]
        kept = saved.get(service.name) if isinstance(saved.get(service.name), dict) else {}
        _restore_alpha_only(svc, kept)
        save = _component_to_alpha(service, svc, kept, f"spec.components[{i}]", losses)
        if kept or service.extra_v1beta1:
            _prune(svc)  # only what this conversion emptied: a written {} stays
        if isinstance(kept.get("extraPodSpec"), dict) and pod_is_zero(kept["extraPodSpec"]) \
                and pod_is_zero(svc.get("extraPodSpec") or {}):
            svc["extraPodSpec"] = copy.deepcopy(kept["extraPodSpec"])  # SSC:267-271, not pruned (SSC:2306-2310)
        elif service.pod_template_keys is not None and svc.get("extraPodSpec") and pod_is_zero(svc["extraPodSpec"]):
            svc.pop("extraPodSpec")  # pruneEmptyExtraPodSpec (SSC:2299-2312): a pod of empty lists is none
        written = beta.get(service.name) or {}
        # SSC:646-658: the sidecar's container name is kept with a reference v1alpha1 could not take.
        shape = save_shape(written.get("podTemplate"), svc, save.get("frontendSidecar"))
        if shape is not None:
            template = save.setdefault("podTemplate", {})
            if not shape and projected_names(svc) is None:
                # The way back builds no podTemplate (SSC:1462-1464): no generated mount to drop.
                template.pop("spec", None)
            if shape:
                target = template.setdefault("spec", {})
                names = [c["name"] for c in shape["spec"]["containers"]]
                target["containers"] = [*shape["spec"]["containers"],
                                        *(c for c in target.get("containers", []) if c["name"] not in names)]
        if save:
            components.append({"name": service.name, **save})
    if "pvcs" in restored and "pvcs" not in body:
        body["pvcs"] = copy.deepcopy(restored["pvcs"])  # DGDC:252-256
    write_payload(metadata, {"components": components} if components else {})
    return losses


def _component_to_alpha(service, svc: dict[str, Any], kept: dict[str, Any], path: str, losses: list) -> dict[str, Any]:
    save: dict[str, Any] = {}
    meta = svc.get("extraPodMetadata")
    if isinstance(meta, dict) and set(meta) - {"labels", "annotations"}:
        # SSC:1646-1658 + 673-678: v1alpha1 extraPodMetadata holds labels and annotations; the
        # rest of podTemplate.metadata goes into the payload.
        save["podTemplate"] = {"metadata": {k: meta.pop(k) for k in list(meta) if k not in ("labels", "annotations")}}
        if not meta:
            svc.pop("extraPodMetadata")
    multinode = svc.get("multinode")
    if isinstance(multinode, dict) and "nodeCount" not in multinode:
        # v1beta1 defaults nodeCount to 2 (v1beta1/common.go:116-123): the API server stores it
        # before any conversion, and v1alpha1 requires it.
        svc["multinode"] = {**multinode, "nodeCount": 2}
    for key, value in service.extra_v1beta1.items():
        if key == "compilationCache" and isinstance(value, dict):
            _cache_to_alpha(value, svc, save, service.main_container_index is not None)
        elif key == "experimental" and isinstance(value, dict):
            # SSC:1409-1424 + 609-615: gpuMemoryService and failover come back enabled; grove, or
            # an experimental block with none of the three, has no v1alpha1 place.
            for name in ("gpuMemoryService", "failover"):
                if isinstance(value.get(name), dict):
                    svc[name] = {"enabled": True, **with_gms_mode(value[name], GMS_MODE_TO_ALPHA)}
            if "checkpoint" in value:
                svc["checkpoint"] = copy.deepcopy(value["checkpoint"])
            if not any(k in value for k in ("gpuMemoryService", "failover", "checkpoint")):
                save["experimental"] = copy.deepcopy(value)
            elif "grove" in value:
                save["experimental"] = {"grove": copy.deepcopy(value["grove"])}
        elif key == "frontendSidecar" and isinstance(value, str):
            _sidecar_to_alpha(value, svc, kept, save)
        else:
            losses.append((f"{path}.{key}", f"the operator does not convert {key} to {V1ALPHA1}"))
    return save


def _main(svc: dict[str, Any]) -> dict[str, Any] | None:
    container = (svc.get("extraPodSpec") or {}).get("mainContainer")
    return container if isinstance(container, dict) else None


def _cache_to_alpha(cache: dict[str, Any], svc: dict[str, Any], save: dict[str, Any], has_main: bool) -> None:
    # SSC:1012-1021: compilationCache is one flagged v1alpha1 volumeMount.
    flat = {"name": cache.get("pvcName"), **({"mountPoint": cache["mountPath"]} if cache.get("mountPath") else {}),
            "useAsCompilationCache": True}
    mounts = svc.get("volumeMounts")
    if isinstance(mounts, list) and any(isinstance(m, dict) and m.get("useAsCompilationCache")
                                        and m.get("name") == flat["name"]
                                        and m.get("mountPoint") == flat.get("mountPoint") for m in mounts):
        return  # the payload gave the flat mounts back (_restore_alpha_only)
    svc["volumeMounts"] = [flat, *(mounts or [])]
    main = _main(svc)
    mount = {"name": cache.get("pvcName"), "mountPath": cache.get("mountPath", "")}
    if main is not None and mount in (main.get("volumeMounts") or []):
        # SSC:2094-2100: the main container's mount is the flat one now (v1alpha1 would mount it twice).
        main["volumeMounts"].remove(mount)
        if not main["volumeMounts"]:
            main.pop("volumeMounts")
    elif cache.get("mountPath") and has_main:
        # SSC:748-764: v1alpha1 -> v1beta1 adds the mount (one with a path: convert.py); the way back
        # drops it (convert_pod.restore_hub_only). Without a main container, the saved shape says so.
        save.setdefault("podTemplate", {})["spec"] = {"containers": [{"name": "main"}]}


def _sidecar_to_alpha(name: str, svc: dict[str, Any], kept: dict[str, Any], save: dict[str, Any]) -> None:
    origin = kept.get("frontendSidecar")
    containers = (svc.get("extraPodSpec") or {}).get("containers") or []
    container = next((c for c in containers if isinstance(c, dict) and c.get("name") == name), None)
    if name != SIDECAR or not isinstance(origin, dict) or container is None:
        # SSC:619-627: a v1beta1 frontendSidecar names one of the pod's containers; v1alpha1 has
        # no such reference, so the container stays a sidecar and the name goes into the payload.
        save["frontendSidecar"] = name
        return
    # SSC:1660-1677 + 2182-2205: the generated container becomes the v1alpha1 object again,
    # with the live image, args, env and a sole Secret as envFromSecret.
    out = copy.deepcopy(origin)
    for key, field in (("image", "image"), ("args", "args"), ("env", "envs")):
        out.pop(field, None)
        if container.get(key):
            out[field] = copy.deepcopy(container[key])
    env_from = container.get("envFrom") or []
    secret = env_from[0].get("secretRef") if len(env_from) == 1 and isinstance(env_from[0], dict) \
        and set(env_from[0]) == {"secretRef"} else None
    if isinstance(secret, dict) and secret.get("name"):
        out["envFromSecret"] = secret["name"]
    elif origin.get("envFromSecret") != "":
        out.pop("envFromSecret", None)
    svc["frontendSidecar"] = out
    containers.remove(container)


def _restore_alpha_only(svc: dict[str, Any], kept: dict[str, Any]) -> None:
    """The v1alpha1 fields the payload kept, and where they were written (SSC:225-314, 2322-2364)."""
    for key in ALPHA_SAVED:
        if key in kept and key not in svc:
            svc[key] = copy.deepcopy(kept[key])
    shm = kept.get("sharedMemory")
    if isinstance(shm, dict) and shm.get("disabled") and svc.get("sharedMemory") == {"disabled": True}:
        svc["sharedMemory"] = copy.deepcopy(shm)  # SSC:491-502
    for key in ALPHA_DISABLED:
        if key in kept and key not in svc:
            svc[key] = copy.deepcopy(kept[key])
    main = _main(svc) or {}
    secret = kept.get("envFromSecret")
    if isinstance(secret, str) and "envFromSecret" not in svc and (
            secret == "" or main.get("envFrom") == [{"secretRef": {"name": secret}}]):
        # SSC:2272-2290: envFromSecret while the main container's envFrom is still that Secret alone.
        svc["envFromSecret"] = secret
        main.pop("envFrom", None) if secret else None
    saved_from = ((kept.get("extraPodSpec") or {}).get("mainContainer") or {}).get("envFrom")
    if sole_secret(saved_from) and sole_secret(saved_from) == svc.get("envFromSecret") and not main.get("envFrom"):
        # SSC:2339-2341: a Secret written in mainContainer.envFrom stays in that list.
        svc.pop("envFromSecret")
        main = _ensure_main(svc)
        main["envFrom"] = copy.deepcopy(saved_from)
    for key in PROBES:
        if key in kept and main.get(key) == kept[key]:
            svc[key] = main.pop(key)
    saved_main = (kept.get("extraPodSpec") or {}).get("mainContainer") or {}
    if "env" in saved_main and svc.get("envs", []) == merge_envs(kept.get("envs") or [], saved_main["env"]):
        # SSC:453-456 + 2334-2338: envs and mainContainer.env as written, while they still
        # merge to the live env.
        _put(svc, "envs", kept.get("envs"))
        main = _ensure_main(svc)
        main["env"] = copy.deepcopy(saved_main["env"])
    if "resources" in kept or "resources" in saved_main:
        # SSC:463-466 + 2342-2346: resources and mainContainer.resources as written, while they
        # still make the live container's.
        live = merge_under(main.get("resources") or {}, alpha_resources_as_container(svc.get("resources") or {}))
        want = merge_under(saved_main.get("resources") or {}, alpha_resources_as_container(kept.get("resources") or {}))
        if live == want:
            _put(svc, "resources", kept.get("resources"))
            if "resources" in saved_main:
                main = _ensure_main(svc)
            _put(main, "resources", saved_main.get("resources"))
    mounts = kept.get("volumeMounts")
    if isinstance(mounts, list):
        # SSC:2347-2353: the flat mounts are the tail of the main container's (SSC:1498).
        projected = [mount_as_container(m) for m in mounts if isinstance(m, dict) and m.get("mountPoint")]
        live_mounts = main.get("volumeMounts") or []
        if live_mounts[len(live_mounts) - len(projected):] == projected:
            _put(main, "volumeMounts", live_mounts[:len(live_mounts) - len(projected)] or None)
            svc["volumeMounts"] = copy.deepcopy(mounts)
    if "name" in saved_main:
        _ensure_main(svc).setdefault("name", saved_main["name"])  # SSC:450-452 + 277-281


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        target.pop(key, None)
    else:
        target[key] = copy.deepcopy(value)


def _ensure_main(svc: dict[str, Any]) -> dict[str, Any]:
    return svc.setdefault("extraPodSpec", {}).setdefault("mainContainer", {})


def _prune(svc: dict[str, Any]) -> None:
    pod = svc.get("extraPodSpec")
    if not isinstance(pod, dict):
        return
    if pod.get("containers") == []:
        pod.pop("containers")
    if pod.get("mainContainer") == {}:
        pod.pop("mainContainer")
    if not pod:
        svc.pop("extraPodSpec")

