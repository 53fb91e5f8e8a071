"""What a scrape of /metrics reads from graphs' state: operations by kind and state, how long
finished ones took, and the age of the status cache per runtime (registered in apps.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Min, Q, Sum
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from .models import Deployment, Operation, OperationKind, OperationState

OPERATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)


def operations(now: datetime) -> Iterable[Metric]:
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


def status_cache(now: datetime) -> Iterable[Metric]:
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
