"""Every writer of the rows a graph's status shows (pods, operations, Planner decisions, events,
the scaling changes others made) moves the graph's status version (graphs/status_version.py names
them), which tells the open pages' streams to fetch the status again (graphs/live.py): a runtime's
observation, an operation and each of its state changes, a Planner decision, a change someone
else made on the cluster. The status itself reads its rows at every fetch: a write made around
the writers is shown at the next fetch, and pushed once the version moves. These tests commit, as
the product's processes do."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from graphs import planner_decisions
from graphs.models import DecisionState, Deployment, Graph, Operation, StatusStamp
from graphs.runtimes.base import Observation, PodStatus
from graphs.runtimes.kubernetes import owners
from graphs.status_cache import observation_record, state_record
from graphs.status_version import moved
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)
HTMX = {"HTTP_HX_REQUEST": "true"}


def applied(name: str, runtime: str = "local") -> Graph:
    graph = factories.graph(name, backend="mocker")
    deployment = Deployment.objects.create(graph=graph, runtime=runtime, revision=graph.head, active=True,
                                           state="progressing", namespace="ns" if runtime == "kubernetes" else "")
    observation_record(deployment, Observation(state="progressing", pods=[PodStatus(
        name=f"{name}-decode-0", service="decode", role="decode", phase="Pending", ready=False,
        started_at=timezone.now() - timedelta(minutes=3))]), observed_generation=0)
    return graph


def version(graph: Graph) -> int:
    return StatusStamp.objects.get(graph_id=graph.pk).value


def status(client, name: str) -> str:
    response = client.get(f"/graphs/{name}/status/", **HTMX)
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode())


@pytest.fixture
def viewer(client_for):
    return client_for("viewer")


def test_a_runtimes_observation_is_shown_by_the_next_poll(viewer):
    graph = applied("observed")
    deployment = graph.deployment
    assert "Pending" in status(viewer, "observed")
    before = version(graph)
    pod = PodStatus(name="observed-decode-0", service="decode", role="decode", phase="Running", ready=True,
                    restarts=4)
    observation_record(deployment, Observation(state="ready", pods=[pod]), observed_generation=1)
    page = status(viewer, "observed")
    assert version(graph) > before and "Running" in page and "1/1" in page
    before = version(graph)
    observation_record(deployment, Observation(state="ready", pods=[]), observed_generation=1)
    assert version(graph) > before and "observed-decode-0" not in status(viewer, "observed")


def test_a_write_made_around_the_writers_is_shown_at_the_next_fetch_and_pushed_once_the_version_moves(viewer):
    graph = applied("plain")
    assert "No events." in status(viewer, "plain")
    before = version(graph)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO graphs_event (graph_id, at, type, reason, object, message) "
                       "VALUES (%s, %s, 'Warning', 'BackOff', 'plain-decode-0', 'written by another program')",
                       [graph.pk, timezone.now()])
    assert "written by another program" in status(viewer, "plain")
    assert version(graph) == before  # no stream is told: a page sees it at its next fetch
    moved(graph.pk)
    assert version(graph) == before + 1


def test_an_operation_and_the_planner_decision_it_executes_are_shown_as_they_move(viewer, users):
    graph = applied("planned")
    status(viewer, "planned")
    before = version(graph)
    decision = planner_decisions.decision_record(graph=graph, source=planner_decisions.SOURCE_VIRTUAL,
                                                 decision_id=7, desired={"decode": 2})
    assert version(graph) > before and "for Planner decision" not in status(viewer, "planned")
    op = Operation.objects.create(graph=graph, kind="scale", requested_by=users["operator"], via="planner",
                                  params={"decision": decision.pk})
    before = version(graph)
    assert Operation.claim(op.pk, lease_seconds=20)
    page = status(viewer, "planned")
    assert version(graph) > before
    assert f"Operation #{op.pk}: scale is running" in page and "for Planner decision 7 (received)" in page
    before = version(graph)
    planner_decisions._finish(decision, DecisionState.ACKNOWLEDGED, "every pool ready")
    assert version(graph) > before
    before = version(graph)
    assert Operation.finish(op.pk, "succeeded", result="decode: 1 -> 2")
    page = status(viewer, "planned")
    assert version(graph) > before
    assert f"Operation #{op.pk}" not in page and "decode: 1 -> 2" in page and "(acknowledged)" in page


def test_a_change_made_on_the_cluster_by_someone_else_is_shown(viewer):
    graph = applied("scaled", runtime="kubernetes")
    Deployment.objects.filter(graph=graph).update(ownership={"pools": [{"service": "decode", "manifest": 1}]})
    assert "Scaling decisions seen on the cluster" not in status(viewer, "scaled")
    pool = owners.ownership.Pool(service="decode", manifest=1, adapter=None, live=3, ready=1, owner="kubectl-scale",
                                 owner_is="kubectl", via="dgd", autoscaled=False)
    before = version(graph)
    owners._record_change(graph.deployment, {"service": "decode", "live": 1, "via": "dgd"}, pool, {}, None)
    assert version(graph) > before and "decode</strong> 1 → 3 by kubectl" in status(viewer, "scaled")


def test_the_deployments_state_is_shown_when_its_cluster_does_not_answer(viewer):
    graph = applied("unreachable", runtime="kubernetes")
    before = version(graph)
    state_record(graph.deployment, state="unknown", message="the cluster does not answer")
    assert version(graph) > before and "the cluster does not answer" in status(viewer, "unreachable")
    state_record(graph.deployment, state="unknown", message="the cluster does not answer")
    assert version(graph) == before + 1  # the same state again moves nothing


def test_a_redeployment_starts_from_its_own_pods(viewer):
    graph = applied("again")
    assert "again-decode-0" in status(viewer, "again")
    with transaction.atomic():  # the pods go with their deployment, a new one starts with none
        Deployment.objects.filter(graph=graph).delete()
        Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="pending")
    assert "again-decode-0" not in status(viewer, "again")


def test_a_deleted_graph_takes_its_version_with_it(viewer):
    graph = applied("gone")
    status(viewer, "gone")
    assert StatusStamp.objects.filter(graph_id=graph.pk).exists()
    pk = graph.pk
    Graph.objects.filter(pk=pk).delete()
    assert not StatusStamp.objects.filter(graph_id=pk).exists()
    assert viewer.get("/graphs/gone/status/", **HTMX).status_code == 404


def test_an_observation_that_finds_nothing_new_keeps_the_version(viewer):
    graph = applied("rest")
    pod = PodStatus(name="rest-decode-0", service="decode", role="decode", phase="Running", ready=True)
    observation_record(graph.deployment, Observation(state="ready", pods=[pod]), observed_generation=1)
    stamp = StatusStamp.objects.get(graph_id=graph.pk).value
    status(viewer, "rest")
    observation_record(graph.deployment, Observation(state="ready", pods=[pod]), observed_generation=1)
    # A look moves the version only when it changed what is shown.
    assert StatusStamp.objects.get(graph_id=graph.pk).value == stamp
    observation_record(graph.deployment, Observation(state="ready", pods=[PodStatus(
        name="rest-decode-0", service="decode", role="decode", phase="Running", ready=True, restarts=1)]),
        observed_generation=1)
    assert StatusStamp.objects.get(graph_id=graph.pk).value > stamp
    assert "rest-decode-0" in status(viewer, "rest")


def test_a_workers_heartbeat_leaves_the_version_alone(users):
    graph = applied("beating")
    op = Operation.objects.create(graph=graph, kind="apply", state="running", requested_by=users["operator"])
    stamp = version(graph)
    assert Operation.renew(op.pk, lease_seconds=20)  # the lease is not shown: its renewal changes nothing shown
    assert version(graph) == stamp
    Operation.finish(op.pk, "succeeded", result="applied")
    assert version(graph) > stamp


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's NOTIFY; SQLite's pages read versions")
def test_a_moved_version_notifies_at_the_commit():
    import psycopg

    graph = applied("told")
    params = {k: v for k, v in connection.get_connection_params().items()
              if k not in ("cursor_factory", "context", "prepare_threshold")}
    with psycopg.connect(autocommit=True, **params) as listener:
        listener.execute("LISTEN graphs_status")
        with transaction.atomic():
            moved(graph.pk, graph.pk, None)
            assert list(listener.notifies(timeout=0.3)) == []  # not before the commit
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == [str(graph.pk)]
