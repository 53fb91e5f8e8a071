# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""``GET /metrics``, the control plane's own metrics, served by the product's entry point
(controlplane.asgi under uvicorn): who may scrape, values summed over several processes
(prometheus-client's multiprocess mode: other real Python processes write beside this one),
the state read at scrape time (operations, queue depth on the real Redis broker, watch lag,
status-cache age), Prometheus query errors, and the playground's histograms after real chats
through a real Dynamo graph."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests import factories
from tests.playground_fixtures import (  # noqa: F401
    CHAT,
    _fresh_limits,
    chat_body,
    chat_graph,
    dynamo_graph,
    free_port,
    routed_server,
    tokens,
)

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(server, **headers) -> dict[tuple[str, tuple], float]:
    response = httpx.get(server.url + "/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    out = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_every_metric_the_dashboard_uses_is_exposed(routed_server, world):
    import json
    from pathlib import Path

    from telemetry import instruments

    instruments.stream_opened()  # a process's gauge file exists once it has counted a stream
    instruments.stream_closed()
    instruments.count_request("models", 200)  # and a labelled counter's series once it has counted
    instruments.count_authorization("unknown", 401)
    from metrics import prometheus

    # One Prometheus query (to a port where nothing listens) so that its series exist.
    with contextlib.suppress(prometheus.PrometheusError):
        prometheus.query("up", url=f"http://127.0.0.1:{free_port()}", at=time.time())
    samples = scrape(routed_server)
    names = {name for name, _ in samples}
    dashboard = json.loads((Path(__file__).parents[2] / "deploy/grafana/control-plane.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    used = {word for word in exprs.replace("(", " ").replace("{", " ").replace("[", " ").split()
            if word.startswith("controlplane_")}
    missing = [u for u in used if not any(n == u or n.startswith(u + "_") or n.startswith(u) for n in names)]
    assert not missing, missing
    for name in ("controlplane_playground_added_latency_seconds_bucket", "controlplane_playground_streams_in_flight",
                 "controlplane_operations", "controlplane_queue_depth", "controlplane_scrape_errors"):
        assert name in names


def test_without_a_token_only_loopback_clients_may_scrape():
    from telemetry.exposition import refusal

    assert refusal({"client": ("127.0.0.1", 5000)}, {}) is None
    assert refusal({"client": ("::1", 5000)}, {}) is None
    status, message = refusal({"client": ("10.1.2.3", 5000)}, {})
    assert status == 403 and "METRICS_TOKEN" in message


def test_with_a_token_a_scrape_must_send_it(routed_server, settings):
    settings.METRICS_TOKEN = "s3cret-metrics-token"
    url = routed_server.url + "/metrics"
    missing = httpx.get(url)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Token s3cret-metrics-token"}).status_code == 401
    assert httpx.post(url, headers={"Authorization": "Bearer s3cret-metrics-token"}).status_code == 405
    assert scrape(routed_server, Authorization="Bearer s3cret-metrics-token")


WRITER = textwrap.dedent("""
    import os, sys
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django
    django.setup()
    from telemetry import instruments
    for _ in range(int(sys.argv[1])):
        instruments.observe_added(0.0015)
        instruments.stream_opened()
    print("ready", flush=True)
    if sys.argv[2] == "stay":
        sys.stdin.readline()
""")


def test_values_of_several_processes_are_summed_and_dead_processes_gauges_dropped(routed_server):
    env = {**os.environ, "PYTHONPATH": str(os.getcwd())}
    before = scrape(routed_server)
    count_before = value(before, "controlplane_playground_added_latency_seconds_count") or 0
    streams_before = value(before, "controlplane_playground_streams_in_flight") or 0
    gone = subprocess.run([sys.executable, "-c", WRITER, "3", "exit"], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    assert "ready" in gone.stdout
    staying = subprocess.Popen([sys.executable, "-c", WRITER, "2", "stay"], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert staying.stdout.readline().strip() == "ready"
        # The staying process writes what it recorded within instruments.FLUSH_SECONDS.
        deadline = time.monotonic() + 10
        while True:
            after = scrape(routed_server)
            if (value(after, "controlplane_playground_added_latency_seconds_count") == count_before + 5
                    and value(after, "controlplane_playground_streams_in_flight") == streams_before + 2):
                break
            assert time.monotonic() < deadline, after
            time.sleep(0.05)
        # Counts from both processes (the one that exited too: counters and histograms add up)...
        assert value(after, "controlplane_playground_added_latency_seconds_count") == count_before + 5
        assert value(after, "controlplane_playground_added_latency_seconds_bucket", le="0.002") >= 5
        # ...but a gauge of streams in flight counts only processes that are alive.
        assert value(after, "controlplane_playground_streams_in_flight") == streams_before + 2
    finally:
        staying.stdin.close()
        staying.wait(timeout=30)
    assert value(scrape(routed_server), "controlplane_playground_streams_in_flight") == streams_before


@pytest.fixture
def world(users):
    """Two deployed graphs (status cache 40 s and 5 s old), three finished operations and a
    running one, a cluster watched 30 s ago and one never watched."""
    from clusters.models import Cluster
    from graphs.models import Deployment, Operation

    now = timezone.now()
    graph = factories.graph("tm-a", model="m", backend="mocker")
    other = factories.graph("tm-b", model="m", backend="mocker")
    Deployment.objects.create(graph=graph, revision=graph.head, runtime="kubernetes", active=True, state="ready",
                              observed_at=now - timedelta(seconds=40))
    Deployment.objects.create(graph=other, revision=other.head, runtime="kubernetes", active=True, state="ready",
                              observed_at=now - timedelta(seconds=5))
    for took in (3, 20, 400):
        Operation.objects.create(graph=graph, kind="apply", state="succeeded",
                                 started_at=now - timedelta(seconds=took), finished_at=now)
    Operation.objects.create(graph=other, kind="scale", state="running", started_at=now)
    Cluster.objects.create(name="east", watched_at=now - timedelta(seconds=30), reachable=True)
    Cluster.objects.create(name="west", reachable=False)


def test_operations_clusters_and_the_status_cache_are_read_at_scrape_time(routed_server, world):
    samples = scrape(routed_server)
    assert value(samples, "controlplane_operations", kind="apply", state="succeeded") == 3
    assert value(samples, "controlplane_operations", kind="scale", state="running") == 1
    assert value(samples, "controlplane_operations", kind="delete", state="failed") == 0
    assert value(samples, "controlplane_operation_duration_seconds_count", kind="apply") == 3
    assert value(samples, "controlplane_operation_duration_seconds_bucket", kind="apply", le="5.0") == 1
    assert value(samples, "controlplane_operation_duration_seconds_bucket", kind="apply", le="30.0") == 2
    assert value(samples, "controlplane_operation_duration_seconds_bucket", kind="apply", le="+Inf") == 3
    assert value(samples, "controlplane_operation_duration_seconds_sum", kind="apply") == pytest.approx(423, abs=1)
    assert 30 <= value(samples, "controlplane_cluster_watch_lag_seconds", cluster="east") < 60
    assert value(samples, "controlplane_cluster_watch_lag_seconds", cluster="west") is None  # never watched
    assert value(samples, "controlplane_cluster_reachable", cluster="west") == 0
    assert 40 <= value(samples, "controlplane_status_cache_age_seconds", runtime="kubernetes") < 70
    assert value(samples, "controlplane_deployed_graphs", runtime="kubernetes") == 2
    for part in ("operations", "queue", "clusters", "status_cache"):
        assert value(samples, "controlplane_scrape_errors", part=part) == 0


def test_queue_depth_is_the_brokers_and_a_broker_that_is_down_is_reported_not_fatal(routed_server, settings):
    from controlplane.celery import app

    before = value(scrape(routed_server), "controlplane_queue_depth", queue="celery")
    assert before is not None
    with app.connection_for_write() as conn:
        conn.default_channel.queue_declare(queue="celery", durable=True, auto_delete=False)
        producer = conn.Producer(serializer="json")
        producer.publish({"probe": 1}, routing_key="celery")
        try:
            assert value(scrape(routed_server), "controlplane_queue_depth", queue="celery") == before + 1
        finally:
            conn.default_channel.basic_get("celery", no_ack=True)
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    samples = scrape(routed_server)
    assert value(samples, "controlplane_scrape_errors", part="queue") == 1
    assert value(samples, "controlplane_queue_depth", queue="celery") is None
    assert value(samples, "controlplane_scrape_errors", part="operations") == 0


def test_prometheus_queries_are_timed_and_their_errors_counted_by_reason(routed_server):
    from metrics import prometheus

    url = f"http://127.0.0.1:{free_port()}"
    before = scrape(routed_server)
    prometheus.breaker_reset(url)
    with pytest.raises(prometheus.PrometheusUnreachable):
        prometheus.query("up", url=url, at=time.time())
    after = scrape(routed_server)
    key = ("controlplane_prometheus_query_errors_total", (("reason", "unreachable"),))
    assert after[key] == before.get(key, 0) + 1
    count = ("controlplane_prometheus_query_duration_seconds_count", (("outcome", "error"),))
    assert after[count] == before.get(count, 0) + 1


@pytest.mark.dynamo
def test_chats_through_the_product_fill_the_playgrounds_histograms(routed_server, dynamo_graph, chat_graph,
                                                                    tokens):
    before = scrape(routed_server)
    url = routed_server.url + CHAT.format(graph="pg-test")
    with httpx.Client(timeout=30) as client:
        for _ in range(3):
            reply = client.post(url, headers={"Authorization": f"Token {tokens['operator']}"},
                                json=chat_body(dynamo_graph.model, max_tokens=4))
            assert reply.status_code == 200 and reply.text.endswith("data: [DONE]\n\n")
        assert client.post(url, json=chat_body(dynamo_graph.model)).status_code == 401
    after = scrape(routed_server)

    def delta(name, **labels):
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    assert delta("controlplane_playground_added_latency_seconds_count") == 3
    assert delta("controlplane_playground_upstream_ttft_seconds_count") == 3
    assert 0 < delta("controlplane_playground_upstream_ttft_seconds_sum") < 30
    assert delta("controlplane_playground_requests_total", route="chat/completions", code="200") == 3
    assert delta("controlplane_playground_requests_total", route="chat/completions", code="401") == 1
    assert value(after, "controlplane_playground_streams_in_flight") == value(before,
                                                                              "controlplane_playground_streams_in_flight")
