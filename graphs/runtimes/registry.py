"""Which runtime serves a deployment."""

from __future__ import annotations

from core.errors import OperationRefused

from .base import Runtime, Target


def get_runtime(kind: str) -> Runtime:
    if kind == "local":
        from .local.runtime import LocalRuntime

        return LocalRuntime()
    if kind == "kubernetes":
        try:
            from .kubernetes.runtime import KubernetesRuntime
        except ImportError:
            raise OperationRefused("the Kubernetes runtime is not available in this build") from None
        return KubernetesRuntime()
    raise OperationRefused(f"unknown runtime {kind!r}: use local or kubernetes")


def target_for(deployment, runtime: str | None = None) -> Target:
    return Target(kind=runtime or deployment.runtime, cluster=deployment.cluster_name, namespace=deployment.namespace)
