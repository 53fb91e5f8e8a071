"""A graph's status re-reads its rows (pods, operations, Planner decisions, events, the scaling
changes others made) only when the graph's status stamp moved, and every committed write to
those rows moves it, however it is made: the ORM, a bulk upsert, a queryset update or plain SQL
(database triggers, graphs/migrations/0009). These tests commit, as the product's processes do."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from graphs.models import Deployment, Graph, Operation, PlannerDecision, Pod, ReplicaChange, StatusStamp
from graphs.runtimes.base import Observation, PodStatus
from graphs.status_cache import observation_record
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)
HTMX = {"HTTP_HX_REQUEST": "true"}
STATUS_TABLES = ('"graphs_pod"', '"graphs_operation"', '"graphs_event"', '"graphs_replicachange"')


def applied(name: str, runtime: str = "local") -> Graph:
    graph = factories.graph(name, backend="mocker")
    deployment = Deployment.objects.create(graph=graph, runtime=runtime, revision=graph.head, active=True,
                                           state="progressing", namespace="ns" if runtime == "kubernetes" else "")
    Pod.objects.create(deployment=deployment, name=f"{name}-decode-0", service="decode", role="decode",
                       phase="Pending", started_at=timezone.now() - timedelta(minutes=3))
    return graph


def status(client, name: str) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/graphs/{name}/status/", **HTMX)
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode()), [q["sql"] for q in queries.captured_queries]


def rows_read(queries: list[str]) -> list[str]:
    return [q for q in queries if any(f"FROM {table}" in q for table in STATUS_TABLES)]


@pytest.fixture
def viewer(client_for):
    return client_for("viewer")


def test_an_unchanged_status_reads_its_rows_once_and_the_page_shares_them(viewer):
    applied("steady")
    first, queries = status(viewer, "steady")
    assert "steady-decode-0" in first and rows_read(queries)
    again, queries = status(viewer, "steady")
    assert again == first and rows_read(queries) == []
    with CaptureQueriesContext(connection) as queries:
        page = viewer.get("/graphs/steady/")
    assert page.status_code == 200 and "steady-decode-0" in page.content.decode()
    assert rows_read([q["sql"] for q in queries.captured_queries]) == []


def test_a_runtimes_observation_is_shown_by_the_next_poll(viewer):
    graph = applied("observed")
    deployment = graph.deployment
    assert "Pending" in status(viewer, "observed")[0]
    pod = PodStatus(name="observed-decode-0", service="decode", role="decode", phase="Running", ready=True,
                    restarts=4)
    observation_record(deployment, Observation(state="ready", pods=[pod]), observed_generation=1)
    page, queries = status(viewer, "observed")
    assert rows_read(queries) and "Running" in page and "1/1" in page
    observation_record(deployment, Observation(state="ready", pods=[]), observed_generation=1)
    assert "observed-decode-0" not in status(viewer, "observed")[0]


def test_writes_made_in_plain_sql_are_shown_too(viewer):
    graph = applied("plain")
    assert "No events." in status(viewer, "plain")[0]
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO graphs_event (graph_id, at, type, reason, object, message) "
                       "VALUES (%s, %s, 'Warning', 'BackOff', 'plain-decode-0', 'written by another program')",
                       [graph.pk, timezone.now()])
    assert "written by another program" in status(viewer, "plain")[0]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE graphs_pod SET phase = 'CrashLoopBackOff' WHERE name = 'plain-decode-0'")
    assert "CrashLoopBackOff" in status(viewer, "plain")[0]


def test_an_operation_and_the_planner_decision_it_executes_are_shown_as_they_move(viewer, users):
    graph = applied("planned")
    status(viewer, "planned")
    decision = PlannerDecision.objects.create(graph=graph, source="virtual-connector", decision_id=7,
                                              at=timezone.now(), desired={"decode": 2})
    op = Operation.objects.create(graph=graph, kind="scale", state="running", requested_by=users["operator"],
                                  via="planner", params={"decision": decision.pk})
    page = status(viewer, "planned")[0]
    assert f"Operation #{op.pk}: scale is running" in page and "for Planner decision 7 (received)" in page
    PlannerDecision.objects.filter(pk=decision.pk).update(state="executed")
    Operation.objects.filter(pk=op.pk).update(state="succeeded", result="decode: 1 -> 2")
    page = status(viewer, "planned")[0]
    assert f"Operation #{op.pk}" not in page and "decode: 1 -> 2" in page and "(executed)" in page


def test_a_change_made_on_the_cluster_by_someone_else_is_shown(viewer):
    graph = applied("scaled", runtime="kubernetes")
    Deployment.objects.filter(graph=graph).update(ownership={"pools": [{"service": "decode", "manifest": 1}]})
    assert "Scaling decisions seen on the cluster" not in status(viewer, "scaled")[0]
    ReplicaChange.objects.create(graph=graph, at=timezone.now(), service="decode", before=1, after=3,
                                 manager="kubectl-scale", actor="kubectl", via="dgd")
    assert "decode</strong> 1 → 3 by kubectl" in status(viewer, "scaled")[0]


def test_a_redeployment_starts_from_its_own_pods(viewer):
    graph = applied("again")
    assert "again-decode-0" in status(viewer, "again")[0]
    with transaction.atomic():  # the pods go with their deployment, a new one starts with none
        Deployment.objects.filter(graph=graph).delete()
        Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="pending")
    assert "again-decode-0" not in status(viewer, "again")[0]


def test_a_deleted_graph_takes_its_stamp_with_it(viewer):
    graph = applied("gone")
    status(viewer, "gone")
    assert StatusStamp.objects.filter(graph_id=graph.pk).exists()
    pk = graph.pk
    Graph.objects.filter(pk=pk).delete()
    assert not StatusStamp.objects.filter(graph_id=pk).exists()
    assert viewer.get("/graphs/gone/status/", **HTMX).status_code == 404


def test_an_observation_that_finds_nothing_new_keeps_the_stamp(viewer):
    graph = applied("rest")
    pod = PodStatus(name="rest-decode-0", service="decode", role="decode", phase="Running", ready=True)
    observation_record(graph.deployment, Observation(state="ready", pods=[pod]), observed_generation=1)
    stamp = StatusStamp.objects.get(graph_id=graph.pk).value
    status(viewer, "rest")
    observation_record(graph.deployment, Observation(state="ready", pods=[pod]), observed_generation=1)
    # An update counts only when it changed what is shown (SQLite too, since migration 0011).
    assert StatusStamp.objects.get(graph_id=graph.pk).value == stamp
    assert rows_read(status(viewer, "rest")[1]) == []
    observation_record(graph.deployment, Observation(state="ready", pods=[PodStatus(
        name="rest-decode-0", service="decode", role="decode", phase="Running", ready=True, restarts=1)]),
        observed_generation=1)
    assert StatusStamp.objects.get(graph_id=graph.pk).value > stamp
    assert "rest-decode-0" in status(viewer, "rest")[0]


def test_a_workers_heartbeat_leaves_the_stamp_alone(users):
    graph = applied("beating")
    op = Operation.objects.create(graph=graph, kind="apply", state="running", requested_by=users["operator"])
    stamp = StatusStamp.objects.get(graph_id=graph.pk).value
    assert Operation.renew(op.pk, lease_seconds=20)
    if connection.vendor == "postgresql":  # the lease is not shown: its renewal changes nothing shown
        assert StatusStamp.objects.get(graph_id=graph.pk).value == stamp
    Operation.finish(op.pk, "succeeded", result="applied")
    assert StatusStamp.objects.get(graph_id=graph.pk).value > stamp
