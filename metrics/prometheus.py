"""The Prometheus HTTP API, as the control plane uses it. The only module that imports
prometheus-api-client.

Three promises to the pages that call it:

* **Short.** Every call gives up after PROMETHEUS_TIMEOUT seconds (connect: one second at
  most), with no retries: the client's default retries a failed connection three times with
  back-off, several seconds in which a page would hang. Prometheus is also told the timeout, so
  it stops evaluating a query nobody waits for.
* **Shared.** Results are cached briefly in the Django cache under the query and its aligned
  time range, and one request fetches while concurrent requests for the same key wait for its
  answer: twenty viewers of one chart cost one query.
* **Quiet when down.** After three failures in a row the server is not asked again for 30
  seconds; callers get PrometheusUnreachable at once, with the reason, and say so on the page.

Errors come out as PrometheusUnreachable (no answer) or PrometheusQueryFailed (an answer that
is an error), both PrometheusError, each carrying a message fit to show as it is.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import requests
from django.conf import settings
from django.core.cache import cache
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from telemetry import instruments

T = TypeVar("T")
BREAKER_FAILURES = 3
BREAKER_OPEN_SECONDS = 30
LABEL_VALUES_TTL = 600  # bucket bounds change only when a frontend restarts with new settings
_clients: dict[tuple[str, tuple[float, float]], PrometheusConnect] = {}
_clients_lock = threading.Lock()


class PrometheusError(Exception):
    def __init__(self, message: str, *, url: str):
        super().__init__(message)
        self.message = message
        self.url = url


class PrometheusUnreachable(PrometheusError):
    """No answer: refused, timed out, or the circuit is open after repeated failures."""


class PrometheusQueryFailed(PrometheusError):
    """Prometheus answered with an error (a bad query, overload, not ready yet)."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float | None  # None for NaN (histogram_quantile over a window without traffic)


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: list[tuple[int, float | None]]  # (unix seconds, value)


def _number(text: str) -> float | None:
    value = float(text)
    return None if math.isnan(value) or math.isinf(value) else value


def _client(url: str, timeouts: tuple[float, float]) -> PrometheusConnect:
    with _clients_lock:
        client = _clients.get((url, timeouts))
        if client is None:
            # POST: the overview's label regexes grow with the number of graphs; a URL would not.
            client = PrometheusConnect(url=url, retry=Retry(total=0, connect=0, read=0, redirect=0, status=0),
                                       method="POST", timeout=timeouts)
            _clients[(url, timeouts)] = client
        return client


def _timeouts() -> tuple[float, float]:
    read = float(settings.PROMETHEUS_TIMEOUT)
    return min(1.0, read), read


def _error_text(exc: PrometheusApiClientException) -> str:
    text = str(exc)
    found = re.search(r'"error":"((?:[^"\\]|\\.)*)"', text)
    status = re.search(r"HTTP Status Code (\d+)", text)
    detail = found.group(1).replace('\\"', '"') if found else text[:300]
    return f"HTTP {status.group(1)}: {detail}" if status else detail


def _call(url: str, fn: Callable[[PrometheusConnect, tuple[float, float], dict], T]) -> T:
    """Run one API call, turning every failure into our own error types."""
    _check_breaker(url)
    timeouts = _timeouts()
    params = {"timeout": f"{timeouts[1]:g}s"}
    started = time.perf_counter()
    error = None
    try:
        result = fn(_client(url, timeouts), timeouts, params)
    except requests.Timeout as exc:
        error = "unreachable"
        raise _failed(url, f"Prometheus is unreachable at {url}: no answer within {timeouts[1]:g} s") from exc
    except requests.ConnectionError as exc:
        error = "unreachable"
        raise _failed(url, f"Prometheus is unreachable at {url}: {_connection_reason(exc)}") from exc
    except requests.RequestException as exc:
        error = "unreachable"
        raise _failed(url, f"Prometheus is unreachable at {url}: {exc.__class__.__name__}") from exc
    except PrometheusApiClientException as exc:
        error = "refused"
        _record_success(url)  # it answered: the server is up, the query is the problem
        raise PrometheusQueryFailed(f"Prometheus at {url} refused the query: {_error_text(exc)}", url=url) from exc
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        error = "unreadable"
        _record_success(url)
        raise PrometheusQueryFailed(f"Prometheus at {url} sent an answer we cannot read: {exc}", url=url) from exc
    finally:
        instruments.observe_prometheus_query(time.perf_counter() - started, error)
    _record_success(url)
    return result


def _connection_reason(exc: requests.ConnectionError) -> str:
    text = str(exc)
    if "Connection refused" in text:
        return "connection refused (is it running?)"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    return "connection failed"


# ------------------------------------------------------------------ circuit breaker


def _breaker_key(url: str) -> str:
    return "metrics:prometheus:breaker:" + hashlib.sha1(url.encode(), usedforsecurity=False).hexdigest()


def _check_breaker(url: str) -> None:
    state = cache.get(_breaker_key(url))
    if state and state.get("open_until", 0) > time.time():
        wait = math.ceil(state["open_until"] - time.time())
        raise PrometheusUnreachable(f"{state['message']}. Trying again in {wait} s.", url=url)


def _failed(url: str, message: str) -> PrometheusUnreachable:
    key = _breaker_key(url)
    state = cache.get(key) or {"failures": 0}
    state["failures"] += 1
    state["message"] = message
    if state["failures"] >= BREAKER_FAILURES:
        state["open_until"] = time.time() + BREAKER_OPEN_SECONDS
    cache.set(key, state, BREAKER_OPEN_SECONDS * 10)
    return PrometheusUnreachable(message, url=url)


def _record_success(url: str) -> None:
    key = _breaker_key(url)
    if cache.get(key) is not None:
        cache.delete(key)


# ------------------------------------------------------------------ cache


def _cached(key_parts: list, ttl: float, fetch: Callable[[], T], *, url: str) -> T:
    key = "metrics:prometheus:" + hashlib.sha1(json.dumps(key_parts).encode(), usedforsecurity=False).hexdigest()
    hit = cache.get(key)
    if hit is not None:
        return hit
    _check_breaker(url)
    lock = key + ":lock"
    wait = settings.PROMETHEUS_TIMEOUT + 1
    if not cache.add(lock, 1, timeout=math.ceil(wait)):
        # Someone is asking Prometheus the same question right now: wait for their answer.
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and cache.get(lock) is not None:
            time.sleep(0.01)
            hit = cache.get(key)
            if hit is not None:
                return hit
        hit = cache.get(key)
        if hit is not None:
            return hit
        _check_breaker(url)  # their attempt failed: do not try again if that opened the circuit
    else:
        hit = cache.get(key)  # answered between our first look and taking the lock
        if hit is not None:
            cache.delete(lock)
            return hit
    try:
        value = fetch()
        cache.set(key, value, ttl)
        return value
    finally:
        cache.delete(lock)


def _ttl() -> float:
    return float(settings.PROMETHEUS_CACHE_SECONDS)


# ------------------------------------------------------------------ the calls


def query(promql: str, *, url: str, at: float) -> list[Sample]:
    """An instant query evaluated at ``at`` (unix seconds)."""

    def samples(client: PrometheusConnect, timeouts, params) -> list[Sample]:
        raw = client.custom_query(promql, params={**params, "time": f"{at:.3f}"}, timeout=timeouts)
        return [Sample(dict(r["metric"]), _number(r["value"][1])) for r in raw]

    def fetch() -> list[Sample]:
        return _call(url, samples)  # parsed inside: an answer of the wrong shape is a PrometheusQueryFailed

    return _cached(["query", url, promql, round(at, 3)], _ttl(), fetch, url=url)


def query_range(promql: str, *, url: str, start: int, end: int, step: int) -> list[Series]:
    """A range query; ``start`` and ``end`` should be step-aligned so that caches are shared."""

    def series(client: PrometheusConnect, timeouts, params) -> list[Series]:
        raw = client.custom_query_range(
            promql, start_time=datetime.fromtimestamp(start, tz=UTC), end_time=datetime.fromtimestamp(end, tz=UTC),
            step=str(step), params=params, timeout=timeouts)
        return [Series(dict(r["metric"]), [(round(float(ts)), _number(v)) for ts, v in r["values"]]) for r in raw]

    def fetch() -> list[Series]:
        return _call(url, series)

    return _cached(["range", url, promql, start, end, step], _ttl(), fetch, url=url)


def label_values(label: str, *, url: str, match: str) -> list[str]:
    """The values a label takes on the series ``match`` selects (for example bucket bounds)."""

    def values(client: PrometheusConnect, timeouts, params) -> list[str]:
        found = client.get_label_values(label, params={"match[]": match})
        if not isinstance(found, list) or not all(isinstance(v, str) for v in found):
            raise ValueError(f"label values of {label!r} are not a list of strings")
        return found

    def fetch() -> list[str]:
        return list(_call(url, values))

    return _cached(["label_values", url, label, match], LABEL_VALUES_TTL, fetch, url=url)


def breaker_reset(url: str) -> None:
    """Forget recent failures (tests, and the runprometheus command once its server is up)."""
    cache.delete(_breaker_key(url))
