"""What the control plane's processes record as they work.

prometheus-client in multiprocess mode: its value files live in PROMETHEUS_MULTIPROC_DIR
(METRICS_MULTIPROC_DIR in the settings, under the var folder), which must be set before
prometheus_client is first imported: controlplane/settings.py sets it, so every process that
loads the settings first (manage.py, uvicorn through controlplane.asgi, Celery) records here.
Several web processes (manage.py web's uvicorn processes) each write their own files; a
scrape of any of them sums them (exposition.py).

The playground's per-request observations (its added latency, upstream TTFT, requests, streams
in flight) are kept in this process and written by a small thread at most FLUSH_SECONDS after
the first of them, and at exit: on the streaming path a request's seven writes to the value
files (a lock, a pid check and an mmap write each, with the cold caches of a wake-up between
streamed chunks) cost more than the rest of its bookkeeping, and written together they cost a
fraction of that. Prometheus scrapes every few seconds; a value is at most FLUSH_SECONDS late."""

from __future__ import annotations

import atexit
import logging
import os

from django.conf import settings

os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(settings.METRICS_MULTIPROC_DIR))  # settings did already

from prometheus_client import Counter, Gauge, Histogram, values

from .later import Later

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
AUTHORIZATIONS = Counter("controlplane_gateway_authorizations_total",
                         "Answers to gateways' authorization requests (nginx auth_request, Envoy ext_authz), by API "
                         "key (its non-secret id; unknown for a missing or refused key) and outcome",
                         ["key", "outcome"])
OUTCOMES = {200: "allow", 401: "unauthenticated", 403: "forbidden", 404: "not_found", 429: "rate_limited"}
PROMETHEUS_QUERY = Histogram(
    "controlplane_prometheus_query_duration_seconds",
    "Queries the control plane sent to Prometheus (cache misses), by outcome",
    ["outcome"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
PROMETHEUS_ERRORS = Counter("controlplane_prometheus_query_errors_total",
                            "Failed Prometheus queries, by reason (unreachable, refused, unreadable)", ["reason"])


FLUSH_SECONDS = 0.25
_later = Later("telemetry-flush", FLUSH_SECONDS, lambda: flush(), "writing the playground's metrics failed")

_added: list[float] = []  # observations not yet written, in seconds
_ttft: list[float] = []
_requests: dict[tuple[str, str], int] = {}  # (route, code) -> requests not yet counted
_streams = [0]  # streams opened minus closed, not yet written
_authorizations: dict[tuple[str, str], int] = {}  # (key, outcome) -> answers not yet counted


def observe_added(seconds: float) -> None:
    with _later.lock:
        _added.append(seconds)
    _later.due()


def observe_upstream_ttft(seconds: float) -> None:
    with _later.lock:
        _ttft.append(seconds)
    _later.due()


def stream_opened() -> None:
    with _later.lock:
        _streams[0] += 1
    _later.due()


def stream_closed() -> None:
    with _later.lock:
        _streams[0] -= 1
    _later.due()


def count_request(route: str, status: int) -> None:
    key = (route, str(status))
    with _later.lock:
        _requests[key] = _requests.get(key, 0) + 1
    _later.due()


def count_authorization(key: str, status: int) -> None:
    outcome = (key, OUTCOMES.get(status, "unavailable" if status >= 500 else "refused"))
    with _later.lock:
        _authorizations[outcome] = _authorizations.get(outcome, 0) + 1
    _later.due()


def flush() -> None:
    """Write what this process has recorded and not yet written to its value files."""
    with _later.lock:
        added, ttft, requests, streams = _added[:], _ttft[:], dict(_requests), _streams[0]
        authorizations = dict(_authorizations)
        _authorizations.clear()
        _added.clear()
        _ttft.clear()
        _requests.clear()
        _streams[0] = 0
    for value in added:
        PLAYGROUND_ADDED.observe(value)
    for value in ttft:
        UPSTREAM_TTFT.observe(value)
    for (route, code), n in requests.items():
        REQUESTS.labels(route, code).inc(n)
    for (key, outcome), n in authorizations.items():
        AUTHORIZATIONS.labels(key, outcome).inc(n)
    if added or ttft or requests or streams:
        STREAMS.inc(streams)  # even by 0: the gauge exists once this process has served a request


def _forget_in_child() -> None:
    """A forked child starts with nothing pending (its parent writes what it recorded)."""
    _authorizations.clear()
    _added.clear()
    _ttft.clear()
    _requests.clear()
    _streams[0] = 0


atexit.register(flush)
os.register_at_fork(after_in_child=_forget_in_child)


def observe_prometheus_query(seconds: float, error: str | None) -> None:
    PROMETHEUS_QUERY.labels("error" if error else "ok").observe(seconds)
    if error:
        PROMETHEUS_ERRORS.labels(error).inc()
