# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""A Kubernetes graph's routable-workers chart comes from its frontend's own per-worker series in
a real Prometheus (metrics/routable.py): a worker counts while requests reach it (its last-TTFT
or last-ITL gauge moves) or while the frontend's KV router holds it; a gauge left behind by a
worker that gets nothing does not count."""

from __future__ import annotations

import time

import pytest

from core.catalog import PoolFields, build_spec
from graphs import services as graph_services
from graphs.models import Deployment
from metrics import series
from metrics.routable import kubernetes_timeline, pool_names
from tests.exposition import exposition_server
from tests.metrics_fixtures import SCRAPE_INTERVAL, fresh_cache, prometheus_server  # noqa: F401

LABELS = 'dp_rank="none",worker_id="{id}",worker_type="{kind}"'


def frontend_text(now: float) -> str:
    moving = f"{0.01 + (now % 97) / 1000:.6f}"  # a new value every scrape: requests reach the worker
    rows = [
        (series.WORKER_LAST_ITL, "11", "decode", moving),  # served
        (series.WORKER_LAST_ITL, "12", "decode", "0.02"),  # left behind, gets nothing
        (series.WORKER_LAST_TTFT, "21", "prefill", moving),  # served
        (series.WORKER_LAST_TTFT, "22", "prefill", "0.3"),  # left behind
        (series.WORKER_KV_BLOCKS, "31", "decode", "0"),  # held by the KV router, idle
        (series.WORKER_KV_BLOCKS, "32", "decode", "4"),
    ]
    return "".join(f"{name}{{{LABELS.format(id=i, kind=k)}}} {v}\n" for name, i, k, v in rows)


@pytest.fixture(scope="module")
def frontend_scraped(prometheus_server):
    server = exposition_server(lambda _path: frontend_text(time.time()))
    # As the Dynamo operator's PodMonitor labels a frontend pod of DGD "roll-k" in namespace "prod".
    prometheus_server.add_targets("roll-k", [{"targets": [f"127.0.0.1:{server.server_address[1]}"],
                                              "labels": {"namespace": "prod", "dynamo_namespace": "prod-roll-k"}}])
    prometheus_server.wait_for(f'count_over_time({series.WORKER_LAST_ITL}{{dynamo_namespace="prod-roll-k"}}[1m])',
                               lambda r: r and float(r[0]["value"][1]) >= 10, timeout=60)
    yield prometheus_server
    prometheus_server.remove_targets("roll-k")
    server.shutdown()
    server.server_close()


@pytest.fixture
def on_kubernetes(db, settings, fresh_cache):
    settings.PROMETHEUS_KUBERNETES_SCRAPE_INTERVAL = SCRAPE_INTERVAL
    settings.PROMETHEUS_TIMEOUT = 5
    graph = graph_services.graph_create(spec=build_spec(
        template="vllm-disagg", name="roll-k", prefill=PoolFields(replicas=2, gpus=1),
        decode=PoolFields(replicas=3, gpus=1)))
    deployment = Deployment.objects.create(graph=graph, runtime="kubernetes", revision=graph.head, active=True,
                                           state="ready", namespace="prod")
    return graph, deployment


def test_the_chart_counts_workers_requests_reach_and_those_the_kv_router_holds(frontend_scraped, on_kubernetes,
                                                                               settings, client_for):
    settings.PROMETHEUS_KUBERNETES_URL = frontend_scraped.url
    graph, deployment = on_kubernetes
    names = pool_names(deployment)
    assert set(names) == {"prefill", "decode"} and names["prefill"] != names["decode"]
    found = kubernetes_timeline(deployment)
    assert found["error"] == "" and found["points"]
    # decode: 1 served, 2 held by the KV router: the larger count; prefill: 1 served; 12 and 22 not
    assert found["points"][-1][1] == {names["decode"]: 2, names["prefill"]: 1}
    assert all(t1 > t0 for (t0, _), (t1, _) in zip(found["points"], found["points"][1:], strict=False))

    body = client_for("viewer").get(f"/graphs/{graph.name}/").content.decode()
    assert 'id="routable"' in body and f"{names['decode']}: 2 now" in body and f"{names['prefill']}: 1 now" in body
    assert "KV router holds" in body


def test_without_prometheus_the_chart_says_why_and_the_page_still_answers(on_kubernetes, settings, client_for):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.PROMETHEUS_KUBERNETES_URL = f"http://127.0.0.1:{port}"
    graph, deployment = on_kubernetes
    found = kubernetes_timeline(deployment)
    assert found["points"] == [] and f"127.0.0.1:{port}" in found["error"]
    response = client_for("viewer").get(f"/graphs/{graph.name}/")
    assert response.status_code == 200 and "data-routable-error" in response.content.decode()


def test_a_local_graph_keeps_its_own_chart(on_kubernetes):
    _graph, deployment = on_kubernetes
    deployment.runtime = "local"
    assert kubernetes_timeline(deployment) is None
