"""Graph list and detail pages with 500 graphs and 5,000 pods in the status cache: latency
percentiles and SQL queries per page (the same at 50 and at 500 graphs: no N+1), and proof
that no runtime is called on the page path."""

from __future__ import annotations

import statistics
import time
from unittest import mock


def _seed(n_graphs: int, pods_per_graph: int) -> None:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from clusters.models import Cluster
    from graphs import services
    from graphs.catalog import build_spec
    from graphs.models import Deployment, Event, Graph, Pod

    if not User.objects.filter(username="bench").exists():
        User.objects.create_superuser("bench", "b@x", "bench-pass-1")
    have = Graph.objects.count()
    now = timezone.now()
    cluster, _ = Cluster.objects.get_or_create(name="bench", defaults={"namespaces": ["bench"]})
    for i in range(have, n_graphs):
        spec = build_spec(template="mocker-disagg", name=f"bench-{i:04d}", model="m", backend="mocker")
        graph = services.graph_create(spec=spec)
        # Cluster-side rows (as the watchers write them): the local operator leaves them alone.
        dep = Deployment.objects.create(graph=graph, runtime="kubernetes", cluster=cluster, namespace="bench",
                                        revision=graph.head, active=True,
                                        state="ready", observed_at=now, endpoint="http://127.0.0.1:1")
        Pod.objects.bulk_create([
            Pod(deployment=dep, name=f"bench-{i:04d}-decode-{j}", service="decode", role="decode", phase="Running",
                ready=True, started_at=now, port=20000 + j) for j in range(pods_per_graph)])
        Event.objects.bulk_create([Event(graph=graph, at=now, reason="Started", object="x", message="m")
                                   for _ in range(5)])


def _measure(client, url: str, n: int = 60) -> tuple[float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(5):
        client.get(url)
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        response = client.get(url)
        samples.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    with CaptureQueriesContext(connection) as ctx:
        client.get(url)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1], len(ctx.captured_queries)


def run() -> list[tuple[str, float, float, str]]:
    from django.test import Client

    from graphs.runtimes import registry

    _seed(50, 10)
    client = Client()
    from django.contrib.auth.models import User

    client.force_login(User.objects.get(username="bench"))
    _, _, list_q50 = _measure(client, "/graphs/", 5)
    _, _, detail_q50 = _measure(client, "/graphs/bench-0001/", 5)
    _seed(500, 10)
    with mock.patch.object(registry, "get_runtime", side_effect=AssertionError("a page called a runtime")):
        list_p50, list_p95, list_q = _measure(client, "/graphs/")
        detail_p50, detail_p95, detail_q = _measure(client, "/graphs/bench-0250/")
        _, status_p95, status_q = _measure(client, "/graphs/bench-0250/status/")
        _, api_p95, api_q = _measure(client, "/api/graphs/")
    print(f"pages: SQL queries at 50 -> 500 graphs: list {list_q50} -> {list_q}, detail {detail_q50} -> {detail_q}, "
          f"status fragment {status_q}, API list {api_q}")
    assert list_q == list_q50 and detail_q == detail_q50, "query count grows with the number of graphs"
    return [
        ("graph list page p95 (500 graphs, 5000 pods)", list_p95, 50, "ms"),
        ("graph detail page p95", detail_p95, 50, "ms"),
        ("status fragment p95 (polled every 2 s)", status_p95, 50, "ms"),
        ("API graph list p95", api_p95, 50, "ms"),
        ("graph list page p50", list_p50, 50, "ms"),
        ("graph detail page p50", detail_p50, 50, "ms"),
        ("SQL queries per list page (500 vs 50 graphs)", list_q / list_q50, 1, "x"),
        ("SQL queries per detail page (500 vs 50 graphs)", detail_q / detail_q50, 1, "x"),
    ]
