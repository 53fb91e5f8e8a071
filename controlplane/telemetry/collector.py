"""What a scrape reads from the database and the broker, so that every web process (and
pod) answers the same: operations by kind and state and how long finished ones took, the
Celery queue's depth, how long ago each cluster's watchers last heard from it, and the age of
the oldest status-cache row per runtime. Each part that fails is left out of the scrape and
counted in ``controlplane_scrape_errors`` (a database or broker that is down must not turn
/metrics into a 500)."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Min, Q, Sum
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

log = logging.getLogger(__name__)

OPERATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
QUEUE_TIMEOUT = 2.5  # seconds: a broker that does not answer is reported as an error, not waited for


def _operations():
    from graphs.models import Operation, OperationKind, OperationState

    counts = GaugeMetricFamily("controlplane_operations", "Operations by kind and state (rows in the database)",
                               labels=["kind", "state"])
    seen = {(row["kind"], row["state"]): row["n"]
            for row in Operation.objects.order_by().values("kind", "state").annotate(n=Count("id"))}
    for kind in OperationKind.values:
        for state in OperationState.values:
            counts.add_metric([kind, state], seen.get((kind, state), 0))
    yield counts

    duration = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    aggregates = {f"le_{b}": Count("id", filter=Q(took__lte=timedelta(seconds=b))) for b in OPERATION_BUCKETS}
    rows = (Operation.objects.order_by().filter(started_at__isnull=False, finished_at__isnull=False)
            .annotate(took=duration).values("kind").annotate(n=Count("id"), total=Sum("took"), **aggregates))
    family = HistogramMetricFamily("controlplane_operation_duration_seconds",
                                   "How long finished operations ran (started to finished), by kind",
                                   labels=["kind"])
    for row in rows:
        buckets = [(str(float(b)), row[f"le_{b}"]) for b in OPERATION_BUCKETS] + [("+Inf", row["n"])]
        total = row["total"]
        family.add_metric([row["kind"]], buckets, total.total_seconds() if total else 0.0)
    yield family


def _queue():
    from controlplane.celery import app

    family = GaugeMetricFamily("controlplane_queue_depth", "Tasks waiting in the Celery broker's queue",
                               labels=["queue"])
    queue = app.conf.task_default_queue or "celery"
    with app.connection_for_read(settings.CELERY_BROKER_URL) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=QUEUE_TIMEOUT)
        try:
            depth = conn.default_channel.queue_declare(queue=queue, passive=True).message_count
        except conn.channel_errors:  # no such queue yet (Redis: an empty one): nothing waits
            depth = 0
    family.add_metric([queue], depth)
    yield family


def _clusters(now):
    from clusters.models import Cluster

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


def _status_cache(now):
    from graphs.models import Deployment

    age = GaugeMetricFamily("controlplane_status_cache_age_seconds",
                            "Age of the oldest status-cache row of a deployed graph, per runtime", labels=["runtime"])
    graphs = GaugeMetricFamily("controlplane_deployed_graphs", "Deployed graphs, per runtime", labels=["runtime"])
    rows = (Deployment.objects.order_by().filter(active=True).values("runtime")
            .annotate(oldest=Min("observed_at"), newest=Max("observed_at"), n=Count("id")))
    for row in rows:
        graphs.add_metric([row["runtime"]], row["n"])
        if row["oldest"] is not None:
            age.add_metric([row["runtime"]], max(0.0, (now - row["oldest"]).total_seconds()))
    yield age
    yield graphs


class StateCollector:
    """A prometheus-client collector over the database and the broker (read at scrape time)."""

    def collect(self):
        from django.db import close_old_connections

        close_old_connections()
        now = timezone.now()
        errors = GaugeMetricFamily("controlplane_scrape_errors",
                                   "1 for a part of this scrape that could not be read", labels=["part"])
        parts = {"operations": _operations, "queue": _queue, "clusters": lambda: _clusters(now),
                 "status_cache": lambda: _status_cache(now)}
        started = time.perf_counter()
        database_down = False
        for name, part in parts.items():
            uses_database = name != "queue"
            if uses_database and database_down:  # do not wait for a down database three times
                errors.add_metric([name], 1)
                continue
            try:
                families = list(part())
            except Exception as exc:  # a down database or broker: say so, keep the rest
                log.warning("metrics: %s could not be read: %s", name, exc)
                errors.add_metric([name], 1)
                database_down = database_down or (uses_database and isinstance(exc, DatabaseError))
                continue
            errors.add_metric([name], 0)
            yield from families
        yield errors
        took = GaugeMetricFamily("controlplane_scrape_duration_seconds", "Time this scrape spent reading state")
        took.add_metric([], time.perf_counter() - started)
        yield took
