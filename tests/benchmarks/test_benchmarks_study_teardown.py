"""An A/B study cleans up after itself: when it ends (succeeded, failed or cancelled) each
variant graph it made has its deployment deleted through a normal delete operation and is then
archived (out of the graph list and the API's list, never applied again), while the study's
runs, which point at those graphs, stay readable. Through the real services and the Celery
tasks run eagerly; no local operator runs here, so the test reports what it would observe."""

from __future__ import annotations

import pytest
from django.utils import timezone

from benchmarks import studies
from benchmarks.models import BenchmarkRun, Study
from graphs import operations
from graphs.models import Deployment, Graph, GraphState, Operation
from tests import factories

pytestmark = pytest.mark.django_db
STUDIES = "/api/benchmarks/studies/"
ENDPOINT = "http://127.0.0.1:18999"  # nothing listens: a run there fails at once


@pytest.fixture(autouse=True)
def _dirs(settings, tmp_path):
    settings.OPERATION_OBSERVE_SECONDS = 0
    settings.BENCHMARK_DIR = tmp_path / "benchmarks"
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"


def _graph(name="demo"):
    return factories.serving(name, endpoint=ENDPOINT, model=f"{name}-model", backend="mocker", pool=factories.CPU)


def _observe(graph_ids):
    """What the local operator would report of the study's graphs: an applied graph serves, a
    deleted one is gone."""
    for dep in Deployment.objects.filter(graph_id__in=graph_ids):
        if dep.active and dep.state != GraphState.READY:
            Deployment.objects.filter(pk=dep.pk).update(state=GraphState.READY, endpoint=ENDPOINT)
        elif not dep.active and dep.state != GraphState.NOT_DEPLOYED:
            Deployment.objects.filter(pk=dep.pk).update(state=GraphState.NOT_DEPLOYED, endpoint="")


def _drive(study_id, capture, *, steps=30):
    """The periodic sweep's part: advance the study until it has ended and torn down."""
    for _ in range(steps):
        study = Study.objects.get(pk=study_id)
        if not study.settling:
            return study
        _observe([a.graph_id for a in study.arm_list if a.graph_id])
        with capture(execute=True):
            studies.StudyDriver.sweep(timezone.now())
    raise AssertionError(f"study {study_id} did not settle: {Study.objects.get(pk=study_id).arm_list}")


def test_a_failed_study_deletes_and_archives_its_variant_and_keeps_its_runs_readable(
        api_for, client_for, eager, django_capture_on_commit_callbacks):
    _graph()
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for("operator").post(STUDIES, {"graph": "demo", "profile": "custom", "concurrency": 1,
                                                      "request_count": 2, "arms": ["p1d1", "p2d1"]}, format="json")
    assert response.status_code == 201, response.content
    study = _drive(response.json()["id"], django_capture_on_commit_callbacks)
    # Nothing answers at the endpoint: no arm is measured, and the study fails.
    assert study.state == "failed" and study.error.startswith("no arm could be measured"), study.error
    arms = {a.shape: a for a in study.arm_list}
    own, variant_arm = arms["p1d1"], arms["p2d1"]
    assert (own.variant, own.teardown) == (False, "")  # the study's own graph is never touched
    variant = Graph.objects.get(pk=variant_arm.graph_id)
    assert variant_arm.teardown == "archived"
    assert variant_arm.teardown_message == f"deployment deleted by operation #{variant_arm.delete_op}; graph archived"
    # Torn down through the normal operations, on the record as the study's.
    assert list(Operation.objects.filter(graph=variant).order_by("id").values_list("kind", "state", "via")) == [
        ("apply", "succeeded", "study"), ("delete", "succeeded", "study")]
    assert not Deployment.objects.get(graph=variant).active
    assert variant.archived_at is not None
    assert variant.archived_note == f"A/B variant p2d1 of demo, torn down when study #{study.pk} failed"
    assert Deployment.objects.get(graph__name="demo").active  # the source graph still runs

    # Out of the lists...
    viewer = api_for("viewer")
    assert [g["name"] for g in viewer.get("/api/graphs/").json()["results"]] == ["demo"]
    assert [g["name"] for g in viewer.get("/api/graphs/?archived=true").json()["results"]] == [variant.name]
    page = client_for("viewer").get("/graphs/").content.decode()
    assert "/graphs/demo/" in page and variant.name not in page
    assert variant.name in client_for("viewer").get("/graphs/?archived=1").content.decode()
    # ...while the runs that measured it, and the graph's own page, stay readable.
    runs = {r.label: r for r in BenchmarkRun.objects.filter(study=study)}
    assert set(runs) == {"p1d1", "p2d1"} and runs["p2d1"].graph_id == variant.pk
    detail = viewer.get(f"/api/benchmarks/runs/{runs['p2d1'].pk}/")
    assert detail.status_code == 200 and detail.json()["state"] == "failed"
    assert client_for("viewer").get(f"/benchmarks/runs/{runs['p2d1'].pk}/").status_code == 200
    graph_page = client_for("viewer").get(f"/graphs/{variant.name}/").content.decode()
    assert "Archived" in graph_page and f"torn down when study #{study.pk} failed" in graph_page
    assert viewer.get(f"/api/graphs/{variant.name}/").json()["archived_note"] == variant.archived_note
    # The study page says what became of each variant.
    study_page = client_for("viewer").get(f"/benchmarks/studies/{study.pk}/").content.decode()
    assert "Variant afterwards" in study_page
    assert f"archived: deployment deleted by operation #{variant_arm.delete_op}; graph archived" in study_page
    assert 'hx-trigger="every 2s"' not in study_page  # settled: the page stops polling
    # An archived graph is a record: applying it again is refused, with the reason.
    refused = api_for("operator").post(f"/api/graphs/{variant.name}/apply/", {}, format="json")
    assert refused.status_code == 409 and "is archived" in refused.json()["detail"], refused.content


def test_a_cancelled_study_waits_for_its_variants_unfinished_operation_then_deletes_and_archives_it(
        api_for, client_for, eager, django_capture_on_commit_callbacks):
    _graph()
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for("operator").post(STUDIES, {"graph": "demo", "profile": "custom", "concurrency": 1,
                                                      "request_count": 2, "arms": ["agg2", "p1d1"]}, format="json")
    study_id = response.json()["id"]
    study = Study.objects.get(pk=study_id)
    variant = Graph.objects.get(pk=study.arm_list[0].graph_id)
    assert Deployment.objects.get(graph=variant).active  # applied; the local operator would start it now
    # An operation on the variant no worker has run yet: a delete must not race it.
    pool = variant.head.graph_spec.pools("worker")[0].name
    busy = operations.graph_scale(graph=variant, service=pool, replicas=2, via="api")
    with django_capture_on_commit_callbacks(execute=True):
        cancelled = api_for("operator").post(f"{STUDIES}{study_id}/cancel/", {}, format="json")
    assert cancelled.status_code == 200, cancelled.content
    body = cancelled.json()
    assert body["state"] == "cancelled" and body["teardown_pending"] is True
    [arm] = [a for a in Study.objects.get(pk=study_id).arm_list if a.variant]
    assert (arm.teardown, arm.delete_op) == ("deleting", None)
    page = client_for("viewer").get(f"/benchmarks/studies/{study_id}/").content.decode()
    assert "Tearing down the variant graphs" in page and 'hx-trigger="every 2s"' in page
    operations.operation_run(busy.pk)
    study = _drive(study_id, django_capture_on_commit_callbacks)
    assert study.state == "cancelled" and not study.teardown_pending
    [arm] = [a for a in study.arm_list if a.variant]
    assert arm.phase == "failed" and arm.message == "cancelled" and arm.teardown == "archived"
    variant.refresh_from_db()
    assert variant.archived and not Deployment.objects.get(graph=variant).active
    assert variant.archived_note.endswith(f"study #{study_id} cancelled")
    assert [g["name"] for g in api_for("viewer").get("/api/graphs/").json()["results"]] == ["demo"]


def test_a_study_that_keeps_its_variants_leaves_them_deployed_and_listed(
        api_for, eager, django_capture_on_commit_callbacks):
    _graph()
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for("operator").post(STUDIES, {"graph": "demo", "profile": "custom", "concurrency": 1,
                                                      "request_count": 2, "arms": ["agg2", "p1d1"],
                                                      "keep_variants": True}, format="json")
    study_id = response.json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        api_for("operator").post(f"{STUDIES}{study_id}/cancel/", {}, format="json")
    study = _drive(study_id, django_capture_on_commit_callbacks)
    [arm] = [a for a in study.arm_list if a.variant]
    assert (arm.teardown, arm.teardown_message) == ("kept", "left deployed, as the study asked")
    variant = Graph.objects.get(pk=arm.graph_id)
    assert not variant.archived and Deployment.objects.get(graph=variant).active
    assert not Operation.objects.filter(graph=variant, kind="delete").exists()
    assert {g["name"] for g in api_for("viewer").get("/api/graphs/").json()["results"]} == {"demo", variant.name}


def test_studies_that_ended_before_teardown_existed_are_torn_down_by_the_sweep(
        api_for, eager, django_capture_on_commit_callbacks):
    """What the migration marks (ended, variants not kept) the sweep tears down."""
    _graph()
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for("operator").post(STUDIES, {"graph": "demo", "profile": "custom", "concurrency": 1,
                                                      "request_count": 2, "arms": ["agg2", "p1d1"]}, format="json")
    study_id = response.json()["id"]
    # As an earlier release left it: ended, its variant still deployed, nothing pending.
    Study.objects.filter(pk=study_id).update(state="failed", finished_at=timezone.now(), teardown_pending=True)
    study = _drive(study_id, django_capture_on_commit_callbacks)
    [arm] = [a for a in study.arm_list if a.variant]
    assert arm.teardown == "archived" and Graph.objects.get(pk=arm.graph_id).archived
