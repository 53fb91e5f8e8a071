"""Charts that arrive with a finished job's status, in Debian's Chromium against the live server
(the product's strict CSP, htmx with allowScriptTags false): a benchmark run and a sizing
estimate finish while their page is open, and the chart the swapped-in fragment brings is drawn
there and then, without a reload (issue #43, item 4)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from benchmarks.models import BenchmarkRun, RunState
from benchmarks.profiles import resolve
from sizing import services as sizing_services
from sizing.models import Estimate, EstimateState
from tests.access_sizing import INPUTS, estimate_result
from tests.playground_fixtures import make_graph

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _stats(v: float) -> dict:
    return {"unit": "ms", "avg": v, "p50": v * 0.8, "p90": v, "p99": v * 1.2}


def _results() -> dict:
    steps = [{"index": i, "concurrency": c, "artifact": f"0{i}-c{c}", "ttft": _stats(80.0 + 20 * i),
              "itl": _stats(6.0 + i), "request_latency": _stats(500.0 + 50 * i), "tokens_per_user": _stats(150.0),
              "request_throughput": 2.0 * c, "output_token_throughput": 300.0 * c, "tokens_per_gpu": 0,
              "completed": 20, "errors": 0, "duration_s": 5.0} for i, c in enumerate((1, 2, 4))]
    return {"steps": steps, "token_counts": {"source": "client", "tokenizer": "/m", "note": "the graph's"},
            "slo": {}, "warnings": []}


def test_a_benchmark_run_that_finishes_with_its_page_open_draws_its_charts(operator_page, users):
    from playwright.sync_api import expect

    page = operator_page
    graph = make_graph("bench-live", "model-a", "http://127.0.0.1:9", user=users["admin"])
    run = BenchmarkRun.objects.create(
        graph=graph, revision=graph.head, profile="custom", state=RunState.RUNNING, progress=50,
        params=resolve("custom", {"concurrency": 4, "request_count": 20}).model_dump(mode="json"),
        config={"runtime": "local", "endpoint": "http://127.0.0.1:9", "model": "m", "revision": 1,
                "replicas": {"Frontend": 1, "prefill": 1, "decode": 1}, "prefill": 1, "decode": 1, "gpus": 0,
                "shape": "p1d1"}, started_at=timezone.now())
    page.goto(f"{page.base}/benchmarks/runs/{run.pk}/")
    expect(page.locator("#run-state")).to_have_text("Running")
    assert page.locator(".bench-chart canvas").count() == 0
    # The runner finishes the run while the page polls its status.
    BenchmarkRun.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED, progress=100, results=_results(),
                                                  finished_at=timezone.now())
    expect(page.locator("#run-state")).to_have_text("Succeeded", timeout=15_000)
    for metric in ("ttft", "itl", "latency"):
        expect(page.locator(f'.bench-chart[data-metric="{metric}"] canvas')).to_have_count(1, timeout=10_000)
    assert page.problems == []


def test_an_estimate_that_finishes_with_its_page_open_draws_its_pareto_chart(operator_page, users, tmp_path):
    from playwright.sync_api import expect

    page = operator_page
    estimate = Estimate.objects.create(inputs=INPUTS.as_dict(), input_key=sizing_services.input_key(INPUTS),
                                       state=EstimateState.RUNNING, progress=10, requested_by=users["operator"])
    page.goto(f"{page.base}/sizing/estimates/{estimate.pk}/")
    expect(page.locator("#estimate-state")).to_have_text("Running")
    # AIConfigurator's real answer, stored as the estimate task stores it, while the page polls.
    result = estimate_result(tmp_path / "sizing")
    Estimate.objects.filter(pk=estimate.pk).update(
        state=EstimateState.SUCCEEDED, progress=100, result=result, elapsed_s=result["elapsed_s"],
        perf_db_version=result["perf_db_version"] or "", aiconfigurator_version=result["aiconfigurator"],
        artifact_dir=str(tmp_path / "sizing"))
    expect(page.locator("#estimate-state")).to_have_text("Succeeded", timeout=15_000)
    expect(page.locator("#pareto canvas")).to_have_count(1, timeout=10_000)
    assert page.problems == []
