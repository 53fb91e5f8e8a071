"""What a scrape of /metrics reads from the registered clusters: how long ago each cluster's
watchers last heard from it, and whether it was reachable (registered in apps.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric

from .models import Cluster


def clusters(now: datetime) -> Iterable[Metric]:
    lag = GaugeMetricFamily("controlplane_cluster_watch_lag_seconds",
                            "Seconds since a cluster's watchers last heard from it", labels=["cluster"])
    reachable = GaugeMetricFamily("controlplane_cluster_reachable",
                                  "1 if the last check or watch reached the cluster, 0 if not", labels=["cluster"])
    for name, watched_at, ok in Cluster.objects.values_list("name", "watched_at", "reachable"):
        if watched_at is not None:
            lag.add_metric([name], max(0.0, (now - watched_at).total_seconds()))
        if ok is not None:
            reachable.add_metric([name], 1 if ok else 0)
    yield lag
    yield reachable
