"""An A/B study end to end on the local runtime: a real 1 prefill + 1 decode mocker graph,
a 2 prefill + 1 decode variant made, applied and undeployed by the study, the same aiperf
profile on both, one report, and a recommendation that follows the measured numbers, applied
as a normal scale operation. The mocker's --speedup-ratio keeps it within a few minutes."""

from __future__ import annotations

import time

import pytest

from benchmarks import studies
from benchmarks.models import BenchmarkRun, Study
from core.catalog import PoolFields, build_spec
from graphs import operations
from graphs import services as graph_services
from graphs.models import Deployment, Graph, Operation, Pod
from graphs.runtimes.processes import wait_until

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]
SPEEDUP = "--speedup-ratio 5"


def _converge(operator, predicate, timeout=120, what="the graph to converge"):
    def step():
        operator.reconcile_once()
        return predicate()

    return wait_until(step, timeout=timeout, interval=0.3, what=what)


def _ready(graph, pods):
    dep = Deployment.objects.filter(graph=graph).first()
    return dep is not None and dep.state == "ready" and Pod.objects.filter(deployment=dep, ready=True).count() == pods


def test_ab_study_compares_two_shapes_and_the_recommendation_follows_the_data(eager, operator, api_for, client_for):
    pool = PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret="", engine_args=SPEEDUP)
    spec = build_spec(template="mocker-disagg", name="ab", model="ab-model", backend="mocker", prefill=pool,
                      decode=PoolFields(**{**pool.__dict__}))
    graph = graph_services.graph_create(spec=spec)
    op = operations.graph_apply(graph=graph, via="api")
    op.refresh_from_db()
    assert op.state == "succeeded", op.result
    _converge(operator, lambda: _ready(graph, 3), what="the 1P:1D graph to be ready")

    started = time.monotonic()
    response = api_for("operator").post("/api/benchmarks/studies/", {
        "graph": "ab", "profile": "custom", "concurrency": 4, "request_count": 24, "input_tokens_mean": 256,
        "output_tokens_mean": 32, "arms": ["p1d1", "p2d1"], "seed": 7}, format="json")
    assert response.status_code == 201, response.content
    study_id = response.json()["id"]
    # Eager tasks ran the first arm (the graph itself) already; the variant needs the operator.
    study = _converge(operator, lambda: (studies.study_advance(study_id) and
                                         (s := Study.objects.get(pk=study_id)).state not in ("pending", "running")
                                         and s), timeout=420, what="the study to finish")
    elapsed = time.monotonic() - started
    assert study.state == "succeeded", (study.error, study.arms)
    arms = {a.shape: a for a in study.arm_list}
    assert set(arms) == {"p1d1", "p2d1"} and all(a.phase == "done" for a in arms.values())
    assert not arms["p1d1"].variant and arms["p1d1"].graph_name == "ab"
    variant = Graph.objects.get(pk=arms["p2d1"].graph_id)
    assert variant.name == f"ab-ab{study_id}-p2d1"
    assert variant.head.graph_spec.pools("prefill")[0].replicas == 2
    # The variant was applied, measured and undeployed again, through normal operations.
    assert list(Operation.objects.filter(graph=variant).order_by("id").values_list("kind", "state", "via")) == [
        ("apply", "succeeded", "study"), ("delete", "succeeded", "study")]
    assert Deployment.objects.get(graph=variant).state == "not_deployed"

    runs = {r.label: r for r in BenchmarkRun.objects.filter(study_id=study_id)}
    assert {k: r.state for k, r in runs.items()} == {"p1d1": "succeeded", "p2d1": "succeeded"}
    assert runs["p1d1"].run_config.shape == "p1d1" and runs["p2d1"].run_config.shape == "p2d1"
    assert runs["p1d1"].run_config.gpus == 2 and runs["p2d1"].run_config.gpus == 3
    assert runs["p1d1"].params == runs["p2d1"].params  # the same profile on each arm
    ttft = {k: r.run_results.headline.ttft.p90 for k, r in runs.items()}
    itl = {k: r.run_results.headline.itl.p90 for k, r in runs.items()}

    html = api_for("viewer").get(f"/api/benchmarks/studies/{study_id}/report/?type=html").content.decode()
    assert all(f"#{r.pk}" in html for r in runs.values()) and "p2d1" in html and html.count("<svg") >= 3
    csv_lines = api_for("viewer").get(f"/api/benchmarks/studies/{study_id}/report/?type=csv").content.decode()
    assert len(csv_lines.strip().splitlines()) == 3

    # A TTFT target between the two arms: only the faster one meets it; ITL is not the question.
    assert ttft["p1d1"] != ttft["p2d1"]
    faster = min(ttft, key=ttft.get)
    target = (ttft["p1d1"] + ttft["p2d1"]) / 2
    response = api_for("operator").post("/api/benchmarks/recommendations/", {
        "graph": "ab", "ttft_ms": round(target, 3), "itl_ms": round(max(itl.values()) * 10, 3)}, format="json")
    assert response.status_code == 201, response.content
    rec = response.json()
    expected = {"p1d1": {"prefill": 1, "decode": 1}, "p2d1": {"prefill": 2, "decode": 1}}[faster]
    assert rec["recommended"] == expected and rec["met"] is True
    # The runs were measured on the mocker: the recommendation says so before anything else.
    assert "simulated with Dynamo's mocker" in rec["reasons"][0]
    assert f"Run #{runs[faster].pk}" in rec["reasons"][1]
    assert set(rec["runs"]) == {r.pk for r in runs.values()}

    viewer = client_for("viewer")
    for url in (f"/benchmarks/studies/{study_id}/", "/benchmarks/graphs/ab/sizing/",
                f"/benchmarks/runs/{runs[faster].pk}/",
                f"/benchmarks/compare/?runs={runs['p1d1'].pk}&runs={runs['p2d1'].pk}"):
        page = viewer.get(url)
        assert page.status_code == 200, url
    assert f"recommendation-{rec['id']}" in viewer.get("/benchmarks/graphs/ab/sizing/").content.decode()

    applied = api_for("operator").post(f"/api/benchmarks/recommendations/{rec['id']}/apply/").json()
    if faster == "p2d1":
        # Its scale succeeds once the local operator runs the second prefill replica; then the
        # recommendation is applied.
        from benchmarks import recommendations

        _converge(operator, lambda: recommendations.recommendation_advance(rec["id"]) == "applied",
                  what="the recommendation's scale to be observed")
        scales = list(Operation.objects.filter(graph=graph, kind="scale").values_list("params", "state", "via"))
        assert scales == [({"service": "prefill", "replicas": 2}, "succeeded", "api")]
        _converge(operator, lambda: _ready(graph, 4), what="the second prefill replica")
    else:
        assert applied["state"] == "applied", applied
        assert not Operation.objects.filter(graph=graph, kind="scale").exists()  # already the recommended shape
    print(f"\nA/B study: {elapsed:.0f}s; TTFT p90 {ttft}; ITL p90 {itl}; recommended {rec['recommended']}")
