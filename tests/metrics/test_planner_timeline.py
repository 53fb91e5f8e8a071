# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The Planner timeline against a real Prometheus: the known exposition's load (4 requests/s,
400 input tokens/s) and latency, a Planner's own dynamo_planner_* gauges served beside it, and
decisions recorded by either runtime (the local executor, a cluster watcher). The health line
warns when decisions stop while the load changes."""

from __future__ import annotations

import datetime as dt
import statistics
import time
from pathlib import Path

import pytest
from django.utils import timezone

from core.catalog import PoolFields, build_spec
from core.planner_config import PlannerSettings
from graphs import planner_decisions as planner_services
from graphs import services as graph_services
from graphs.models import Deployment, PlannerDecision
from metrics.planner_timeline import health, planner_of
from tests.metrics_fixtures import (  # noqa: F401
    INPUT_TOKENS_PER_S,
    KNOWN,
    REQUESTS_PER_S,
    exposition,
    fresh_cache,
    known_scraped,
    prometheus_server,
    use_prometheus,
)

pytestmark = pytest.mark.django_db

# What the Planner reports, set on the Planner's own metrics (dynamo 1.6.1,
# dynamo.planner.monitoring.planner_metrics.PlannerPrometheusMetrics): the real Planner cannot run
# here (it needs a Dynamo runtime with its discovery plane), so this test constructs its metrics
# object and serves it as the Planner does (dynamo.planner.core.base: PlannerPrometheusMetrics()
# then prometheus_client.start_http_server). The values are the test's; the Planner would set
# them in dynamo/planner/core/base.py (estimated_ttft_ms, estimated_itl_ms through _set_if_observed;
# predicted_requests_per_second; observed_requests_per_second) and dynamo/planner/core/adapters.py
# (predicted_num_prefill_replicas, predicted_num_decode_replicas). The names come from the wheel,
# so a rename there fails this test instead of passing a hand-written copy.
PLANNER_VALUES = {"predicted_requests_per_second": 3.5, "estimated_ttft_ms": 140.0, "estimated_itl_ms": 12.0,
                  "predicted_num_prefill_replicas": 2, "predicted_num_decode_replicas": 3,
                  "observed_requests_per_second": REQUESTS_PER_S}


def planner_metrics_registry():
    """The Planner's metrics, moved from prometheus_client's global registry (where the
    Planner's constructor puts them) to one of their own, set to PLANNER_VALUES."""
    import importlib.util

    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase

    # The module file itself: importing it as dynamo.planner.monitoring.planner_metrics runs
    # dynamo.planner's __init__, which imports the Planner's regression models (scikit-learn, not
    # installed: the control plane never runs the Planner's performance model). The file needs
    # prometheus_client only.
    spec = importlib.util.find_spec("dynamo")
    path = Path(next(iter(spec.submodule_search_locations))) / "planner" / "monitoring" / "planner_metrics.py"
    loader = importlib.util.spec_from_file_location("dynamo_planner_metrics", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    PlannerPrometheusMetrics = module.PlannerPrometheusMetrics

    registry = CollectorRegistry()
    metrics = PlannerPrometheusMetrics()
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            REGISTRY.unregister(metric)
            registry.register(metric)
    for name, value in PLANNER_VALUES.items():
        getattr(metrics, name).set(value)
    return registry


@pytest.fixture(scope="module")
def planner_scraped(prometheus_server):
    """The Planner's /metrics, served as the Planner serves it, scraped as graph "known", pool "planner"."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(0, addr="127.0.0.1", registry=planner_metrics_registry())
    prometheus_server.add_targets("known-planner", [{"targets": [f"127.0.0.1:{server.server_address[1]}"],
                                                     "labels": {"graph": KNOWN, "pool": "planner",
                                                                "pod": "known-planner-0"}}])
    # A few scrapes, so the chart's last step (a scrape boundary before now) already has a sample.
    prometheus_server.wait_for(f'count_over_time(dynamo_planner_estimated_ttft_ms{{graph="{KNOWN}"}}[1m])',
                               lambda r: r and float(r[0]["value"][1]) >= 4, timeout=60)
    yield
    prometheus_server.remove_targets("known-planner")
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _known_graph():
    spec = build_spec(template="mocker-disagg", name=KNOWN, backend="mocker", prefill=PoolFields(gpus=0),
                      decode=PoolFields(gpus=0),
                      planner=PlannerSettings(optimization_target="sla", ttft_ms=150, itl_ms=10,
                                              adjustment_interval_seconds=60))
    graph = graph_services.graph_create(spec=spec)
    Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready")
    return graph


def test_the_timeline_has_load_latency_estimates_and_decisions_from_both_runtimes(
        known_scraped, planner_scraped, use_prometheus, api_for):
    graph = _known_graph()
    now = timezone.now()
    planner_services.replicas_observe(graph=graph, pools={"prefill": (1, 1), "decode": (1, 1)},
                                      at=now - dt.timedelta(minutes=3))
    local = planner_services.decision_record(graph=graph, source=planner_services.SOURCE_VIRTUAL,
                                             desired={"prefill": 2}, decision_id=0,
                                             at=now - dt.timedelta(minutes=2))
    planner_services.replicas_observe(graph=graph, pools={"prefill": (2, 1), "decode": (1, 1)},
                                      at=now - dt.timedelta(minutes=2))
    planner_services.replicas_observe(graph=graph, pools={"prefill": (2, 2), "decode": (1, 1)},
                                      at=now - dt.timedelta(seconds=100))
    # What a cluster watcher records for a write by the Planner's field manager.
    watched = planner_services.decision_record(graph=graph, source=planner_services.SOURCE_KUBERNETES,
                                               desired={"decode": 3}, actor="planner",
                                               reason="the planner field manager set decode replicas to 3",
                                               at=now - dt.timedelta(minutes=1))
    assert (local.state, watched.state) == ("received", "observed")
    PlannerDecision.objects.filter(pk=local.pk).update(state="acknowledged", acknowledged_at=now)

    body = api_for("viewer").get(f"/api/graphs/{KNOWN}/planner/?window=15m").json()
    assert body["state"] == "ok", body["message"]
    last = lambda name: next(v for v in reversed(body["series"][name]) if v is not None)  # noqa: E731
    # The median of the last five points: one 8 s rate can be off by a scrape on a loaded machine,
    # and the first points after the exposition started cover part of a rate window.
    typical = lambda name: statistics.median([v for v in body["series"][name] if v is not None][-5:])  # noqa: E731
    assert typical("request_rate") == pytest.approx(REQUESTS_PER_S, rel=0.05)
    assert typical("input_tokens") == pytest.approx(INPUT_TOKENS_PER_S, rel=0.05)
    assert 100 <= last("ttft_p90") <= 200  # the known histogram's p90 is 160 ms
    assert body["estimates_reported"] is True, (
        {k: v[-5:] for k, v in body["series"].items() if k.startswith("planner")},
        known_scraped.query('dynamo_planner_estimated_ttft_ms'), body["start"], body["end"], time.time())
    assert last("planner_predicted_requests_per_second") == 3.5
    assert last("planner_estimated_ttft_ms") == 140.0
    assert body["targets"]["ttft_ms"] == 150 and body["targets"]["from"] == "planner"
    assert [(d["source"], d["desired"], d["state"]) for d in body["decisions"]] == [
        ("virtual-connector", {"prefill": 2}, "acknowledged"), ("kubernetes-watch", {"decode": 3}, "observed")]
    assert body["decisions"][0]["reason"] == "prefill 1→2"
    assert body["replicas"]["prefill"]["desired"][-2:] == [[pytest.approx((now - dt.timedelta(minutes=2))
                                                                          .timestamp()), 2],
                                                           [pytest.approx((now - dt.timedelta(seconds=100))
                                                                          .timestamp()), 2]]
    assert [v for _, v in body["replicas"]["prefill"]["ready"]] == [1, 1, 2]
    assert body["health"]["level"] == "ok"
    assert body["health"]["message"].startswith("Last decision 6")  # 60 s ago, or a second or two more
    assert "(the planner field manager set decode replicas to 3), observed." in body["health"]["message"]

    bad = api_for("viewer").get(f"/api/graphs/{KNOWN}/planner/?window=forever")
    assert bad.status_code == 400 and "window" in bad.json()


def test_the_health_line_warns_when_decisions_stop_while_the_load_changes():
    graph = _known_graph()
    service, settings = planner_of(graph, graph.deployment)
    now = timezone.now()
    planner_services.decision_record(graph=graph, source=planner_services.SOURCE_KUBERNETES,
                                     desired={"decode": 2}, at=now - dt.timedelta(minutes=30))
    stamps = [int(now.timestamp()) - 1800 + 60 * i for i in range(30)]
    steady = health(graph, service, settings, [1.0] * 30, stamps, now=now)
    assert steady["level"] == "ok" and steady["warnings"] == []
    rising = health(graph, service, settings, [1.0] * 10 + [2.0] * 10 + [4.0] * 10, stamps, now=now)
    assert rising["level"] == "warning"
    assert "no decision since 30 min ago while the load went from 1.00 to 4.00 requests/s" in rising["warnings"][0]
    # A decision that came recently silences it: the Planner is deciding.
    planner_services.decision_record(graph=graph, source=planner_services.SOURCE_KUBERNETES,
                                     desired={"decode": 3}, at=now - dt.timedelta(seconds=30))
    assert health(graph, service, settings, [1.0] * 10 + [4.0] * 20, stamps, now=now)["warnings"] == []


def test_a_graph_without_a_planner_says_so(api_for, settings):
    graph = graph_services.graph_create(spec=build_spec(template="mocker-disagg", name="plain", backend="mocker",
                                                        prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0)))
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    body = api_for("viewer").get(f"/api/graphs/{graph.name}/planner/").json()
    assert body["health"] == {"level": "none", "message": "This graph has no Planner component.",
                              "last_decision_at": None, "warnings": []}
    assert body["planner"]["component"] is None
