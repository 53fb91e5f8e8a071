"""Which runtime serves a deployment, and what the rest of the product asks of a runtime kind
without loading it: one row per runtime (the way healthchecks keeps its transports in one
table). Pages, metrics, diagnoses and benchmarks ask these rows, never a runtime's name."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from core.errors import OperationRefused

from .base import Runtime, Target


@dataclass(frozen=True)
class RuntimeKind:
    kind: str
    title: str
    implementation: str  # "module:Class", imported when a runtime is first asked to act
    # Pods on a Kubernetes cluster, in a namespace: a target names both; the cluster's nodes hold
    # the free GPUs and the /dev/shm; the cluster's Prometheus holds the series; the DGD's replica
    # owners and GitOps tools are read there. Else processes this product starts on this host.
    on_cluster: bool


RUNTIMES: dict[str, RuntimeKind] = {r.kind: r for r in (
    RuntimeKind("local", "this host", "graphs.runtimes.local.runtime:LocalRuntime", on_cluster=False),
    RuntimeKind("kubernetes", "Kubernetes", "graphs.runtimes.kubernetes.runtime:KubernetesRuntime", on_cluster=True),
)}
KINDS = tuple(RUNTIMES)
DEFAULT_KIND = KINDS[0]
ON_THIS_HOST = tuple(kind for kind, row in RUNTIMES.items() if not row.on_cluster)


def get_runtime(kind: str) -> Runtime:
    row = RUNTIMES.get(kind)
    if row is None:
        raise OperationRefused(f"unknown runtime {kind!r}: use {' or '.join(KINDS)}")
    module, _, name = row.implementation.partition(":")
    try:
        return getattr(importlib.import_module(module), name)()
    except ImportError:
        raise OperationRefused(f"the {row.title} runtime is not available in this build") from None


def on_cluster(deployment) -> bool:
    """Whether the deployment's pods run on a Kubernetes cluster (False for none)."""
    row = RUNTIMES.get(getattr(deployment, "runtime", ""))
    return row is not None and row.on_cluster


def on_this_host(deployment) -> bool:
    """Whether the deployment runs as processes on this host (False for none)."""
    return getattr(deployment, "runtime", "") in ON_THIS_HOST


def target_for(deployment, runtime: str | None = None) -> Target:
    return Target(kind=runtime or deployment.runtime, cluster=deployment.cluster_name, namespace=deployment.namespace)
