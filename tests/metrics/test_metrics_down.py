# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""A Prometheus that is stopped, or that accepts connections and never answers: every page and
API endpoint still answers, with one attempt at most (no retries, no query per series), and
says what is wrong in words. What the answers cost in seconds is bench/when_down.py's."""

from __future__ import annotations

import socket
import time

import pytest

from graphs.models import Deployment
from metrics import prometheus as prom
from metrics.prometheus import PrometheusUnreachable
from tests import factories
from tests.metrics_fixtures import free_port, fresh_cache  # noqa: F401


@pytest.fixture
def graph(db):
    graph = factories.graph("down", template="vllm-disagg")
    Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready")
    return graph


@pytest.fixture
def stopped(settings, fresh_cache):
    """Nothing listens on this port."""
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    return settings.PROMETHEUS_URL


@pytest.fixture
def silent(settings, fresh_cache):
    """A socket that accepts connections (the kernel's backlog) and never sends a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings.PROMETHEUS_TIMEOUT = 0.5
    yield settings.PROMETHEUS_URL
    sock.close()


@pytest.fixture
def attempts(monkeypatch):
    """Counts the HTTP requests that reach the network (requests' adapter, which the Prometheus
    client sends through), and lets each through."""
    from requests.adapters import HTTPAdapter

    sent = []
    real = HTTPAdapter.send

    def send(self, request, *args, **kwargs):
        sent.append(request.url)
        return real(self, request, *args, **kwargs)

    monkeypatch.setattr(HTTPAdapter, "send", send)

    def counted(fn):
        before = len(sent)
        result = fn()
        return result, len(sent) - before

    return counted


def test_with_prometheus_stopped_the_chart_says_so_after_one_attempt(graph, stopped, client_for, attempts):
    viewer = client_for("viewer")
    response, sent = attempts(lambda: viewer.get("/metrics/graphs/down/chart/?window=1h"))
    assert response.status_code == 200
    data = response.json()
    assert data["state"] == "unreachable"
    assert data["message"].startswith(f"Prometheus is unreachable at {stopped}: connection refused")
    assert data["summary"] is None and data["series"]["ttft_p90"] == []
    assert sent == 1


def test_with_prometheus_stopped_the_api_chart_and_summaries_say_so(graph, stopped, api_for):
    api = api_for("viewer")
    chart = api.get("/api/metrics/graphs/down/chart/")
    assert chart.status_code == 200 and chart.json()["state"] == "unreachable"
    summaries = api.get("/api/metrics/graphs/")
    assert summaries.status_code == 200
    (row,) = summaries.json()["results"]
    assert row["slo"] == "unknown" and stopped in row["error"]


def test_with_prometheus_stopped_the_overview_page_renders_with_the_reason(graph, stopped, client_for, attempts):
    viewer = client_for("viewer")
    response, sent = attempts(lambda: viewer.get("/metrics/", headers={"HX-Request": "true"}))
    assert response.status_code == 200
    body = response.content.decode()
    assert f"Prometheus is unreachable at {stopped}" in body
    assert 'data-graph="down"' in body and "unknown" in body
    assert sent == 1


def test_the_panel_never_asks_prometheus(graph, silent, client_for, attempts):
    viewer = client_for("viewer")
    response, sent = attempts(lambda: viewer.get("/metrics/graphs/down/panel/"))
    assert response.status_code == 200
    assert "data-metrics-panel" in response.content.decode()
    assert sent == 0


def test_a_silent_prometheus_costs_one_timeout_then_the_circuit_opens(graph, silent, client_for, attempts):
    viewer = client_for("viewer")
    for _ in range(prom.BREAKER_FAILURES):
        response, sent = attempts(lambda: viewer.get("/metrics/graphs/down/chart/?window=15m"))
        data = response.json()
        assert data["state"] == "unreachable"
        assert data["message"] == f"Prometheus is unreachable at {silent}: no answer within 0.5 s"
        assert sent == 1  # one query's timeout, not one per series
    response, sent = attempts(lambda: viewer.get("/metrics/graphs/down/chart/?window=15m"))
    assert response.json()["state"] == "unreachable"
    assert "Trying again in" in response.json()["message"]
    assert sent == 0  # the open circuit answers without asking


def test_the_circuit_closes_once_prometheus_answers_again(settings, fresh_cache):
    settings.PROMETHEUS_URL = url = f"http://127.0.0.1:{free_port()}"
    for _ in range(prom.BREAKER_FAILURES):
        with pytest.raises(PrometheusUnreachable):
            prom.query("up", url=url, at=time.time())
    with pytest.raises(PrometheusUnreachable, match="Trying again in"):
        prom.query("up", url=url, at=time.time())
    prom.breaker_reset(url)
    with pytest.raises(PrometheusUnreachable, match="connection refused"):
        prom.query("up", url=url, at=time.time())


def test_an_unknown_host_is_named(settings, fresh_cache):
    url = "http://prometheus.invalid:9090"
    with pytest.raises(PrometheusUnreachable, match=r"unreachable at http://prometheus\.invalid:9090: unknown host"):
        prom.query("up", url=url, at=time.time())


@pytest.fixture
def garbled(settings, fresh_cache):
    """A server that answers every Prometheus API call with 200 and JSON of the wrong shape."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            body = b'{"status":"success","data":{"resultType":"vector","result":[["x"]]}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{server.server_address[1]}"
    yield settings.PROMETHEUS_URL
    server.shutdown()


def test_a_prometheus_that_answers_nonsense_gives_an_error_state_not_a_500(graph, garbled, client_for):
    from metrics.services import objectives_set

    objectives_set(graph=graph, ttft_ms=200, itl_ms=10, gpu_hour_price=None)  # the SLO shares read label values
    viewer = client_for("viewer")
    chart = viewer.get("/metrics/graphs/down/chart/?window=15m")
    assert chart.status_code == 200
    assert chart.json()["state"] == "error" and "cannot read" in chart.json()["message"]
    overview = viewer.get("/metrics/", headers={"HX-Request": "true"})
    assert overview.status_code == 200 and 'data-graph="down"' in overview.content.decode()
