"""The update rules of the Dynamo operator's DGD validating webhook (``ValidateUpdate``), old and new
both v1beta1: ai-dynamo/dynamo ``deploy/operator/internal/webhook/validation/`` at commit 2a6da14c.
Every error is marked ``update``: deleting the DGD and creating it again does not meet the rule."""

from __future__ import annotations

import dataclasses
from typing import Any

from . import errors as e
from .create import RUNTIME_VERSION, override_required
from .errors import FieldError, obj
from .experimental import gpu_memory_service
from .provider import provider_override_update

TOPOLOGY = "component topology is immutable and cannot be modified after creation"
REPLICAS = ("cannot be modified directly when scaling adapter is enabled; scale or update the related "
            "DynamoGraphDeploymentScalingAdapter instead")
_RECREATE = "is immutable and cannot be added, removed, or changed after creation; delete and recreate the "
TOPOLOGY_CONSTRAINT = _RECREATE + "DynamoGraphDeployment to change topology constraints"
KV_POLICY = _RECREATE + "DynamoGraphDeployment to change the KV transfer policy"


def can_modify_replicas(username: str, operator_principal: str) -> bool:
    """``CanModifyDGDReplicas`` (internal/webhook/common.go@2a6da14c): the operator's own service account
    or any service account named ``planner-serviceaccount`` (consts.PlannerServiceAccountName)."""
    if not username.startswith("system:serviceaccount:"):
        return False
    if operator_principal and username == operator_principal:
        return True
    parts = username.split(":")
    return len(parts) == 4 and parts[3] == "planner-serviceaccount"


def _go_list(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"  # fmt's %v of a []string


def validate_update(new: dict[str, Any], old: dict[str, Any], *, username: str, operator_principal: str,
                    runtime_versions: bool) -> list[FieldError]:
    """``validateDynamoGraphDeploymentUpdate`` (dynamographdeployment.go@2a6da14c:600-631)."""
    found = _meta_update(obj(obj(new.get("metadata")).get("annotations")),
                         obj(obj(old.get("metadata")).get("annotations")), username, operator_principal)
    new_spec, old_spec = obj(new.get("spec")), obj(old.get("spec"))
    found += _spec_update(new_spec, old_spec, username, operator_principal, runtime_versions)
    phase = obj(obj(old.get("status")).get("rollingUpdate")).get("phase")
    if phase in ("Pending", "InProgress"):  # :616
        old_id, new_id = obj(old_spec.get("restart")).get("id", ""), obj(new_spec.get("restart")).get("id", "")
        if old_id != new_id:
            found.append(e.invalid("spec.restart.id", new_id, f"cannot be changed while a rolling update is {phase}",
                                   "restart_id"))
    return [dataclasses.replace(f, update=True) for f in found]


def _meta_update(new: dict[str, Any], old: dict[str, Any], username: str, principal: str) -> list[FieldError]:
    """``validateObjectMetaUpdate`` (dynamographdeployment.go@2a6da14c:635-668)."""
    out, at = [], f"metadata.annotations[{e.WORKLOAD_PROVIDER}]"
    if e.WORKLOAD_PROVIDER not in old and e.WORKLOAD_PROVIDER in new and principal and username != principal:
        out.append(e.forbidden(at, "may only be materialized by the Dynamo operator", "workload_provider"))
    if e.WORKLOAD_PROVIDER in old and new.get(e.WORKLOAD_PROVIDER) != old[e.WORKLOAD_PROVIDER]:
        out.append(e.invalid(at, new.get(e.WORKLOAD_PROVIDER), e.IMMUTABLE, "workload_provider"))
    return out


def _spec_update(new: dict[str, Any], old: dict[str, Any], username: str, principal: str,
                 runtime_versions: bool) -> list[FieldError]:
    """``validateDynamoGraphDeploymentSpecUpdate`` (dynamographdeployment.go@2a6da14c:671-770)."""
    out: list[FieldError] = []
    out += provider_override_update(new.get("providerOverride"), old.get("providerOverride"),
                                    "spec.providerOverride")  # :679
    new_list = [c if isinstance(c, dict) else {} for c in new.get("components") or []]
    olds = {c.get("name"): c for c in old.get("components") or [] if isinstance(c, dict)}
    news = {c.get("name") for c in new_list}
    added, removed = sorted(news - set(olds)), sorted(set(olds) - news)
    if added or removed:  # :694
        detail = TOPOLOGY
        if added and removed:
            detail += f": components added: {_go_list(added)}, components removed: {_go_list(removed)}"
        elif added:
            detail += f": components added: {_go_list(added)}"
        else:
            detail += f": components removed: {_go_list(removed)}"
        out.append(e.forbidden("spec.components", detail, "component_topology"))
    allowed = can_modify_replicas(username, principal)
    for i, comp in enumerate(new_list):  # :710
        before = olds.get(comp.get("name"))
        if before is not None:
            out += component_update(comp, before, f"spec.components[{i}]", allowed, runtime_versions)
            out += _power_update(comp, before, f"spec.components[{i}]")
    if new.get("backendFramework", "") != old.get("backendFramework", ""):  # :731
        out.append(e.invalid("spec.backendFramework", new.get("backendFramework", ""),
                             "is immutable and cannot be changed after creation", "backend_framework"))
    new_tc, old_tc = new.get("topologyConstraint"), old.get("topologyConstraint")
    if new_tc is not None or old_tc is not None:  # :740-753, :821-836
        same = isinstance(new_tc, dict) and isinstance(old_tc, dict) and all(
            new_tc.get(k, "") == old_tc.get(k, "") for k in ("clusterTopologyName", "packDomain"))
        if not same:
            out.append(e.invalid("spec.topologyConstraint", new_tc, TOPOLOGY_CONSTRAINT, "topology_constraint"))
    new_policy = obj(new.get("experimental")).get("kvTransferPolicy")
    old_policy = obj(old.get("experimental")).get("kvTransferPolicy")
    if (new_policy is not None or old_policy is not None) and not _same_policy(new_policy, old_policy):  # :755-875
        out.append(e.invalid("spec.experimental.kvTransferPolicy", new_policy, KV_POLICY, "kv_transfer_policy"))
    return out


def _same_policy(a: Any, b: Any) -> bool:
    """``kvTransferPoliciesEqual`` (dynamographdeployment_helpers.go@2a6da14c:351-367)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    keys = ("clusterTopologyName", "labelKey", "domain", "preferredWeight")
    return all(a.get(k) == b.get(k) for k in keys) and \
        (a.get("enforcement") or "required") == (b.get("enforcement") or "required")


def component_update(new: dict[str, Any], old: dict[str, Any], at: str, can_modify: bool,
                     runtime_versions: bool) -> list[FieldError]:
    """``validateDynamoComponentDeploymentSharedSpecUpdate`` (shared_v1beta1.go@2a6da14c:626-743)."""
    out = provider_override_update(new.get("providerOverride"), old.get("providerOverride"), f"{at}.providerOverride")
    if (e.nodes(new) > 1) != (e.nodes(old) > 1):  # :646
        out.append(e.invalid(f"{at}.multinode", new.get("multinode"), "cannot change node topology between "
                             "single-node and multi-node after creation", "multinode"))
    new_mn, old_mn = new.get("multinode"), old.get("multinode")
    if isinstance(new_mn, dict) and isinstance(old_mn, dict):  # :655 -> :746-790
        for role in ("leader", "worker"):
            out += provider_override_update(obj(new_mn.get(role)).get("providerOverride"),
                                            obj(old_mn.get(role)).get("providerOverride"),
                                            f"{at}.multinode.{role}.providerOverride")
    adapted = new.get("scalingAdapter") is not None or old.get("scalingAdapter") is not None
    if adapted and not can_modify and _replicas(new) != _replicas(old):  # :664
        out.append(e.forbidden(f"{at}.replicas", REPLICAS, "adapter_replicas"))
    new_tc, old_tc = new.get("topologyConstraint"), old.get("topologyConstraint")
    same = isinstance(new_tc, dict) and isinstance(old_tc, dict) and \
        new_tc.get("packDomain", "") == old_tc.get("packDomain", "")
    if (new_tc is not None or old_tc is not None) and not same:  # :672-686, :822-836
        out.append(e.invalid(f"{at}.topologyConstraint", new_tc, TOPOLOGY_CONSTRAINT, "topology_constraint"))
    out += _experimental_update(new, e.experimental(new), e.experimental(old), f"{at}.experimental")
    if runtime_versions:  # :728-741 ratchets an unchanged legacy image, refuses a newly invalid one
        index = e.main_index(new)
        new_image = str(e.containers(new)[index].get("image") or "") if index >= 0 else ""
        old_index = e.main_index(old)
        old_image = str(e.containers(old)[old_index].get("image") or "") if old_index >= 0 else ""
        where = f"{at}.podTemplate.spec.containers" + (f"[{index}].image" if index >= 0 else "")
        override, old_override = new.get("runtimeVersionOverride") or "", old.get("runtimeVersionOverride") or ""
        if not new_image and old_image:
            out.append(e.required(where, "is required", "main_image"))
        elif override_required(new_image, override) and (new_image != old_image or override != old_override):
            out.append(e.required(f"{at}.runtimeVersionOverride", RUNTIME_VERSION, "runtime_version"))
    return out


def _replicas(comp: dict[str, Any]) -> int:
    value = comp.get("replicas")
    return 1 if value is None else int(value)


def _experimental_update(comp, new, old, at) -> list[FieldError]:
    """``validateExperimentalSpecUpdate`` (shared_v1beta1.go@2a6da14c:688-725, 848-929)."""
    kind, out = "DynamoGraphDeployment", []
    old_gms, old_fail = e.gms(old, of_experimental=True), e.failover(old)
    new_gms = e.gms(new, of_experimental=True) if new is not None else None
    new_fail = e.failover(new) if new is not None else None
    if new is not None and new_gms is not None:  # :856 the new GMS state is validated again
        out += gpu_memory_service(new_gms, f"{at}.gpuMemoryService", comp)
    if e.inter_pod(new_gms) != e.inter_pod(old_gms):
        out.append(e.invalid(f"{at}.gpuMemoryService.mode", new_gms.get("mode", "") if new is not None and new_gms
                             else (None if new is None else ""), "the inter-pod GMS layout cannot be toggled after "
                             f"creation; delete and recreate the {kind}", "inter_pod_gms"))
    if e.inter_pod(new_fail) != e.inter_pod(old_fail):
        out.append(e.invalid(f"{at}.failover", new_fail, "inter-pod GMS failover cannot be toggled after creation; "
                             f"delete and recreate the {kind}", "inter_pod_failover"))
    if e.inter_pod(new_fail) and e.inter_pod(old_fail) and _shadows(new_fail) != _shadows(old_fail):
        out.append(e.invalid(f"{at}.failover.numShadows", new_fail.get("numShadows", 0), "is immutable for inter-pod "
                             f"GMS failover; delete and recreate the {kind} to change it", "inter_pod_failover"))
    old_forced = e.force_scaling_group(old)
    new_grove = e.grove(new) if new is not None else None
    if new_grove is not None:
        if bool(new_grove.get("forceScalingGroup")) != old_forced:
            out.append(e.invalid(f"{at}.grove.forceScalingGroup", bool(new_grove.get("forceScalingGroup")),
                                 f"cannot be toggled after creation; delete and recreate the {kind} to change it",
                                 "force_scaling_group"))
    elif old_forced:
        out.append(e.invalid(f"{at}.grove.forceScalingGroup", None, "cannot be toggled after creation; delete and "
                             f"recreate the {kind} to change it", "force_scaling_group"))
    return out


def _shadows(section: dict[str, Any]) -> int:
    value = int(section.get("numShadows") or 0)
    return 1 if value < 1 else value


def _power_update(new: dict[str, Any], old: dict[str, Any], at: str) -> list[FieldError]:
    """``validateDynamoGraphDeploymentSharedSpecUpdate`` (dynamographdeployment.go@2a6da14c:774-817)."""
    new_limit, old_limit = _power(new), _power(old)
    where = f"{at}.podTemplate.metadata.annotations[{e.GPU_POWER_LIMIT}]"
    out = []
    if new_limit != old_limit:
        out.append(e.invalid(where, new_limit, e.IMMUTABLE, "gpu_power_limit"))
    if old_limit is not None:
        (new_gpus, new_path), (old_gpus, _) = _gpus(new, at), _gpus(old, at)
        if new_gpus != old_gpus:
            out.append(e.invalid(new_path, new_gpus, e.IMMUTABLE, "gpu_power_limit"))
        if e.nodes(new) != e.nodes(old):
            out.append(e.invalid(f"{at}.multinode.nodeCount", e.nodes(new), e.IMMUTABLE, "gpu_power_limit"))
    return out


def _power(comp: dict[str, Any]) -> str | None:
    template = comp.get("podTemplate")
    if not isinstance(template, dict):
        return None
    return obj(obj(template.get("metadata")).get("annotations")).get(e.GPU_POWER_LIMIT)


def _gpus(comp: dict[str, Any], at: str) -> tuple[str | None, str]:
    """``effectiveNumberOfGPUsV1Beta1`` (dynamographdeployment_helpers.go@2a6da14c:283-319)."""
    base = f"{at}.podTemplate.spec.containers"
    for i, container in enumerate(e.containers(comp)):
        if container.get("name") != e.MAIN:
            continue
        resources = obj(container.get("resources"))
        for section in ("limits", "requests"):
            if e.GPU_RESOURCE in obj(resources.get(section)):
                return str(resources[section][e.GPU_RESOURCE]), f"{base}[{i}].resources.{section}[{e.GPU_RESOURCE}]"
        return None, f"{base}[{i}].resources"
    return None, base
