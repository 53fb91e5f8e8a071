"""The webhook's rules on a component's ``experimental`` section: GPU memory service, failover, Grove
scaling groups, checkpoints (ai-dynamo/dynamo ``deploy/operator/internal/webhook/validation/
shared_v1beta1.go`` at commit 2a6da14c, lines 409-622, and ``internal/checkpoint/compatibility.go``)."""

from __future__ import annotations

from typing import Any

from . import errors as e
from .errors import FieldError, forbidden, invalid, obj


def experimental(exp, at, comp, pathway, cluster) -> list[FieldError]:
    """``validateExperimentalSpec`` (shared_v1beta1.go@2a6da14c:409-455)."""
    out: list[FieldError] = []
    gms, fail, grove = e.gms(exp, of_experimental=True), e.failover(exp), e.grove(exp)
    if gms is not None:
        out += gpu_memory_service(gms, f"{at}.gpuMemoryService", comp)
    if fail is not None:  # :515-564
        fmode = e.mode(fail)
        if gms is None:
            out.append(forbidden(f"{at}.failover", f'gpuMemoryService is required when failover mode is "{fmode}"',
                                 "failover"))
        elif e.mode(gms) != fmode:
            out.append(invalid(f"{at}.failover.mode", fail.get("mode", ""),
                               f'must match gpuMemoryService.mode "{gms.get("mode", "")}"', "failover"))
        if fmode == "InterPod":
            count, error = e.gpu_count(e.main_resources(comp))
            if error:
                out.append(forbidden(f"{at}.failover", f"failed to read main-container GPU limit: {error}", "failover"))
            elif count < 1:
                out.append(forbidden(f"{at}.failover", "GMS failover requires at least 1 GPU in "
                                     "podTemplate.spec.containers[main].resources.limits.nvidia.com/gpu", "failover"))
            if comp.get("type") in ("epp", "frontend", "planner"):
                out.append(forbidden(f"{at}.failover", f'GMS failover is not supported for component type '
                                     f'"{comp["type"]}"', "failover"))
    if grove is not None and grove.get("forceScalingGroup") and not pathway:  # :566-580
        out.append(forbidden(f"{at}.grove.forceScalingGroup", "is currently supported only for Grove-backed "
                             "DynamoGraphDeployment components", "grove_pathway"))
    checkpoint = exp.get("checkpoint")
    if isinstance(checkpoint, dict):  # :582-622
        if checkpoint.get("enabled") and not cluster.checkpoint:
            out.append(forbidden(f"{at}.checkpoint", "checkpoint functionality is disabled in the operator "
                                 "configuration", "checkpoint"))
        clients = obj(checkpoint.get("job")).get("gmsClientContainers")
        if clients and gms is None:
            out.append(forbidden(f"{at}.checkpoint.job.gmsClientContainers", "requires gpuMemoryService to be set",
                                 "checkpoint"))
        elif clients and e.mode(gms) == "InterPod":
            out.append(forbidden(f"{at}.checkpoint.job.gmsClientContainers",
                                 "is only supported with gpuMemoryService.mode=IntraPod", "checkpoint"))
        if checkpoint.get("enabled"):  # :448 checkpoint.ValidateCheckpointCompatibility (compatibility.go:21)
            if gms is not None and gms.get("mode") == "InterPod":
                out.append(forbidden(f"{at}.checkpoint", "Snapshot with gpuMemoryService.mode=InterPod is unsupported",
                                     "checkpoint"))
            if fail is not None:
                out.append(forbidden(f"{at}.checkpoint", "Snapshot with active/passive failover is temporarily "
                                     "unsupported", "checkpoint"))
    return out


def gpu_memory_service(gms: dict[str, Any], at: str, comp: dict[str, Any]) -> list[FieldError]:
    """``validateGPUMemoryServiceSpec`` (shared_v1beta1.go@2a6da14c:458-513)."""
    out: list[FieldError] = []
    if comp.get("type") not in ("worker", "prefill", "decode"):
        out.append(forbidden(at, "GPU memory service is only supported for worker, prefill, or decode components",
                             "gpu_memory_service"))
    count, error = e.gpu_count(e.main_resources(comp))
    if error or count < 1:
        out.append(forbidden(at, "GPU memory service requires podTemplate.spec.containers[main].resources.limits."
                             "nvidia.com/gpu >= 1", "gpu_memory_service"))
    if e.mode(gms) != "IntraPod":
        return out
    seen: set[str] = set()
    names = {c.get("name") for c in e.containers(comp)}
    for i, name in enumerate(gms.get("extraClientContainers") or []):
        if name in seen:
            out.append(FieldError(f"{at}.extraClientContainers[{i}]", "Duplicate", value=name,
                                  rule="gpu_memory_service"))
            continue
        seen.add(name)
        if name not in names:
            out.append(invalid(f"{at}.extraClientContainers[{i}]", name,
                               "does not name a container in podTemplate.spec.containers", "gpu_memory_service"))
    return out
