"""Reads other apps use: the targets a graph may be applied to, and a cluster by name or id.
Database only: never a cluster."""

from __future__ import annotations

from dataclasses import dataclass

from .models import Cluster


@dataclass(frozen=True)
class TargetChoice:
    cluster: str
    namespace: str
    reachable: bool | None

    @property
    def value(self) -> str:
        """The form value of the apply target select: ``kubernetes:<cluster>/<namespace>``."""
        return f"kubernetes:{self.cluster}/{self.namespace}"


def cluster_targets() -> list[TargetChoice]:
    """Every registered cluster, once per namespace it allows."""
    rows = Cluster.objects.order_by("name").values_list("name", "namespaces", "reachable")  # no model instances
    return [TargetChoice(name, ns, reachable) for name, namespaces, reachable in rows for ns in namespaces or []]


def parse_target(value: str) -> tuple[str, str, str]:
    """``local`` → ("local", "", ""); ``kubernetes:<cluster>/<namespace>`` → its three parts."""
    runtime, _, rest = (value or "local").partition(":")
    cluster, _, namespace = rest.partition("/")
    return runtime, cluster, namespace


def check_target(cluster: str, namespace: str) -> Cluster:
    """The cluster, when graphs may use ``namespace`` there. Raises ValueError saying why not."""
    if not cluster or not namespace:
        raise ValueError("the Kubernetes runtime needs a cluster and a namespace")
    found = Cluster.objects.filter(name=cluster).first()
    if found is None:
        raise ValueError(f"no cluster named {cluster!r} is registered")
    if not found.allows(namespace):
        allowed = ", ".join(found.namespaces or []) or "none yet"
        raise ValueError(f"namespace {namespace!r} is not allowed on cluster {cluster} (allowed: {allowed})")
    return found


def cluster_named(name: str) -> Cluster | None:
    return Cluster.objects.filter(name=name).first() if name else None


def cluster_found(pk: int) -> Cluster | None:
    return Cluster.objects.filter(pk=pk).first()


def cluster_stamps() -> dict[int, object]:
    """Every registered cluster's id and when it was last edited (the watchers restart on an edit)."""
    return dict(Cluster.objects.values_list("pk", "updated_at"))
