"""Celery tasks: ids in, one service call."""

from celery import shared_task

from . import services
from .models import Cluster


@shared_task
def clusters_check() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE): check every registered cluster."""
    results = {}
    for cluster in Cluster.objects.all():
        results[cluster.name] = services.cluster_check(cluster=cluster).reachable
    return results


@shared_task
def cluster_check(cluster_id: int) -> bool | None:
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    return services.cluster_check(cluster=cluster).reachable if cluster else None
