"""GPU memory and utilisation per pod of a graph.

On Kubernetes they come from NVIDIA's dcgm-exporter in Prometheus (``DCGM_FI_DEV_FB_USED``,
``DCGM_FI_DEV_GPU_UTIL``, labelled with the pod that holds each GPU); on the local runtime
from NVML, read by the local operator for each worker's own processes and kept in the status
cache. Nothing here raises for Prometheus trouble: the answer says why it has no numbers."""

from __future__ import annotations

import time

from graphs.models import Deployment, Graph, Pod
from graphs.runtimes.registry import on_cluster

from . import promql, series
from .charts import source_for
from .prometheus import PrometheusError, PrometheusUnreachable, query

MIB = 2**20


def gpu_usage(graph: Graph, deployment: Deployment | None, pods: list[Pod] | None = None) -> dict:
    """{"runtime", "source" (dcgm | nvml), "state" (ok | no_data | unreachable | error |
    not_deployed), "message", "pods": {name: {"gpu_memory_bytes", "gpu_util", "gpu_devices"}}}."""
    out = {"graph": graph.name, "runtime": deployment.runtime if deployment else None, "source": "", "state": "ok",
           "message": "", "pods": {}}
    if deployment is None or not deployment.active:
        out.update(state="not_deployed", message=f"{graph.name} is not deployed")
        return out
    pods = list(Pod.objects.filter(deployment=deployment)) if pods is None else pods
    if not on_cluster(deployment):
        out["source"] = "nvml"
        out["pods"] = {p.name: {"gpu_memory_bytes": p.gpu_memory_bytes, "gpu_util": p.gpu_util,
                                "gpu_devices": p.gpu_devices} for p in pods if p.gpu_devices}
        if not out["pods"]:
            out.update(state="no_data", message="No local pod holds a GPU: mocker workers and the frontend run on "
                                                "the CPU, and NVML sees no GPU worker of this graph.")
        return out
    out["source"] = "dcgm"
    names = [p.name for p in pods if p.gpus]
    if not names:
        out.update(state="no_data", message="No pod of this graph asks for a GPU.")
        return out
    source = source_for(graph, deployment)
    namespace = deployment.namespace or "default"
    try:
        at = int(time.time() // source.scope.scrape_interval * source.scope.scrape_interval)
        samples = query(promql.pod_gpus(namespace, names), url=source.url, at=at)
    except PrometheusError as exc:
        out.update(state="unreachable" if isinstance(exc, PrometheusUnreachable) else "error", message=exc.message)
        return out
    for sample in samples:
        row = out["pods"].setdefault(sample.labels.get("pod", ""), {"gpu_memory_bytes": None, "gpu_util": None,
                                                                     "gpu_devices": ""})
        if sample.labels.get("stat") == "fb_used_mib" and sample.value is not None:
            row["gpu_memory_bytes"] = int(sample.value * MIB)
        elif sample.labels.get("stat") == "gpu_util":
            row["gpu_util"] = sample.value
    out["pods"].pop("", None)
    if not out["pods"]:
        out.update(state="no_data", message=(
            f"Prometheus at {source.url} has no {series.DCGM_FB_USED} series for these pods: is NVIDIA's "
            "dcgm-exporter running with its Kubernetes pod mapping, and scraped?"))
    return out


def pod_gpu_usage(deployment: Deployment | None, pods: list[Pod]) -> dict[str, dict]:
    """Just the per-pod readings, for the pods table."""
    if deployment is None:
        return {}
    return gpu_usage(deployment.graph, deployment, pods)["pods"]
