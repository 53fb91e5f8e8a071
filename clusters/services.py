"""Every write about clusters: register, edit, remove, check, and the Hugging Face token
Secret. Views, the API, tasks and the admin call these; nothing else saves a Cluster."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import ProtectedError
from django.utils import timezone

from audit.services import audit_record
from core.errors import Refused, RuntimeFailure
from jobs.dispatch import enqueue

from . import kubernetes
from .gpus import GpuSummary
from .models import Cluster

if TYPE_CHECKING:
    from accounts.roles import Actor

log = logging.getLogger(__name__)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# The Secret Dynamo's examples and our templates reference, and its key (names, not secrets).
HF_TOKEN_SECRET = "hf-token-secret"
HF_TOKEN_KEY = "HF_TOKEN"
EDITABLE = ("name", "description", "in_cluster", "kubeconfig", "context", "namespaces")


class ClusterError(Refused, ValueError):
    """A cluster change that cannot be made, with the reason for the user (HTTP 400)."""

    status = 400


class ClusterConflict(ClusterError):
    """A valid request that clashes with the cluster as registered (HTTP 409): a partial update
    against stored settings, a namespace the cluster does not allow."""

    status = 409


def clean_namespaces(value) -> list[str]:
    """A list of namespaces from a list or a comma/space separated string; each a DNS label."""
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value or [])
    out: list[str] = []
    for item in items:
        item = str(item).strip()
        if len(item) > 63 or not DNS_LABEL.match(item):
            raise ClusterError(f"{item!r} is not a valid namespace name (lower-case letters, digits and '-')")
        if item not in out:
            out.append(item)
    return out


def _in_use(cluster: Cluster):
    """The graphs deployed on the cluster (Deployment.cluster points here)."""
    return cluster.deployments.in_use()


def _validate(cluster: Cluster) -> None:
    if not cluster.name or len(cluster.name) > 63 or not DNS_LABEL.match(cluster.name):
        raise ClusterError(f"{cluster.name!r} is not a valid cluster name (lower-case letters, digits and '-')")
    if cluster.in_cluster and (cluster.kubeconfig or cluster.context):
        raise ClusterError("choose the in-cluster service account or a kubeconfig, not both")
    if Cluster.objects.filter(name=cluster.name).exclude(pk=cluster.pk).exists():
        raise ClusterConflict(f"a cluster named {cluster.name} is already registered")


def _snapshot(cluster: Cluster) -> dict:
    return {"name": cluster.name, "in_cluster": cluster.in_cluster, "kubeconfig": cluster.kubeconfig,
            "context": cluster.context, "namespaces": list(cluster.namespaces or []),
            "description": cluster.description}


@transaction.atomic
def cluster_create(*, name: str, namespaces, description: str = "", in_cluster: bool = False,
                   kubeconfig: str = "", context: str = "", user: Actor = None, via: str = "ui") -> Cluster:
    cluster = Cluster(name=name, description=description, in_cluster=in_cluster, kubeconfig=kubeconfig.strip(),
                      context=context.strip(), namespaces=clean_namespaces(namespaces))
    _validate(cluster)
    cluster.save()
    audit_record(actor=user, via=via, action="cluster.create", target_type="cluster", target=cluster.name,
                 after=_snapshot(cluster))
    cluster_check_later(cluster)
    return cluster


@transaction.atomic
def cluster_update(*, cluster: Cluster, user: Actor = None, via: str = "ui", **changes) -> Cluster:
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    before = _snapshot(cluster)
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise ClusterError(f"cannot change {', '.join(sorted(unknown))}")
    if "namespaces" in changes:
        changes["namespaces"] = clean_namespaces(changes["namespaces"])
    used = _in_use(cluster)
    if changes.get("name", cluster.name) != cluster.name and used.exists():
        raise ClusterConflict(f"graphs are deployed on {cluster.name}: delete them before renaming it")
    if "namespaces" in changes:
        dropped = set(used.values_list("namespace", flat=True)) - set(changes["namespaces"])
        if dropped:
            raise ClusterConflict(f"graphs are deployed in {', '.join(sorted(dropped))}: keep that namespace allowed")
    stored = {key: getattr(cluster, key) for key in ("in_cluster", "kubeconfig", "context")}
    for key, value in changes.items():
        setattr(cluster, key, value.strip() if key in ("kubeconfig", "context") else value)
    if cluster.in_cluster and (cluster.kubeconfig or cluster.context) and not (
            changes.get("in_cluster") and (changes.get("kubeconfig") or changes.get("context"))):
        # The request alone is valid; it clashes with what the cluster has stored (a partial
        # update): a conflict with the current state, which the schema cannot state.
        kept = "a kubeconfig" if stored["kubeconfig"] or stored["context"] else "the in-cluster service account"
        raise ClusterConflict(f"{cluster.name} is registered with {kept}: send in_cluster and an empty "
                              "kubeconfig and context together to switch (one or the other, not both)")
    _validate(cluster)
    cluster.save()
    audit_record(actor=user, via=via, action="cluster.update", target_type="cluster", target=cluster.name,
                 before=before, after=_snapshot(cluster))
    cluster_check_later(cluster)
    return cluster


@transaction.atomic
def cluster_delete(*, cluster: Cluster, user: Actor = None, via: str = "ui") -> None:
    names = list(_in_use(cluster).values_list("graph__name", flat=True))
    if names:
        raise ClusterConflict(f"graphs are deployed on {cluster.name} ({', '.join(names)}): delete them first")
    audit_record(actor=user, via=via, action="cluster.delete", target_type="cluster", target=cluster.name,
                 before=_snapshot(cluster))
    cluster.deployments.update(cluster=None)  # graphs deleted there let go of it
    try:
        cluster.delete()
    except ProtectedError:  # a graph was deployed there meanwhile
        raise ClusterConflict(f"graphs are deployed on {cluster.name}: delete them first") from None


def cluster_check_later(cluster: Cluster) -> None:
    """Check the cluster in the background (a task), once the current transaction commits."""
    enqueue("clusters.tasks.cluster_check", cluster.pk)


def cluster_check(*, cluster: Cluster) -> Cluster:
    """Ask the cluster how it is (server version, Dynamo CRD versions, GPUs) and record it.
    Called by the periodic task: never by a page."""
    now = timezone.now()
    try:
        health = kubernetes.probe(cluster)
    except RuntimeFailure as exc:
        Cluster.objects.filter(pk=cluster.pk).update(reachable=False, error=str(exc)[:2000], checked_at=now)
    else:
        fields = {"reachable": True, "error": "", "checked_at": now, "server_version": health.server_version,
                  "dgd_versions": health.dgd_versions, "dgdsa_versions": health.dgdsa_versions}
        if health.gpus is not None:
            fields.update(gpu_allocatable=health.gpus.allocatable, gpu_free=health.gpus.free)
        Cluster.objects.filter(pk=cluster.pk).update(**fields)
    cluster.refresh_from_db()
    return cluster


def cluster_watched(*, cluster: Cluster, gpus: GpuSummary | None, error: str = "") -> None:
    """The watchers' report: the cluster answered (``error``: what part of it did not)."""
    fields = {"reachable": True, "watched_at": timezone.now(), "error": error[:2000]}
    if gpus is not None:
        fields.update(gpu_allocatable=gpus.allocatable, gpu_free=gpus.free)
    Cluster.objects.filter(pk=cluster.pk).update(**fields)


def cluster_unreachable(*, cluster: Cluster, error: str) -> None:
    """The watchers' report: the cluster did not answer."""
    Cluster.objects.filter(pk=cluster.pk).update(reachable=False, error=error[:2000])


def hf_token_secret_put(*, cluster: Cluster, namespace: str, value: str, secret_name: str = HF_TOKEN_SECRET,
                        key: str = HF_TOKEN_KEY, user: Actor = None, via: str = "ui") -> bool:
    """Create or replace the Hugging Face token in Secret ``secret_name`` of ``namespace``
    (other keys of that Secret stay). True when the Secret was created. The value goes to the
    cluster only: it is not stored, returned or logged here."""
    if not cluster.allows(namespace):
        raise ClusterConflict(f"namespace {namespace!r} is not allowed on cluster {cluster.name}")
    if len(secret_name) > 253 or not DNS_SUBDOMAIN.match(secret_name):
        raise ClusterError(f"{secret_name!r} is not a valid Secret name")
    if len(key) > 253 or not SECRET_KEY.match(key):
        raise ClusterError(f"{key!r} is not a valid Secret key (letters, digits, '-', '_' and '.')")
    token = (value or "").strip()
    if not token:
        raise ClusterError("the token is empty")
    created = kubernetes.put_secret_key(cluster, namespace=namespace, name=secret_name, key=key, value=token)
    # The record names the Secret and key, never the value.
    audit_record(actor=user, via=via, action="secret.put", target_type="secret",
                 target=f"{cluster.name}/{namespace}/{secret_name}",
                 after={"key": key, "created": created, "value": "[redacted]"})
    log.info("%s Secret %s/%s (key %s) on cluster %s for %s", "created" if created else "updated", namespace,
             secret_name, key, cluster.name, getattr(user, "username", None) or "a script")
    return created
