"""The benchmarks API and pages without a live graph: roles, bad input, refusals, cancel,
comparisons and exports, recommendations applied as scale operations, the sweep.
Runs that need aiperf and a real frontend are in test_benchmarks_live.py."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from django.utils import timezone

from benchmarks import services
from benchmarks.models import BenchmarkRun, Recommendation, RunState, Study
from benchmarks.profiles import resolve
from graphs.models import Deployment, GraphState, Operation
from tests import factories

pytestmark = pytest.mark.django_db

RUNS = "/api/benchmarks/runs/"


@pytest.fixture(autouse=True)
def _benchmark_dir(settings, tmp_path):
    # No local operator runs here: a scale succeeds once recorded, not once observed.
    settings.OPERATION_OBSERVE_SECONDS = 0
    settings.BENCHMARK_DIR = tmp_path / "benchmarks"


def _graph(name="demo", state=GraphState.READY, endpoint="http://127.0.0.1:18999", deployed=True):
    graph = factories.graph(name, model=f"{name}-model", backend="mocker", pool=factories.CPU)
    if deployed:
        factories.deployed(graph, state=state, endpoint=endpoint)
    return graph


def _finished_run(graph, *, shape="p1d1", ttft=100.0, itl=8.0, tput=1000.0, params=None, state=RunState.SUCCEEDED):
    p, d = (int(x) for x in re.match(r"p(\d+)d(\d+)", shape).groups())
    stats = lambda v: {"unit": "ms", "avg": v, "p50": v * 0.8, "p90": v, "p99": v * 1.2}  # noqa: E731
    step = {"index": 0, "concurrency": 4, "artifact": "01-c4", "ttft": stats(ttft), "itl": stats(itl),
            "request_latency": stats(ttft + 60 * itl), "tokens_per_user": stats(1000 / itl),
            "request_throughput": 3.5, "output_token_throughput": tput, "tokens_per_gpu": tput / (p + d),
            "completed": 40, "errors": 0, "duration_s": 10.0}
    return BenchmarkRun.objects.create(
        graph=graph, revision=graph.head, profile="custom", state=state, progress=100,
        params=(params or resolve("custom", {"concurrency": 4, "request_count": 40})).model_dump(mode="json"),
        config={"runtime": "local", "endpoint": "http://127.0.0.1:1", "model": "m", "revision": 1,
                "replicas": {"Frontend": 1, "prefill": p, "decode": d}, "prefill": p, "decode": d, "gpus": p + d,
                "shape": shape},
        results={"steps": [step], "token_counts": {"source": "client", "tokenizer": "/m", "note": "the graph's"},
                 "slo": {}, "warnings": []},
        finished_at=timezone.now(), label=shape)


# --- roles ----------------------------------------------------------------------------------------

def test_viewers_read_and_operators_run(api_for):
    graph = _graph()
    run = _finished_run(graph)
    assert api_for("viewer").get(RUNS).status_code == 200
    assert api_for("viewer").get(f"{RUNS}{run.pk}/").json()["results"]["steps"][0]["ttft"]["p90"] == 100.0
    assert api_for("viewer").get(f"{RUNS}{run.pk}/report/?type=csv").status_code == 200
    body = {"graph": "demo", "profile": "custom", "concurrency": 2, "request_count": 10}
    assert api_for("viewer").post(RUNS, body, format="json").status_code == 403
    assert api_for("norole").get(RUNS).status_code == 403
    assert api_for(None).get(RUNS).status_code in (401, 403)
    response = api_for("operator").post(RUNS, body, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["state"] == "pending" and created["requested_by"] == "operator"
    assert created["params"]["concurrency"] == 2 and created["params"]["request_count"] == 10
    assert api_for("viewer").post(f"{RUNS}{created['id']}/cancel/").status_code == 403
    assert api_for("viewer").post("/api/benchmarks/recommendations/", {"graph": "demo"},
                                  format="json").status_code == 403


# --- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "field", "status"), [
    ({"concurrency": -4}, "concurrency", 400),
    ({"concurrency": 1_000_000}, "concurrency", 400),
    ({"request_count": 0}, "request_count", 400),
    ({"request_count": 10**9}, "request_count", 400),
    ({"profile": "fastest"}, "profile", 400),
    ({"url": "http://example.com"}, "url", 400),
    ({"endpoint": "http://10.0.0.1:8000"}, "endpoint", 400),
    ({"max_seconds": 10**7}, "max_seconds", 400),
    ({"concurency": 3}, "concurency", 400),
    # Each field within its bounds, refused by a rule across fields: 422.
    ({"sweep": [8, 2]}, "sweep", 422),
    ({"duration_s": 30, "request_count": 5}, "request_count", 422),
])
def test_bad_input_is_refused_naming_the_field(api_for, extra, field, status):
    _graph()
    body = {"graph": "demo", "profile": "custom", "concurrency": 2, "request_count": 10, **extra}
    response = api_for("operator").post(RUNS, body, format="json")
    assert response.status_code == status, response.content
    assert field in response.json(), response.json()
    assert not BenchmarkRun.objects.exists()


@pytest.mark.parametrize(("state", "deployed", "message"), [
    (GraphState.READY, False, "not deployed"),
    (GraphState.FAILED, True, "not serving"),
    (GraphState.PROGRESSING, True, "not serving"),
])
def test_a_graph_that_is_not_serving_is_refused_with_the_reason(api_for, state, deployed, message):
    _graph(state=state, deployed=deployed)
    response = api_for("operator").post(RUNS, {"graph": "demo", "concurrency": 2, "request_count": 10},
                                        format="json")
    assert response.status_code == 409 and message in response.json()["detail"]
    assert not BenchmarkRun.objects.exists()


def test_one_run_per_graph_and_one_per_host_at_a_time(api_for):
    _graph("a")
    _graph("b")
    body = {"concurrency": 2, "request_count": 10}
    assert api_for("operator").post(RUNS, {"graph": "a", **body}, format="json").status_code == 201
    again = api_for("operator").post(RUNS, {"graph": "a", **body}, format="json")
    assert again.status_code == 409 and "already being benchmarked" in again.json()["detail"]
    other = api_for("operator").post(RUNS, {"graph": "b", **body}, format="json")
    assert other.status_code == 409 and "another benchmark is active on this host" in other.json()["detail"]


def test_a_graph_being_changed_is_not_benchmarked(api_for):
    graph = _graph()
    Operation.objects.create(graph=graph, kind="scale", state="running", params={"service": "decode", "replicas": 2})
    response = api_for("operator").post(RUNS, {"graph": "demo", "concurrency": 2, "request_count": 10},
                                        format="json")
    assert response.status_code == 409 and "is changing" in response.json()["detail"]


def test_cancelling_a_pending_run_is_immediate_and_final(api_for):
    _graph()
    run_id = api_for("operator").post(RUNS, {"graph": "demo", "concurrency": 2, "request_count": 10},
                                      format="json").json()["id"]
    response = api_for("operator").post(f"{RUNS}{run_id}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    assert response.json()["cancel_requested_by"] == "operator"
    assert api_for("operator").post(f"{RUNS}{run_id}/cancel/").status_code == 409


def test_a_run_whose_worker_stopped_is_failed_by_the_sweep():
    graph = _graph()
    run = BenchmarkRun.objects.create(graph=graph, profile="custom", params=resolve("custom").model_dump(),
                                      state=RunState.RUNNING, lease_until=timezone.now() - dt.timedelta(seconds=5))
    assert services.BenchmarkRunner.sweep(timezone.now())["failed"] == 1
    run.refresh_from_db()
    assert run.state == "failed" and "heartbeat expired" in run.error


# --- comparisons and exports ----------------------------------------------------------------------

def test_compare_gives_rows_and_overlaid_series_and_exports(api_for):
    graph = _graph()
    a = _finished_run(graph, shape="p1d1", ttft=150)
    b = _finished_run(graph, shape="p2d1", ttft=90)
    data = api_for("viewer").get(f"/api/benchmarks/compare/?runs={a.pk},{b.pk}").json()
    assert [r["run"] for r in data["rows"]] == [a.pk, b.pk]
    assert [s["points"][0]["ttft"] for s in data["series"]] == [150, 90]
    assert len({s["color"] for s in data["series"]}) == 2
    csv_text = api_for("viewer").get(f"/api/benchmarks/compare/report/?runs={a.pk},{b.pk}&type=csv").content.decode()
    lines = csv_text.strip().splitlines()
    assert lines[0].startswith("Run,Graph") and len(lines) == 3 and ",150.0," in lines[1]
    html = api_for("viewer").get(f"/api/benchmarks/compare/report/?runs={a.pk},{b.pk}&type=html").content.decode()
    assert "<style>" in html and "<svg" in html and 'id="benchmark-data"' in html
    assert not re.search(r"""(src|href)\s*=|@import|url\(""", html), "the report must load nothing"
    bad = api_for("viewer").get("/api/benchmarks/compare/?runs=1,x")
    assert bad.status_code == 400 and "runs" in bad.json()


# --- recommendations -----------------------------------------------------------------------------

def test_recommend_from_measured_runs_and_apply_as_scale_operations(api_for, eager,
                                                                   django_capture_on_commit_callbacks):
    from metrics.services import objectives_set

    graph = _graph()
    objectives_set(graph=graph, ttft_ms=100, itl_ms=10, gpu_hour_price=None)
    slow = _finished_run(graph, shape="p1d1", ttft=150, itl=8)
    fast = _finished_run(graph, shape="p2d1", ttft=80, itl=8)
    response = api_for("operator").post("/api/benchmarks/recommendations/", {"graph": "demo"}, format="json")
    assert response.status_code == 201, response.content
    rec = response.json()
    assert rec["recommended"] == {"prefill": 2, "decode": 1} and rec["met"] is True
    assert rec["targets_from"] == "objectives" and set(rec["runs"]) == {slow.pk, fast.pk}
    assert f"Run #{fast.pk}" in rec["reasons"][0]
    with django_capture_on_commit_callbacks(execute=True):
        applied = api_for("operator").post(f"/api/benchmarks/recommendations/{rec['id']}/apply/")
    applied = api_for("operator").get(f"/api/benchmarks/recommendations/{rec['id']}/")
    assert applied.status_code == 200 and applied.json()["state"] == "applied", applied.content
    ops = list(Operation.objects.filter(graph=graph).values_list("kind", "state", "via", "params"))
    assert ops == [("scale", "succeeded", "api", {"service": "prefill", "replicas": 2})]
    assert Deployment.objects.get(graph=graph).replicas == {"prefill": 2}
    assert api_for("operator").post(f"/api/benchmarks/recommendations/{rec['id']}/apply/").status_code == 409


def test_a_recommendation_changing_both_pools_runs_one_scale_after_the_other(api_for, eager,
                                                                             django_capture_on_commit_callbacks):
    graph = _graph()
    _finished_run(graph, shape="p1d1", ttft=250, itl=15)
    rec = api_for("operator").post("/api/benchmarks/recommendations/",
                                   {"graph": "demo", "ttft_ms": 100, "itl_ms": 10}, format="json").json()
    assert rec["recommended"] == {"prefill": 3, "decode": 2} and rec["met"] is False
    assert rec["targets_from"] == "request"
    with django_capture_on_commit_callbacks(execute=True):
        api_for("operator").post(f"/api/benchmarks/recommendations/{rec['id']}/apply/")
    assert Recommendation.objects.get(pk=rec["id"]).state == "applied"
    scales = list(Operation.objects.filter(graph=graph).order_by("id").values_list("params", flat=True))
    assert scales == [{"service": "prefill", "replicas": 3}, {"service": "decode", "replicas": 2}]
    assert Recommendation.objects.get(pk=rec["id"]).operations == list(
        Operation.objects.filter(graph=graph).order_by("id").values_list("pk", flat=True))


def test_recommend_without_targets_or_runs_says_what_is_missing(api_for):
    graph = _graph()
    response = api_for("operator").post("/api/benchmarks/recommendations/", {"graph": "demo"}, format="json")
    assert response.status_code == 409 and "ttft_ms" in response.json()
    response = api_for("operator").post("/api/benchmarks/recommendations/", {"graph": "demo", "ttft_ms": 50},
                                        format="json")
    assert response.status_code == 409 and "run one first" in response.json()["detail"]
    _finished_run(graph)
    response = api_for("operator").post("/api/benchmarks/recommendations/",
                                        {"graph": "demo", "ttft_ms": 50, "runs": [999]}, format="json")
    assert response.status_code == 400 and "runs" in response.json()


# --- studies --------------------------------------------------------------------------------------

def test_a_study_defaults_to_every_shape_on_the_same_gpus(api_for):
    _graph()
    response = api_for("operator").post("/api/benchmarks/studies/",
                                        {"graph": "demo", "profile": "short", "request_count": 10}, format="json")
    assert response.status_code == 201, response.content
    arms = response.json()["arms"]
    assert [a["shape"] for a in arms] == ["agg2", "p1d1"]
    assert [a["variant"] for a in arms] == [True, False]  # p1d1 is the serving graph itself
    bad = api_for("operator").post("/api/benchmarks/studies/", {"graph": "demo", "arms": ["p1d1", "x9"]},
                                   format="json")
    assert bad.status_code == 400 and "arms" in bad.json()
    assert Study.objects.count() == 1


# --- pages -----------------------------------------------------------------------------------------

def test_pages_render_and_polling_stops_when_the_run_is_done(client_for):
    graph = _graph()
    done = _finished_run(graph)
    active = BenchmarkRun.objects.create(graph=graph, profile="custom", params=resolve("custom").model_dump(),
                                         state=RunState.RUNNING, progress=42, progress_text="12 requests done")
    viewer = client_for("viewer")
    for url in ("/benchmarks/", f"/benchmarks/runs/{done.pk}/", f"/benchmarks/compare/?runs={done.pk}",
                "/benchmarks/graphs/demo/sizing/"):
        assert viewer.get(url).status_code == 200, url
    page = viewer.get(f"/benchmarks/runs/{active.pk}/").content.decode()
    assert 'hx-trigger="every 1s"' in page and 'value="42"' in page and "<script>" not in page
    polled = viewer.get(f"/benchmarks/runs/{active.pk}/?fragment=status", HTTP_HX_REQUEST="true")
    assert polled.status_code == 200
    final = viewer.get(f"/benchmarks/runs/{done.pk}/?fragment=status", HTTP_HX_REQUEST="true")
    assert final.status_code == 286 and "hx-trigger" not in final.content.decode()
    assert viewer.get("/benchmarks/new/").status_code == 403
    assert client_for("operator").get("/benchmarks/new/?graph=demo").status_code == 200
    bad = client_for("operator").post("/benchmarks/new/", {"graph": "demo", "profile": "custom",
                                                           "concurrency": "1000000", "request_count": "10"})
    assert bad.status_code == 400 and "BENCHMARK_MAX_CONCURRENCY" in bad.content.decode()


def test_the_openapi_schema_lists_the_benchmark_api(api_for):
    schema = api_for("viewer").get("/api/schema/").content.decode()
    for path in ("/api/benchmarks/runs/", "/api/benchmarks/runs/{id}/cancel/", "/api/benchmarks/runs/{id}/artifacts/",
                 "/api/benchmarks/compare/", "/api/benchmarks/recommendations/{id}/apply/",
                 "/api/benchmarks/studies/"):
        assert path in schema, path


def test_a_benchmark_of_an_unknown_graph_is_a_404_naming_it(api_for):
    response = api_for("operator").post("/api/benchmarks/runs/", {"graph": "nope"}, format="json")
    assert response.status_code == 404
    assert "no graph named 'nope'" in response.json()["detail"]


def test_a_mocker_run_reports_no_gpus_and_no_tokens_per_gpu(client_for):
    graph = _graph()
    runs = [_finished_run(graph, shape="p1d1"), _finished_run(graph, shape="p2d1", tput=1500.0)]
    for run in runs:
        step = run.results["steps"][0]
        step["tokens_per_gpu"] = None  # what a GPU-free graph's run records
        run.results["steps"][0] = step
        run.config["gpu_free"] = True
        run.save()
    ids = ",".join(str(r.pk) for r in runs)
    page = client_for("viewer").get(f"/benchmarks/compare/?runs={ids}").content.decode()
    assert "per GPU)" not in page
    assert page.count("none (mocker)") == 2
    detail = client_for("viewer").get(f"/benchmarks/runs/{runs[0].pk}/").content.decode()
    assert "none (mocker)" in detail


# --- the real task, run eagerly ---------------------------------------------------------------------

def test_a_requested_run_is_executed_by_the_real_task_once_the_request_commits(api_for, eager,
                                                                              django_capture_on_commit_callbacks):
    """No stand-in for the worker: the request's commit enqueues the real task (run inline),
    which runs aiperf against the graph's frontend. Nothing listens there, and the run says so."""
    _graph()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = api_for("operator").post(RUNS, {"graph": "demo", "profile": "custom", "concurrency": 1,
                                                   "request_count": 2}, format="json")
    assert response.status_code == 201 and response.json()["state"] == "pending"
    assert len(callbacks) == 1
    run = BenchmarkRun.objects.get(pk=response.json()["id"])
    assert run.state == "failed" and run.started_at and run.finished_at
    assert run.error.startswith("aiperf exited with code 1 during the run")
    assert "All 2 inference request(s) failed" in run.error  # aiperf's own words, from its log
    assert Path(run.log_path).exists()


def test_a_requested_study_is_advanced_by_the_real_task_once_the_request_commits(
        api_for, eager, django_capture_on_commit_callbacks, settings, tmp_path):
    """The real study_advance task, run inline: the first arm (agg2) is a variant graph, which the
    study creates and applies (the apply operation runs inline too; the local operator, which
    would start its processes, is not running here)."""
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
    _graph()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = api_for("operator").post("/api/benchmarks/studies/", {"graph": "demo", "profile": "short",
                                                                         "request_count": 10}, format="json")
    assert response.status_code == 201, response.content
    assert callbacks
    study = Study.objects.get(pk=response.json()["id"])
    assert study.state == "running" and study.message == "agg2: apply" and not study.error
    assert list(Operation.objects.values_list("kind", "state", "graph__name")) == [
        ("apply", "succeeded", f"demo-ab{study.pk}-agg2")]
    assert not study.runs.exists()  # its runs start once the variant serves


def test_a_report_type_that_is_not_made_is_refused_naming_the_supported_ones(api_for, client_for):
    graph = _graph()
    a, b = _finished_run(graph), _finished_run(graph, shape="p2d1")
    for url in (f"/api/benchmarks/compare/report/?runs={a.pk},{b.pk}&type=pdf", f"{RUNS}{a.pk}/report/?type=pdf"):
        refused = api_for("viewer").get(url)
        assert refused.status_code == 400, url
        assert refused.json()["type"] == ["'pdf' is not a report type: choose csv or html"]
    page = client_for("viewer").get(f"/benchmarks/compare/report/?runs={a.pk},{b.pk}&type=pdf")
    assert page.status_code == 400 and page["Content-Type"].startswith("text/plain")
    assert "choose csv or html" in page.content.decode()


def test_a_run_without_objectives_says_so_and_says_when_they_were_set_after_it(client_for):
    from metrics.services import objectives_set

    graph = _graph()
    run = _finished_run(graph)
    page = client_for("viewer").get(f"/benchmarks/runs/{run.pk}/").content.decode()
    assert "No goodput: demo has no TTFT/ITL objectives." in page
    objectives_set(graph=graph, ttft_ms=200, itl_ms=None, gpu_hour_price=None)
    page = client_for("viewer").get(f"/benchmarks/runs/{run.pk}/").content.decode()
    assert "has no TTFT/ITL objectives" not in page
    assert "demo had no TTFT/ITL objectives when this run ran; they were set since (TTFT ≤ 200 ms)" in page
