"""What the control plane's processes record as they work.

prometheus-client in multiprocess mode: its value files live in PROMETHEUS_MULTIPROC_DIR
(METRICS_MULTIPROC_DIR in the settings, under the var folder), which must be set before
prometheus_client is first imported: controlplane/settings.py sets it, so every process that
loads the settings first (manage.py, uvicorn through controlplane.asgi, Celery) records here.
Several web workers (controlplane.serve --workers) each write their own files; a scrape of any of them
sums them (exposition.py)."""

from __future__ import annotations

import logging
import os

from django.conf import settings

os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(settings.METRICS_MULTIPROC_DIR))  # settings did already

from prometheus_client import Counter, Gauge, Histogram, values

if values.ValueClass.__name__ != "MmapedValue":  # prometheus_client was imported before the settings
    logging.getLogger(__name__).error(
        "prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set: this process's metrics "
        "will not appear on /metrics")

# The proxy's own time on a request: before the upstream call, and after its headers.
PLAYGROUND_ADDED = Histogram(
    "controlplane_playground_added_latency_seconds",
    "Time the playground's OpenAI endpoint adds to a request before its first byte (its own work, "
    "the wait for the frontend excluded)",
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0))
UPSTREAM_TTFT = Histogram(
    "controlplane_playground_upstream_ttft_seconds",
    "Time from sending a streamed request to a graph's frontend to its first body chunk",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
STREAMS = Gauge("controlplane_playground_streams_in_flight", "Streams being relayed now",
                multiprocess_mode="livesum")
REQUESTS = Counter("controlplane_playground_requests_total",
                   "Requests to the playground's OpenAI endpoint, by route and HTTP status", ["route", "code"])
PROMETHEUS_QUERY = Histogram(
    "controlplane_prometheus_query_duration_seconds",
    "Queries the control plane sent to Prometheus (cache misses), by outcome",
    ["outcome"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
PROMETHEUS_ERRORS = Counter("controlplane_prometheus_query_errors_total",
                            "Failed Prometheus queries, by reason (unreachable, refused, unreadable)", ["reason"])


def observe_added(seconds: float) -> None:
    PLAYGROUND_ADDED.observe(seconds)


def observe_upstream_ttft(seconds: float) -> None:
    UPSTREAM_TTFT.observe(seconds)


def stream_opened() -> None:
    STREAMS.inc()


def stream_closed() -> None:
    STREAMS.dec()


def count_request(route: str, status: int) -> None:
    REQUESTS.labels(route, str(status)).inc()


def observe_prometheus_query(seconds: float, error: str | None) -> None:
    PROMETHEUS_QUERY.labels("error" if error else "ok").observe(seconds)
    if error:
        PROMETHEUS_ERRORS.labels(error).inc()
