"""The routable workers of a Kubernetes graph over the last ten minutes, per pool, from its
frontend's own per-worker series in Prometheus (promql.routed_workers): the chart the graph page
shows beside a rollout by generation. The local runtime asks its frontends directly
(graphs/runtimes/local/rolling.py) and keeps the same change points in the deployment's
runtime_info; graphs.status_view draws both the same way.

A pod can be Ready before the frontend routes to it (ai-dynamo/dynamo#13622): this chart is
what the frontend does, not what the pods say. A worker counts once a request went to it within
the rate window, or while the frontend's KV router holds it; an idle pool without KV routing
reads 0 here, which the page says."""

from __future__ import annotations

import time

from graphs.models import Deployment
from graphs.runtimes.registry import on_cluster
from graphs.status_cache import TIMELINE_SECONDS

from . import promql
from .charts import resolution, source_for
from .prometheus import PrometheusError, query_range

HOW = ("Workers the frontend routed a request to within {window} s, or that its KV router holds, from the "
       "frontend's own series in Prometheus, last {minutes} minutes. An idle pool without KV routing reads 0.")


def pool_names(deployment: Deployment) -> dict[str, str]:
    """worker_type -> the pool it stands for, where the graph has exactly one such pool; an
    aggregated worker reports itself as "decode"."""
    spec = deployment.revision.graph_spec if deployment.revision_id else None
    if spec is None:
        return {}
    out = {}
    for worker_type, roles in (("prefill", ("prefill",)), ("decode", ("decode", "worker"))):
        pools = [s.name for s in spec.services if s.role in roles]
        if len(pools) == 1:
            out[worker_type] = pools[0]
    return out


def kubernetes_timeline(deployment: Deployment, *, now: float | None = None) -> dict | None:
    """{"points": [[t, {pool: routable}], ...] change points, "note": how it is counted, or
    "error": why there are none} for a deployed Kubernetes graph; None for any other."""
    if not on_cluster(deployment) or not deployment.active:
        return None
    source = source_for(deployment.graph, deployment)
    if not source.url:
        return None
    res = resolution(TIMELINE_SECONDS, source.scope.scrape_interval, time.time() if now is None else now)
    try:
        series = query_range(promql.routed_workers(source.scope, res.rate_window), url=source.url,
                             start=res.start, end=res.end, step=res.step)
    except PrometheusError as exc:
        return {"points": [], "error": exc.message}
    names = pool_names(deployment)
    values: dict[str, dict[int, int]] = {}
    for s in series:
        kind = s.labels.get("worker_type") or "worker"
        values[names.get(kind, kind)] = {t: int(v) for t, v in s.points if v is not None}
    points: list = []
    if values:
        for t in res.timestamps:
            counts = {pool: by_time.get(t, 0) for pool, by_time in values.items()}
            if not points or points[-1][1] != counts:
                points.append([t, counts])
    note = HOW.format(window=res.rate_window, minutes=TIMELINE_SECONDS // 60)
    return {"points": points, "note": note,
            "error": "" if points else f"Prometheus at {source.url} has no per-worker series of this graph's "
                                       "frontend in the last ten minutes: nothing was routed, or its frontend "
                                       "is not scraped."}
