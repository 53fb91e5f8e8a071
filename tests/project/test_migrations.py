"""Data migrations, run on the suite's own database (PostgreSQL in CI, SQLite by default)."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("graphs", "0004_cluster_ownership"), ("clusters", "0001_initial")]
AFTER = [("graphs", "0005_deployment_cluster_fk")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_a_deployments_cluster_name_becomes_its_cluster_key_and_back():
    old = _migrate(BEFORE)
    cluster = old.get_model("clusters", "Cluster").objects.create(name="prod", namespaces=["llm"])
    Graph, Deployment = old.get_model("graphs", "Graph"), old.get_model("graphs", "Deployment")
    on_prod = Deployment.objects.create(graph=Graph.objects.create(name="a"), runtime="kubernetes", cluster="prod",
                                        namespace="llm")
    gone = Deployment.objects.create(graph=Graph.objects.create(name="b"), runtime="kubernetes", cluster="removed")
    local = Deployment.objects.create(graph=Graph.objects.create(name="c"), runtime="local")
    try:
        new = _migrate(AFTER)
        Deployment = new.get_model("graphs", "Deployment")
        assert Deployment.objects.get(pk=on_prod.pk).cluster_id == cluster.pk
        assert Deployment.objects.get(pk=gone.pk).cluster_id is None  # no such cluster is registered
        assert Deployment.objects.get(pk=local.pk).cluster_id is None
        back = _migrate(BEFORE).get_model("graphs", "Deployment")
        assert dict(back.objects.values_list("pk", "cluster")) == {on_prod.pk: "prod", gone.pk: "", local.pk: ""}
    finally:
        # Every app back at its latest migration: going back to graphs 0004 also unapplied the
        # migrations of every app that depends on graphs (repos, sizing...), and the tests that
        # run after this one on the same database need their tables.
        _migrate(_leaves())


def _leaves() -> list[tuple[str, str]]:
    executor = MigrationExecutor(connection)
    return list(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_studies_that_ended_and_did_not_keep_their_variants_are_marked_for_teardown():
    old = _migrate([("benchmarks", "0003_one_active_run_per_graph_from_the_job_model"),
                    ("graphs", "0008_graph_archived")])
    Graph, Study = old.get_model("graphs", "Graph"), old.get_model("benchmarks", "Study")
    made = {}
    for name, state, keep in (("ok", "succeeded", False), ("bad", "failed", False), ("stop", "cancelled", False),
                              ("kept", "succeeded", True), ("busy", "running", False)):
        made[name] = Study.objects.create(graph=Graph.objects.create(name=name), profile="custom", params={},
                                          state=state, keep_variants=keep).pk
    try:
        new = _migrate([("benchmarks", "0004_study_teardown")]).get_model("benchmarks", "Study")
        marked = {name for name, pk in made.items() if new.objects.get(pk=pk).teardown_pending}
        assert marked == {"ok", "bad", "stop"}  # not what keeps its variants, not what still runs
    finally:
        _migrate(_leaves())


BEFORE_MOVE = [("playground", "0004_graph_exposure"), ("contenttypes", "0002_remove_content_type_name")]


def _before_move():
    """Every endpoint migration unapplied (and playground's 0005 with them): the app state of
    the tables' first home."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([("endpoint", None), *BEFORE_MOVE])
    # The graphs app stays at its latest migration: its model as the database has it now.
    graphs = [node for node in executor.loader.graph.leaf_nodes() if node[0] == "graphs"]
    return executor.loader.project_state([*BEFORE_MOVE, *graphs]).apps


@pytest.mark.django_db(transaction=True)
def test_the_endpoints_models_move_apps_with_their_rows_and_content_types():
    """Policies, API limits and exposures moved from the playground app to the endpoint app in
    Django's state only: the rows stay in their tables, and their content types follow."""
    old = _before_move()
    user = old.get_model("auth", "User").objects.create(username="moved")
    graph = old.get_model("graphs", "Graph").objects.create(name="moved")
    old.get_model("playground", "PlaygroundPolicy").objects.create(graph_id=graph.pk, viewers_may_chat=True)
    old.get_model("playground", "ApiLimit").objects.create(user_id=user.pk, requests_per_minute=7)
    old.get_model("playground", "GraphExposure").objects.create(graph_id=graph.pk, host="llm.example.com")
    ContentType = old.get_model("contenttypes", "ContentType")
    ContentType.objects.get_or_create(app_label="playground", model="apilimit")
    try:
        new = _migrate(_leaves())
        assert new.get_model("endpoint", "PlaygroundPolicy").objects.get(graph_id=graph.pk).viewers_may_chat
        assert new.get_model("endpoint", "ApiLimit").objects.get(user_id=user.pk).requests_per_minute == 7
        assert new.get_model("endpoint", "GraphExposure").objects.get(graph_id=graph.pk).host == "llm.example.com"
        labels = set(new.get_model("contenttypes", "ContentType").objects.filter(model="apilimit")
                     .values_list("app_label", flat=True))
        assert labels == {"endpoint"}
        back = _before_move()
        assert back.get_model("playground", "ApiLimit").objects.get(user_id=user.pk).requests_per_minute == 7
        assert set(back.get_model("contenttypes", "ContentType").objects.filter(model="apilimit")
                   .values_list("app_label", flat=True)) == {"playground"}
    finally:
        _migrate(_leaves())


@pytest.mark.django_db(transaction=True)
def test_stored_graphs_get_their_labels_and_search_text_from_their_head():
    old = _migrate([("graphs", "0011_status_notify")])
    Graph, Revision = old.get_model("graphs", "Graph"), old.get_model("graphs", "Revision")
    graph = Graph.objects.create(name="old", description="kept for years")
    head = Revision.objects.create(graph=graph, number=1, model="org/m", spec={
        "name": "old", "model": "org/m", "metadata_extra": {"labels": {"team": "ml", "n": 3}}})
    Graph.objects.filter(pk=graph.pk).update(head=head)
    bare = Graph.objects.create(name="bare")
    try:
        new = _migrate([("graphs", "0013_graph_search_text")])
        assert new.get_model("graphs", "Revision").objects.get(pk=head.pk).labels == {"team": "ml", "n": "3"}
        Graph = new.get_model("graphs", "Graph")
        assert Graph.objects.get(pk=graph.pk).search_text == "old\nkept for years\norg/m"
        assert Graph.objects.get(pk=bare.pk).search_text == "bare\n\n"
    finally:
        _migrate(_leaves())


@pytest.mark.django_db(transaction=True)
def test_stored_graphs_search_in_one_case_and_carry_their_head_s_labels_and_back():
    old = _migrate([("graphs", "0013_graph_search_text")])
    Graph, Revision = old.get_model("graphs", "Graph"), old.get_model("graphs", "Revision")
    graph = Graph.objects.create(name="old", description="Kept for YEARS in Straße 9")
    head = Revision.objects.create(graph=graph, number=1, model="Org/M", labels={"team": "ml"},
                                   spec={"name": "old", "model": "Org/M"})
    Graph.objects.filter(pk=graph.pk).update(head=head)
    bare = Graph.objects.create(name="bare")
    try:
        Graph = _migrate([("graphs", "0014_graph_labels_folded_search")]).get_model("graphs", "Graph")
        assert Graph.objects.get(pk=graph.pk).search_text == "old\nkept for years in strasse 9\norg/m"
        assert Graph.objects.get(pk=graph.pk).labels == {"team": "ml"}
        assert Graph.objects.get(pk=bare.pk).labels == {}
        Graph = _migrate([("graphs", "0013_graph_search_text")]).get_model("graphs", "Graph")
        assert Graph.objects.get(pk=graph.pk).search_text == "old\nKept for YEARS in Straße 9\nOrg/M"
    finally:
        _migrate(_leaves())
