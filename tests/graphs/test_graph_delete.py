"""Deleting a graph that has benchmark runs: refused with 409 naming the runs, unless the
caller asks for the runs to go too (API, page). Never a 500 (it was a ProtectedError)."""

from __future__ import annotations

import pytest

from audit.models import AuditRecord
from benchmarks.models import BenchmarkRun
from core.catalog import PoolFields, build_spec
from graphs import services
from graphs.models import Graph, Revision


@pytest.fixture
def measured(users):
    spec = build_spec(template="mocker-disagg", name="measured", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    graph = services.graph_create(spec=spec, user=users["operator"])
    runs = [BenchmarkRun.objects.create(graph=graph, revision=graph.head, profile="custom", params={},
                                        state=state) for state in ("succeeded", "failed")]
    return graph, runs


def test_the_api_refuses_with_409_naming_the_runs_and_keeps_everything(measured, api_for):
    graph, runs = measured
    before = (Graph.objects.count(), Revision.objects.count(), BenchmarkRun.objects.count())
    response = api_for("operator").delete(f"/api/graphs/{graph.name}/")
    assert response.status_code == 409
    body = response.json()
    assert body["benchmark_runs"] == [r.pk for r in runs]
    assert all(f"#{r.pk}" in body["detail"] for r in runs)
    assert "with_benchmarks" in body["detail"]
    assert (Graph.objects.count(), Revision.objects.count(), BenchmarkRun.objects.count()) == before
    assert not AuditRecord.objects.filter(action="graph.delete").exists()


def test_the_api_deletes_the_graph_and_its_runs_when_asked_and_audits_which(measured, api_for):
    graph, runs = measured
    response = api_for("operator").delete(f"/api/graphs/{graph.name}/?with_benchmarks=true")
    assert response.status_code == 204
    assert not Graph.objects.filter(name="measured").exists()
    assert not BenchmarkRun.objects.exists()
    record = AuditRecord.objects.get(action="graph.delete", target="measured")
    assert record.before["benchmark_runs"] == [r.pk for r in runs]


@pytest.mark.parametrize("value", ["maybe", "2", "\u00e9"])
def test_a_malformed_with_benchmarks_flag_is_a_400(measured, api_for, value):
    response = api_for("operator").delete(f"/api/graphs/measured/?with_benchmarks={value}")
    assert response.status_code == 400
    assert "with_benchmarks" in response.json()
    assert BenchmarkRun.objects.count() == 2


def test_a_run_in_progress_blocks_the_delete_even_when_asked(measured, api_for):
    graph, _runs = measured
    BenchmarkRun.objects.create(graph=graph, revision=graph.head, profile="custom", params={}, state="running")
    response = api_for("operator").delete(f"/api/graphs/{graph.name}/?with_benchmarks=true")
    assert response.status_code == 409
    assert "cancel them first" in response.json()["detail"]
    assert BenchmarkRun.objects.count() == 3


def test_the_page_refuses_with_the_runs_named_and_offers_the_choice(measured, client_for):
    graph, runs = measured
    client = client_for("operator")
    page = client.get(f"/graphs/{graph.name}/").content.decode()
    assert 'name="with_benchmarks"' in page and "also delete its 2 benchmark runs" in page
    response = client.post(f"/graphs/{graph.name}/delete/", follow=True)
    assert response.status_code == 200
    assert f"#{runs[0].pk}" in response.content.decode()
    assert Graph.objects.filter(name="measured").exists()
    response = client.post(f"/graphs/{graph.name}/delete/", {"with_benchmarks": "1"})
    assert response.status_code == 302
    assert not Graph.objects.filter(name="measured").exists()
    assert not BenchmarkRun.objects.exists()


def test_a_graph_without_runs_is_deleted_as_before(users, api_for):
    spec = build_spec(template="mocker-disagg", name="plain", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    services.graph_create(spec=spec, user=users["operator"])
    assert api_for("operator").delete("/api/graphs/plain/").status_code == 204
