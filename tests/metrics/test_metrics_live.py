# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""Charts against a real Prometheus server (started per session, scraping every second
through the same file_sd config the product writes).

* A known exposition (tests/metrics_fixtures.py) whose counters grow at fixed rates gives
  exact expected quantiles, SLO shares, goodput and costs.
* A real Dynamo graph (frontend + mocker workers) serves real chat traffic; its chart must
  agree with the histograms on its own /metrics page."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.catalog import PoolFields
from graphs.models import Pod
from metrics import localprom, promql, series
from metrics import prometheus as prom
from metrics.services import objectives_set
from tests import factories
from tests.dynamo_fixtures import dynamo_graph  # noqa: F401
from tests.exposition import exposition_server
from tests.metrics_fixtures import (  # noqa: F401
    ACTIVE,
    INPUT_TOKENS_PER_S,
    KNOWN,
    OUTPUT_TOKENS_PER_S,
    REQUESTS_PER_S,
    SCRAPE_INTERVAL,
    exposition,
    fresh_cache,
    known_scraped,
    prometheus_server,
    use_prometheus,
)


def make_graph(name: str, *, prefill: int = 2, decode: int = 3, runtime: str = "local"):
    graph = factories.graph(name, template="vllm-disagg", prefill=PoolFields(replicas=prefill, gpus=1),
                            decode=PoolFields(replicas=decode, gpus=1))
    factories.deployed(graph, runtime=runtime, observed=None, namespace="prod" if runtime == "kubernetes" else "")
    return graph


def openapi_nullable(node):
    """OpenAPI 3.0's ``nullable`` as JSON Schema's null type, for jsonschema."""
    if isinstance(node, dict):
        node = {k: openapi_nullable(v) for k, v in node.items()}
        if node.pop("nullable", False):
            node = {"anyOf": [node, {"type": "null"}]}
        return node
    return [openapi_nullable(v) for v in node] if isinstance(node, list) else node


def assert_conforms(client, data, component: str) -> None:
    """``data`` matches the OpenAPI description of ``component``."""
    import jsonschema

    components = openapi_nullable(client.get("/api/schema/?format=json").json()["components"])
    jsonschema.validate(data, {"$ref": f"#/components/schemas/{component}", "components": components})


def last(values: list) -> float:
    found = [v for v in values if v is not None]
    assert found, "no points"
    return found[-1]


@pytest.fixture
def known(db, use_prometheus, known_scraped):
    return make_graph(KNOWN)


# ------------------------------------------------------------------ every builder, real parser


def test_every_query_builder_parses_and_answers_on_a_real_prometheus(known, use_prometheus):
    scope = promql.local_scope(KNOWN, scrape_interval=1)
    batch = promql.local_graphs_scope([KNOWN, "other"], scrape_interval=1)
    bounds = prom.label_values("le", url=use_prometheus.url, match=promql.bucket_series(series.TTFT, scope))
    assert set(bounds) == {"0", "0.05", "0.1", "0.2", "+Inf"}
    share = promql.slo_share(series.TTFT, scope, 8, 0.15, bounds)
    now = time.time()
    queries = [promql.ttft_quantile(0.9, scope, 8), promql.itl_quantile(0.5, scope, 8), promql.request_rate(scope, 8),
               promql.output_token_rate(scope, 8), promql.input_token_rate(scope, 8), promql.in_flight(scope),
               promql.scrape_targets(scope), share, promql.goodput(share, share),
               promql.chart_series(scope, 8, goodput_expr=promql.goodput(share)),
               promql.window_summary(scope, 900, shares={"ttft_share": share}), promql.overview(batch, 300),
               promql.ttft_quantile(0.9, promql.kubernetes_scope("prod", "llama"), 8),
               promql.overview(promql.kubernetes_graphs_scope([("prod", "llama")], recorded=True), 300)]
    for query in queries:
        prom.query(query, url=use_prometheus.url, at=now)  # raises PrometheusQueryFailed on a parse error
    assert prom.query(promql.ttft_quantile(0.5, scope, 8), url=use_prometheus.url, at=now)[0].value == \
        pytest.approx(0.075)


# ------------------------------------------------------------------ exact values from a known histogram


def test_the_chart_has_exact_quantiles_rates_and_in_flight(known, client_for):
    response = client_for("viewer").get(f"/metrics/graphs/{KNOWN}/chart/?window=15m")
    assert response.status_code == 200
    data = response.json()
    assert data["state"] == "ok", data["message"]
    assert (data["step"], data["rate_window"]) == (4, 8)
    assert len(data["timestamps"]) <= 300
    s = data["series"]
    for name, expected in (("ttft_p50", 75), ("ttft_p90", 160), ("ttft_p99", 196),
                           ("itl_p50", 7.5), ("itl_p90", 16), ("itl_p99", 19.6)):
        assert last(s[name]) == pytest.approx(expected, rel=1e-6), name
        assert data["summary"][name] == pytest.approx(expected, rel=1e-6), name
    assert last(s["request_rate"]) == pytest.approx(REQUESTS_PER_S, rel=0.02)
    assert last(s["output_tokens"]) == pytest.approx(OUTPUT_TOKENS_PER_S, rel=0.02)
    assert last(s["in_flight"]) == ACTIVE
    assert all(len(values) == len(data["timestamps"]) for values in s.values())
    assert set(s["goodput"]) == {None}  # no SLO targets yet
    assert data["summary"]["targets"] == {"total": 1, "up": 1, "down": []}
    assert_conforms(client_for("viewer"), data, "Chart")


def test_slo_shares_and_goodput_come_from_the_buckets(known, client_for):
    # TTFT 150 ms lies halfway through the 100-200 ms bucket: (3 + 0.5 * 1) / 4 = 0.875.
    # ITL 10 ms is a bucket bound: 30 / 40 = 0.75 exactly.
    objectives_set(graph=known, ttft_ms=150, itl_ms=10, gpu_hour_price=None)
    data = client_for("viewer").get(f"/metrics/graphs/{KNOWN}/chart/?window=15m").json()
    summary = data["summary"]
    assert summary["ttft_share"] == pytest.approx(0.875, rel=1e-6)
    assert summary["itl_share"] == pytest.approx(0.75, rel=1e-6)
    assert summary["goodput"] == pytest.approx({"estimate": 0.65625, "upper": 0.75, "lower": 0.625}, rel=1e-6)
    assert last(data["series"]["goodput"]) == pytest.approx(0.65625, rel=1e-6)
    assert_conforms(client_for("viewer"), data, "Chart")
    assert data["objectives"]["ttft_ms"] == 150


def test_cost_per_million_tokens_uses_each_pools_gpus_and_the_price(known, client_for):
    objectives_set(graph=known, ttft_ms=None, itl_ms=None, gpu_hour_price="2.00")
    data = client_for("viewer").get(f"/api/metrics/graphs/{KNOWN}/chart/?window=15m").json()
    summary, cost = data["summary"], data["summary"]["cost"]
    assert cost["gpus"] == {"prefill": 2, "decode": 3}
    # The window is older than the series, so its average rates are diluted alike; the costs
    # follow the formula from them, and input:output is exactly the exposition's 10:1.
    assert summary["input_tokens"] / summary["output_tokens"] == pytest.approx(
        INPUT_TOKENS_PER_S / OUTPUT_TOKENS_PER_S, rel=1e-6)
    assert cost["per_million_input"] == pytest.approx(2 * 2.0 / (summary["input_tokens"] * 3600) * 1e6)
    assert cost["per_million_output"] == pytest.approx(3 * 2.0 / (summary["output_tokens"] * 3600) * 1e6)


def test_the_overview_reads_every_graph_in_one_query(known, client_for, use_prometheus):
    objectives_set(graph=known, ttft_ms=200, itl_ms=10, gpu_hour_price=None)
    make_graph("quiet-a")
    make_graph("quiet-b")
    make_graph("cluster-c", runtime="kubernetes")
    before = use_prometheus.api_requests("/api/v1/query")
    response = client_for("viewer").get("/metrics/", headers={"HX-Request": "true"})
    after = use_prometheus.api_requests("/api/v1/query")
    assert response.status_code == 200
    assert after - before == 2  # one for the local graphs, one for the Kubernetes graph
    body = response.content.decode()
    assert 'data-graph="known"' in body and "160.0 ms" in body

    api = client_for("viewer").get("/api/metrics/graphs/")  # the same rows, as data
    assert api.status_code == 200
    rows = {row["graph"]: row for row in api.json()["results"]}
    assert rows[KNOWN]["ttft_p90_ms"] == pytest.approx(160, rel=1e-6)
    assert rows[KNOWN]["itl_p90_ms"] == pytest.approx(16, rel=1e-6)
    # Five-minute average of a series seconds old: requests before its first scrape do not count.
    assert 0 < rows[KNOWN]["request_rate"] <= REQUESTS_PER_S * 1.02
    assert rows[KNOWN]["slo"] == "missed"  # ITL p90 16 ms > 10 ms
    assert rows["quiet-a"]["slo"] == "not_set" and rows["quiet-a"]["ttft_p90_ms"] is None
    assert [r["graph"] for r in api.json()["results"]] == ["cluster-c", KNOWN, "quiet-a", "quiet-b"]
    for row in api.json()["results"]:
        assert_conforms(client_for("viewer"), row, "Summary")


def test_the_overview_page_asks_prometheus_nothing_and_its_fragment_brings_the_numbers(known, client_for,
                                                                                       use_prometheus):
    viewer = client_for("viewer")
    before = use_prometheus.api_requests("/api/v1/query")
    page = viewer.get("/metrics/")
    assert use_prometheus.api_requests("/api/v1/query") == before  # the page reads only the database
    body = page.content.decode()
    assert page.status_code == 200 and 'data-graph="known"' in body and "asking Prometheus" in body
    assert 'hx-trigger="load, every 15s"' in body
    fragment = viewer.get("/metrics/", headers={"HX-Request": "true"})
    assert use_prometheus.api_requests("/api/v1/query") == before + 1
    text = fragment.content.decode()
    assert "<html" not in text and "160.0 ms" in text and "asking Prometheus" not in text


def test_twenty_concurrent_viewers_cost_one_query(known_scraped, fresh_cache, settings):
    settings.PROMETHEUS_URL = known_scraped.url
    expr = promql.chart_series(promql.local_scope(KNOWN, scrape_interval=1), 8)
    end = int(time.time()) // 4 * 4
    before = known_scraped.api_requests("/api/v1/query_range")
    barrier = threading.Barrier(20)

    def viewer(_):
        barrier.wait()
        return prom.query_range(expr, url=known_scraped.url, start=end - 900, end=end, step=4)

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(viewer, range(20)))
    assert known_scraped.api_requests("/api/v1/query_range") - before == 1
    assert all(r == results[0] for r in results) and results[0]


# ------------------------------------------------------------------ a real Dynamo graph


def histograms(text: str) -> dict[str, dict[float, float]]:
    """metric -> {le: cumulative count} from a Prometheus text page, summed over label sets."""
    out: dict[str, dict[float, float]] = {}
    for metric, le, value in re.findall(r'^(dynamo_frontend_\w+)_bucket\{[^}]*le="([^"]+)"[^}]*\} (\S+)$', text, re.M):
        bounds = out.setdefault(metric, {})
        bound = float("inf") if le == "+Inf" else float(le)
        bounds[bound] = bounds.get(bound, 0.0) + float(value)
    return out


def quantile_range(before: dict[float, float], after: dict[float, float], q: float, slack: float = 0.05):
    """Where the q-quantile of the observations between two scrapes must lie: from the bound
    under which fewer than (q - slack) of them fell, to the first bound that holds (q + slack).
    The slack absorbs Prometheus's per-series extrapolation at the window's edges."""
    delta = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = delta[-1][1]
    assert total > 0
    low = max((le for le, count in delta if count < (q - slack) * total), default=0.0)
    high = min(le for le, count in delta if count >= (q + slack) * total)
    return low, high


def metrics_page(endpoint: str) -> str:
    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=10) as resp:
        return resp.read().decode()


def chat(endpoint: str, model: str) -> None:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Tell me about prefill."}],
                       "max_tokens": 16, "stream": True}).encode()
    request = urllib.request.Request(f"{endpoint}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    # A fresh connection per request: the 1.6.1 frontend stalls the first token ~35 ms on a
    # reused one (dynamo-offline.md); fresh connections measure the server, not Nagle.
    with urllib.request.urlopen(request, timeout=60) as resp:
        assert b"[DONE]" in resp.read()


@pytest.mark.dynamo
def test_a_real_graphs_chart_agrees_with_its_frontends_histograms(dynamo_graph, db, use_prometheus,
                                                                   client_for):
    graph = make_graph("live", prefill=1, decode=1)
    deployment = graph.deployment
    ports = {name: dynamo_graph.supervisor.pod_status(name).port for name in dynamo_graph.names}
    roles = {"frontend": "frontend", "prefill-0": "prefill", "decode-0": "decode"}
    Pod.objects.bulk_create([Pod(deployment=deployment, name=f"live-{name}", service=roles[name], role=roles[name],
                                 phase="Running", ready=True, port=ports[name]) for name in roles])
    # The product's own path: Pod rows -> targets file -> file_sd. Unchanged rows write nothing.
    assert localprom.sync_targets(use_prometheus.root) is True
    assert localprom.sync_targets(use_prometheus.root) is False
    use_prometheus.wait_for('count_over_time(up{graph="live",pool="frontend"}[1m])',
                            lambda r: r and float(r[0]["value"][1]) >= 2, timeout=60)
    up = use_prometheus.wait_for('up{graph="live"}', lambda r: len(r) == 3 and all(x["value"][1] == "1" for x in r))
    assert {x["metric"]["pool"] for x in up} == {"frontend", "prefill", "decode"}

    # One request first, so that the histogram series exist (a frontend exports them from its
    # first observation on) and Prometheus holds a baseline sample equal to `before`: the
    # window's increase is then exactly the traffic below.
    chat(dynamo_graph.endpoint, dynamo_graph.model)
    warm = histograms(metrics_page(dynamo_graph.endpoint))[series.TTFT][float("inf")]
    use_prometheus.wait_for(f'count_over_time({series.TTFT}_count{{graph="live"}}[1m]) >= 2 and '
                            f'{series.TTFT}_count{{graph="live"}} == {warm}', lambda r: len(r) == 1)
    before = histograms(metrics_page(dynamo_graph.endpoint))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: chat(dynamo_graph.endpoint, dynamo_graph.model), range(24)))
    after = histograms(metrics_page(dynamo_graph.endpoint))
    ttft_count = sum(v for le, v in after[series.TTFT].items() if le == float("inf"))
    # Wait until Prometheus has scraped everything we sent.
    use_prometheus.wait_for(f'sum({series.TTFT}_count{{graph="live"}})',
                            lambda r: r and float(r[0]["value"][1]) >= ttft_count, timeout=30)
    # Charts end on the last whole scrape interval: wait until that is past the sample above.
    (sample,) = use_prometheus.query(f'timestamp({series.TTFT}_count{{graph="live"}})')
    time.sleep(max(0.0, float(sample["value"][1]) + SCRAPE_INTERVAL - time.time()))

    response = client_for("viewer").get("/metrics/graphs/live/chart/?window=15m")
    assert response.status_code == 200
    data = response.json()
    assert data["state"] == "ok", data["message"]
    assert data["summary"]["targets"]["up"] == 3
    for metric, name in ((series.TTFT, "ttft"), (series.ITL, "itl")):
        for q, key in ((0.5, "p50"), (0.9, "p90")):
            low, high = quantile_range(before[metric], after[metric], q)
            assert data["summary"][f"{name}_{key}"] is not None, data["summary"]
            value = data["summary"][f"{name}_{key}"] / 1000
            assert low - 1e-9 <= value <= high + 1e-9, f"{name} {key}: {value} s not in [{low}, {high}]"
        # Every charted point lies within the buckets the traffic filled.
        bounds = sorted(after[metric])
        added = [after[metric][le] - before[metric].get(le, 0.0) for le in bounds]  # cumulative
        per_bucket = [added[0]] + [b - a for a, b in itertools.pairwise(added)]
        filled = [i for i, n in enumerate(per_bucket) if n > 0]
        floor, ceiling = (bounds[filled[0] - 1] if filled[0] else 0.0), bounds[filled[-1]]
        points = [v / 1000 for v in data["series"][f"{name}_p50"] if v is not None]
        assert points, f"no {name} p50 points"
        assert all(floor - 1e-9 <= v <= ceiling + 1e-9 for v in points), (name, points, floor, ceiling)
    assert max(v for v in data["series"]["request_rate"] if v is not None) > 0
    assert any(v is not None for v in data["series"]["in_flight"])


def test_requests_a_counter_held_at_its_first_scrape_count_in_the_request_rate(db, use_prometheus):
    """The frontend makes dynamo_frontend_requests_total at its first request: the first scrape
    that finds it already holds the requests before it, which rate() alone never shows."""
    state = {"born": False}

    def frontend(_path: str) -> str:
        body = 'dynamo_frontend_model_ready{model="m"} 1\n'
        if state["born"]:
            body += 'dynamo_frontend_requests_total{model="m"} 40\n'  # 40 requests since the last scrape
        return body

    server = exposition_server(frontend)
    labels = {"graph": "births", "pool": "frontend", "pod": "births-frontend-0"}
    use_prometheus.add_targets("births", [{"targets": [f"127.0.0.1:{server.server_address[1]}"], "labels": labels}])
    try:
        use_prometheus.wait_for('count_over_time(up{graph="births"}[1m])',
                                lambda r: r and float(r[0]["value"][1]) >= 7, timeout=60)
        state["born"] = True
        use_prometheus.wait_for('dynamo_frontend_requests_total{graph="births"}', bool, timeout=30)
        scope = promql.local_scope("births", scrape_interval=1)
        counted = use_prometheus.query(promql.request_rate(scope, 5))
        assert float(counted[0]["value"][1]) == pytest.approx(8.0)  # 40 requests over the 5 s window
        plain = use_prometheus.query('sum(rate(dynamo_frontend_requests_total{graph="births"}[5s]))')
        assert not plain or float(plain[0]["value"][1]) == 0.0  # what the chart showed before
    finally:
        use_prometheus.remove_targets("births")
        server.shutdown()
        server.server_close()
