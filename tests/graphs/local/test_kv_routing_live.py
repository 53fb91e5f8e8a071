# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""KV-aware routing on the local runtime, with real Dynamo processes and a real Prometheus:
the frontend runs in the graph's router mode, the mocker workers publish the KV events the KV
router needs, and repeated long prompts show up as a KV cache hit rate above zero in the
metrics API, per reply as cached prompt tokens, and per pod the process's own facts."""

from __future__ import annotations

import os
import re
import time

import httpx
import pytest
from django.urls import reverse

from core.catalog import build_spec
from graphs import operations, services
from graphs.models import Deployment, Pod
from graphs.runtimes.processes import wait_until
from metrics import localprom
from tests.metrics_fixtures import fresh_cache, prometheus_server, use_prometheus  # noqa: F401

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]

# ~1,500 tokens: many 64-token KV blocks, so a repeat reuses most of the prompt.
PROMPT = " ".join(f"word{i % 500}" for i in range(1500))


def _converge(operator, graph, predicate, timeout=120):
    def step():
        operator.reconcile_once()
        dep = Deployment.objects.get(graph=graph)
        return predicate(dep, {p.name: p for p in Pod.objects.filter(deployment=dep)})

    return wait_until(step, timeout=timeout, interval=0.3, what="the graph to converge")


def _chat(endpoint: str, model: str) -> dict:
    reply = httpx.post(f"{endpoint}/v1/chat/completions", timeout=60, json={
        "model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_kv_routed_graph_reuses_prompt_prefixes_and_says_so(eager, operator, use_prometheus, client_for):
    spec = build_spec(template="mocker-agg-kv", name="kvg", model="kvg-model", backend="mocker")
    graph = services.graph_create(spec=spec)
    op = operations.graph_apply(graph=graph, via="api")
    op.refresh_from_db()
    assert op.state == "succeeded", op.result
    _converge(operator, graph, lambda dep, pods: dep.state == "ready" and len(pods) == 3)

    # The frontend's command line, per pod, like kubectl describe: it runs the graph's mode.
    status = client_for("viewer").get(f"/api/graphs/{graph.name}/status/").json()
    assert status["router_mode"] == "kv"
    pods = {p["name"]: p for p in status["pods"]}
    frontend = pods["kvg-frontend-0"]
    assert frontend["command"][1:] == ["-m", "dynamo.frontend"]
    argv = frontend["args"]
    assert argv[argv.index("--router-mode") + 1] == "kv"
    assert "dynamo.mocker" in pods["kvg-worker-0"]["command"]
    assert operations.status_snapshot(graph)["router_mode"] == "kv"
    # What the worker really has: its mount namespace's /dev/shm, next to what the spec asks.
    statvfs = os.statvfs(f"/proc/{operator.supervisor.status('kvg-worker-0').pid}/root/dev/shm")
    assert pods["kvg-worker-0"]["shm_bytes"] == statvfs.f_frsize * statvfs.f_blocks
    assert pods["kvg-worker-0"]["shm_source"] == "process mount namespace"
    assert pods["kvg-worker-0"]["shm_requested_bytes"] == 16 * 2**30
    assert pods["kvg-worker-0"]["nixl_backend"] == "simulated"
    assert pods["kvg-worker-0"]["gpu_devices"] == "" and pods["kvg-worker-0"]["gpus"] == 0

    dep = Deployment.objects.get(graph=graph)
    assert localprom.sync_targets(use_prometheus.root) is True
    use_prometheus.wait_for('count_over_time(up{graph="kvg",pool="frontend"}[1m])',
                            lambda r: r and float(r[0]["value"][1]) >= 2, timeout=60)
    first = _chat(dep.endpoint, "kvg-model")
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # The router's counters exist from the first routed request: let Prometheus see them at
    # their starting value before the repeats, so that the window's increase is the repeats.
    metric = "dynamo_component_router_kv_selected_cached_prefix_tokens_total"
    use_prometheus.wait_for(f'count_over_time({metric}{{graph="kvg"}}[1m])', lambda r: r and
                            float(r[0]["value"][1]) >= 2, timeout=30)
    replies = [_chat(dep.endpoint, "kvg-model") for _ in range(5)]
    cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in replies]
    assert all(c > 0 for c in cached), cached  # the KV router sent each repeat to the worker holding it
    total = sum(cached)
    use_prometheus.wait_for(f'sum({metric}{{graph="kvg",phase!="decode"}})',
                            lambda r: r and float(r[0]["value"][1]) >= total, timeout=30)

    # Summaries are evaluated on the last whole scrape interval: wait until that is past the sample.
    (sample,) = use_prometheus.query(f'timestamp(sum({metric}{{graph="kvg"}}))')
    time.sleep(max(0.0, float(sample["value"][1]) + 1.5 - time.time()))
    row = client_for("viewer").get(f"/api/metrics/graphs/{graph.name}/").json()
    assert row["error"] == ""
    assert 0 < row["kv_hit_rate"] <= 1, row
    overview = client_for("viewer").get("/metrics/", HTTP_HX_REQUEST="true").content.decode()
    [percent] = re.findall(r'<td data-col="kv-hit-rate">(\d+)%</td>', overview)
    assert 0 < int(percent) <= 100
    chart = client_for("viewer").get(f"/api/metrics/graphs/{graph.name}/chart/?window=15m").json()
    assert 0 < chart["summary"]["kv_hit_rate"] <= 1, chart["summary"]
    assert 0 < chart["summary"]["cached_token_share"] <= 1
    page = client_for("viewer").get(f"/graphs/{graph.name}/").content.decode()
    assert '<strong id="router-mode">kv</strong>' in page
    panel = client_for("viewer").get(reverse("metrics:panel", args=[graph.name])).content.decode()
    assert 'data-stat="kv_hit_rate"' in panel
