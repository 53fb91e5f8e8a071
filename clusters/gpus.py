"""GPUs as a cluster reports them: what a pod asks for, and what ready, schedulable nodes
have free. Pure: plain dicts in (nodes and pods as the API server returns them), no network."""

from __future__ import annotations

from dataclasses import dataclass

from core.spec import quantity_bytes

GPU = "nvidia.com/gpu"
_DONE_PHASES = ("Succeeded", "Failed")


def quantity_count(value) -> int:
    """A Kubernetes quantity as a whole count (0 when it is not one)."""
    try:
        return int(quantity_bytes(value))
    except (TypeError, ValueError):
        return 0


def pod_gpus(pod: dict) -> int:
    """GPUs a pod asks for: each container's nvidia.com/gpu limit (or request)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU, (resources.get("requests") or {}).get(GPU, 0))
        total += quantity_count(value)
    return total


def condition(conditions: list[dict] | None, kind: str) -> dict | None:
    """The condition of type ``kind`` in an object's status, if any."""
    return next((c for c in conditions or [] if c.get("type") == kind), None)


@dataclass
class GpuSummary:
    allocatable: int  # nvidia.com/gpu on ready, schedulable nodes
    free: int | None  # allocatable minus what pods bound to those nodes ask for; None: unknown


def gpu_summary(nodes: list[dict], pods: list[dict] | None) -> GpuSummary:
    usable = set()
    allocatable = 0
    for node in nodes:
        ready = condition((node.get("status") or {}).get("conditions"), "Ready")
        if (node.get("spec") or {}).get("unschedulable") or not ready or ready.get("status") != "True":
            continue
        usable.add((node.get("metadata") or {}).get("name"))
        allocatable += quantity_count(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
    if pods is None:
        return GpuSummary(allocatable=allocatable, free=None)
    used = sum(pod_gpus(p) for p in pods if (p.get("spec") or {}).get("nodeName") in usable
               and (p.get("status") or {}).get("phase") not in _DONE_PHASES)
    return GpuSummary(allocatable=allocatable, free=max(0, allocatable - used))
