"""Builders for realistic core objects: pods (Dynamo labels, container states), events, nodes."""

from __future__ import annotations

import secrets as _secrets
from datetime import UTC, datetime
from typing import Any

GPU = "nvidia.com/gpu"
UNSCHEDULABLE_MESSAGE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
DGD_LABEL = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT_LABEL = "nvidia.com/dynamo-component"
COMPONENT_TYPE_LABEL = "nvidia.com/dynamo-component-type"
SUB_COMPONENT_TYPE_LABEL = "nvidia.com/dynamo-sub-component-type"
_WAITING_MESSAGES = {
    "ImagePullBackOff": 'Back-off pulling image "{image}"',
    "ErrImagePull": 'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not found',
    "CrashLoopBackOff": "back-off 5m0s restarting failed container={container} pod={pod}",
    "ContainerCreating": "",
    "CreateContainerConfigError": 'secret "hf-token-secret" not found',
}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def dynamo_labels(namespace: str, dgd: str, component: str, component_type: str | None = None,
                  sub_component_type: str | None = None) -> dict[str, str]:
    """The labels the Dynamo operator puts on a component's pods."""
    labels = {
        DGD_LABEL: dgd,
        COMPONENT_LABEL: component,
        "nvidia.com/selector": f"{dgd}-{component.lower()}",
        "nvidia.com/dynamo-namespace": f"{namespace}-{dgd}",
        "nvidia.com/metrics-enabled": "true",
        "nvidia.com/dynamo-discovery-backend": "kubernetes",
    }
    if component_type:
        labels[COMPONENT_TYPE_LABEL] = component_type
    if sub_component_type:
        labels[SUB_COMPONENT_TYPE_LABEL] = sub_component_type
    return labels


def build_pod(name: str, namespace: str = "default", *, dgd: str | None = None, component: str | None = None,
              component_type: str | None = None, sub_component_type: str | None = None,
              phase: str | None = None, ready: bool = True, waiting_reason: str | None = None,
              waiting_message: str | None = None, restart_count: int = 0,
              unschedulable: bool | str = False, node_name: str | None = "node-1",
              labels: dict[str, str] | None = None, containers: tuple[str, ...] | list[str] = ("main",),
              image: str = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", gpus: int = 0,
              owner: dict[str, Any] | None = None, deleting: bool = False) -> dict[str, Any]:
    """A Pod as the kubelet and scheduler would report it.

    ``unschedulable=True`` (or a message) gives Pending with ``PodScheduled=False`` reason
    ``Unschedulable``; ``waiting_reason`` (ImagePullBackOff, ErrImagePull, CrashLoopBackOff,
    ContainerCreating, ...) puts the containers in that waiting state; ``ready=False`` alone gives a
    running pod whose readiness probe fails.
    """
    all_labels = dict(labels or {})
    if dgd and component:
        all_labels = {**dynamo_labels(namespace, dgd, component, component_type, sub_component_type), **all_labels}
    stamp = now()
    resources = {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}} if gpus else {}
    spec: dict[str, Any] = {
        "containers": [{"name": c, "image": image, "resources": resources} for c in containers],
        "restartPolicy": "Always", "schedulerName": "default-scheduler", "serviceAccountName": "default",
    }
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": all_labels}
    if owner:
        meta["ownerReferences"] = [owner]
    if deleting:
        meta["deletionTimestamp"] = stamp
        meta["deletionGracePeriodSeconds"] = 30
    conditions: list[dict[str, Any]]
    if unschedulable:
        message = unschedulable if isinstance(unschedulable, str) else UNSCHEDULABLE_MESSAGE
        status = {"phase": "Pending", "qosClass": "BestEffort", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
             "lastTransitionTime": stamp, "lastProbeTime": None}]}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
    spec["nodeName"] = node_name
    statuses = []
    for cname in containers:
        cstatus: dict[str, Any] = {"name": cname, "image": image, "imageID": "", "restartCount": restart_count,
                                   "started": False, "ready": False}
        if waiting_reason:
            text = waiting_message if waiting_message is not None else _WAITING_MESSAGES.get(waiting_reason, "")
            cstatus["state"] = {"waiting": {"reason": waiting_reason,
                                            "message": text.format(image=image, container=cname, pod=name)}}
            if waiting_reason == "CrashLoopBackOff":
                cstatus["restartCount"] = max(restart_count, 5)
                cstatus["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": stamp,
                                                       "finishedAt": stamp}}
        else:
            cstatus["state"] = {"running": {"startedAt": stamp}}
            cstatus.update(started=True, ready=ready, imageID=f"{image}@sha256:{'0' * 64}",
                           containerID=f"containerd://{_secrets.token_hex(32)}")
        statuses.append(cstatus)
    all_ready = ready and not waiting_reason
    pending = waiting_reason in ("ImagePullBackOff", "ErrImagePull", "ContainerCreating",
                                 "CreateContainerConfigError")
    conditions = [{"type": t, "status": "True" if ok else "False", "lastTransitionTime": stamp,
                   "lastProbeTime": None}
                  for t, ok in (("PodReadyToStartContainers", True), ("Initialized", True), ("Ready", all_ready),
                                ("ContainersReady", all_ready), ("PodScheduled", True))]
    for cond in conditions:
        if cond["status"] == "False":
            cond.update(reason="ContainersNotReady",
                        message=f"containers with unready status: [{' '.join(containers)}]")
    status = {"phase": phase or ("Pending" if pending else "Running"), "conditions": conditions,
              "hostIP": "10.0.0.1", "podIP": f"10.244.0.{1 + sum(map(ord, name)) % 250}", "startTime": stamp,
              "qosClass": "BestEffort", "containerStatuses": statuses}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def build_event(involved: dict[str, Any], reason: str, message: str, *, type: str = "Warning",
                count: int = 1, component: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    """A core/v1 Event about ``involved`` (a full object, or a dict with kind/name/namespace[/uid])."""
    meta = involved.get("metadata")
    if meta is not None:
        ref = {"kind": involved.get("kind", ""), "name": meta["name"], "namespace": meta.get("namespace", ""),
               "uid": meta.get("uid", ""), "apiVersion": involved.get("apiVersion", "v1"),
               "resourceVersion": meta.get("resourceVersion", "")}
    else:
        ref = {k: v for k, v in involved.items() if v is not None}
    ns = namespace or ref.get("namespace") or "default"
    if component is None:
        component = "default-scheduler" if reason == "FailedScheduling" else "kubelet"
    stamp = now()
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{ref['name']}.{_secrets.token_hex(8)}", "namespace": ns},
        "involvedObject": ref, "reason": reason, "message": message, "type": type, "count": count,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "source": {"component": component},
        "reportingComponent": component, "reportingInstance": "",
    }


def build_node(name: str, *, gpus: int = 0, gpu_product: str | None = "NVIDIA-H100-80GB-HBM3", cpu: str = "32",
               memory: str = "256Gi", ready: bool = True, labels: dict[str, str] | None = None,
               unschedulable: bool = False, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Node with ``nvidia.com/gpu`` capacity/allocatable when ``gpus`` > 0 (GPU operator labels too)."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "500Gi"}
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    if gpus:
        resources[GPU] = str(gpus)
        all_labels["nvidia.com/gpu.count"] = str(gpus)
        if gpu_product:
            all_labels["nvidia.com/gpu.product"] = gpu_product
    all_labels.update(labels or {})
    stamp = now()
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all_labels}, "spec": spec,
        "status": {
            "capacity": dict(resources), "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady",
                            "message": "kubelet is posting ready status", "lastHeartbeatTime": stamp,
                            "lastTransitionTime": stamp}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "containerd://1.7.0",
                         "kernelVersion": "6.1.0", "kubeProxyVersion": "v1.31.0", "kubeletVersion": "v1.31.0",
                         "machineID": "", "operatingSystem": "linux", "osImage": "Ubuntu 22.04", "systemUUID": ""},
        },
    }
