"""Who owns a pool's replicas on a cluster, from managedFields, through the watch: a Planner-managed
graph whose decisions arrive on the adapter's ``/scale`` as the Planner's own service account
(``planner-serviceaccount``, no fieldManager: its client's ``OpenAPI-Generator``, as
``dynamo/planner/connectors/clients/kubernetes_api.py`` does it), drift against the stored revision
with autoscaler-owned fields set apart, and the graph page showing both."""

from __future__ import annotations

import pytest
from kubernetes import client

from graphs.models import Deployment, ReplicaChange
from graphs.runtimes.kubernetes.watch import ClusterWatcher
from tests.k8s_helpers import NS, apply, make_graph

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

PLANNER_SA = f"system:serviceaccount:{NS}:planner-serviceaccount"
G, V, DGDSA, DGD = "nvidia.com", "v1beta1", "dynamographdeploymentscalingadapters", "dynamographdeployments"


@pytest.fixture
def watcher(cluster):
    return ClusterWatcher(cluster.pk)


def _planner_api(kube):
    """CustomObjectsApi as the Planner builds it, authenticated as its service account."""
    kube.add_user("planner-token", PLANNER_SA)
    return client.CustomObjectsApi(kube.api_client(token="planner-token"))


def _pool(graph, service):
    dep = Deployment.objects.get(graph=graph)
    return next(p for p in dep.ownership["pools"] if p["service"] == service)


def test_planner_decisions_arrive_through_the_watch_with_the_planners_field_manager(cluster, kube, watcher,
                                                                                   admin_client):
    graph = make_graph(adapter=True, planner=True)
    apply(graph)
    watcher.watch_once(timeout=0)
    before = _pool(graph, "decode")
    assert (before["manifest"], before["adapter"], before["live"]) == (1, 1, 1)
    assert before["owner_is"] == "the Dynamo operator" and before["via"] == "adapter"
    planner = _planner_api(kube)
    planner.patch_namespaced_custom_object_scale(G, V, NS, DGDSA, "g-decode", {"spec": {"replicas": 3}})
    kube.settle()
    watcher.watch_once(timeout=1)
    pool = _pool(graph, "decode")
    assert (pool["manifest"], pool["adapter"], pool["live"], pool["ready"]) == (1, 3, 3, 3)
    assert (pool["owner"], pool["owner_is"], pool["autoscaled"]) == ("OpenAPI-Generator", "the Planner", True)
    planner.patch_namespaced_custom_object_scale(G, V, NS, DGDSA, "g-decode", {"spec": {"replicas": 2}})
    kube.settle()
    watcher.watch_once(timeout=1)
    changes = list(ReplicaChange.objects.filter(graph=graph).order_by("at", "id"))
    assert [(c.service, c.before, c.after, c.manager, c.actor, c.via) for c in changes] == [
        ("decode", 1, 3, "OpenAPI-Generator", "the Planner", "adapter"),
        ("decode", 3, 2, "OpenAPI-Generator", "the Planner", "adapter")]
    assert changes[0].at <= changes[1].at
    # The Planner's count is not drift: the adapter owns the field.
    dep = Deployment.objects.get(graph=graph)
    assert dep.ownership["drift"] == []
    [ignored] = dep.ownership["ignored"]
    assert ignored["field"] == '.spec.components[name="decode"].replicas'
    assert (ignored["revision"], ignored["live"]) == (1, 2)
    assert ignored["why_ignored"] == "owned by the scaling adapter of decode"
    # ... and the Planner timeline has them as observed decisions, with the pools' replicas around them
    # (decisions and replicas come from the status cache; no Prometheus is needed for them).
    timeline = admin_client.get(f"/api/graphs/{graph.name}/planner/?window=15m").json()
    assert [(d["source"], d["before"], d["desired"], d["state"], d["actor"]) for d in timeline["decisions"]] == [
        ("kubernetes-watch", {"decode": 1}, {"decode": 3}, "observed", "OpenAPI-Generator"),
        ("kubernetes-watch", {"decode": 3}, {"decode": 2}, "observed", "OpenAPI-Generator")]
    assert "through the /scale of its scaling adapter" in timeline["decisions"][0]["reason"]
    assert [v for _t, v in timeline["replicas"]["decode"]["desired"]] == [1, 3, 2]
    assert timeline["replicas"]["decode"]["ready"][-1][1] == 2


def test_a_plain_apply_leaves_the_planners_count_and_a_scale_of_ours_is_no_planner_decision(cluster, kube,
                                                                                            watcher):
    graph = make_graph(adapter=True, planner=True)
    apply(graph)
    watcher.watch_once(timeout=0)
    _planner_api(kube).patch_namespaced_custom_object_scale(G, V, NS, DGDSA, "g-decode", {"spec": {"replicas": 4}})
    kube.settle()
    op = apply(graph)
    assert op.state == "succeeded", op.result
    assert "decode keeps its live 4 replicas: its scaling adapter owns the count" in op.result
    assert kube.get("dgdsa", "g-decode", namespace=NS)["spec"]["replicas"] == 4
    watcher.watch_once(timeout=1)
    assert ReplicaChange.objects.filter(graph=graph).count() == 1  # 1 -> 4 by the Planner, nothing from apply


def test_drift_shows_a_hand_edit_with_its_owner_and_ignores_what_autoscalers_own(cluster, kube, watcher):
    graph = make_graph(adapter=True, planner=True)
    apply(graph)
    watcher.watch_once(timeout=0)
    _planner_api(kube).patch_namespaced_custom_object_scale(G, V, NS, DGDSA, "g-decode", {"spec": {"replicas": 2}})
    kube.settle()
    person = client.CustomObjectsApi(kube.api_client())
    # kubectl edit sends a merge patch as field manager kubectl-edit
    dgd = person.get_namespaced_custom_object(G, V, NS, DGD, "g")
    containers = dgd["spec"]["components"][0]["podTemplate"]["spec"]["containers"]
    containers[0]["image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9"
    kube.api_client().call_api(
        f"/apis/{G}/{V}/namespaces/{NS}/{DGD}/g", "PATCH", body=[
            {"op": "replace", "path": "/spec/components/0/podTemplate/spec/containers", "value": containers}],
        query_params=[("fieldManager", "kubectl-edit")],
        header_params={"Content-Type": "application/json-patch+json"}, auth_settings=["BearerToken"],
        response_type="object")
    assert person.get_namespaced_custom_object(G, V, NS, DGD, "g")["spec"]["components"][0]["podTemplate"][
        "spec"]["containers"][0]["image"].endswith(":9.9.9")
    watcher.watch_once(timeout=1)
    dep = Deployment.objects.get(graph=graph)
    [drift] = dep.ownership["drift"]
    assert drift["field"] == '.spec.components[name="Frontend"].podTemplate.spec.containers[name="main"].image'
    assert (drift["revision"], drift["live"]) == ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1",
                                                  "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9")
    assert drift["owners"] == ["kubectl-edit (Update)"]
    assert ".spec.components[name=\"decode\"].replicas" in [d["field"] for d in dep.ownership["ignored"]]


def test_the_graph_page_shows_each_pools_replicas_owner_and_the_drift(cluster, kube, watcher, admin_client):
    graph = make_graph(adapter=True, planner=True)
    apply(graph)
    watcher.watch_once(timeout=0)
    _planner_api(kube).patch_namespaced_custom_object_scale(G, V, NS, DGDSA, "g-decode", {"spec": {"replicas": 3}})
    kube.settle()
    watcher.watch_once(timeout=1)
    page = admin_client.get(f"/graphs/{graph.name}/").content.decode()
    assert "Replicas and their owners" in page
    assert "the Planner" in page and "OpenAPI-Generator" in page
    assert "No drift from revision 1" in page
    assert "owned by the scaling adapter of decode" in page
    api = admin_client.get(f"/api/graphs/{graph.name}/ownership/").json()
    assert {p["service"]: p["adapter"] for p in api["pools"]}["decode"] == 3
    assert api["replica_changes"][0]["actor"] == "the Planner"


def test_the_planner_patching_the_dgd_itself_owns_the_count_until_a_forced_apply_takes_it(cluster, kube, watcher):
    # Without an adapter the Planner JSON-patches the DGD (kubernetes_api.py _update_dgd_replicas).
    graph = make_graph(planner=True)
    apply(graph)
    watcher.watch_once(timeout=0)
    planner = _planner_api(kube)
    index = [c["name"] for c in kube.get("dgd", "g", namespace=NS)["spec"]["components"]].index("decode")
    planner.api_client.call_api(
        f"/apis/{G}/{V}/namespaces/{NS}/{DGD}/g", "PATCH", body=[
            {"op": "test", "path": f"/spec/components/{index}/name", "value": "decode"},
            {"op": "replace", "path": f"/spec/components/{index}/replicas", "value": 3}],
        header_params={"Content-Type": "application/json-patch+json"}, auth_settings=["BearerToken"],
        response_type="object")
    watcher.watch_once(timeout=1)
    pool = _pool(graph, "decode")
    assert (pool["live"], pool["owner"], pool["owner_is"], pool["via"]) == (3, "OpenAPI-Generator", "the Planner",
                                                                           "dgd")
    dep = Deployment.objects.get(graph=graph)
    assert [d["why_ignored"] for d in dep.ownership["ignored"]] == ["owned by the Planner"]
    assert ReplicaChange.objects.get(graph=graph).via == "dgd"
    plain = apply(graph)
    assert 'left .spec.components[name="decode"].replicas at 3 (revision: 1): owned by OpenAPI-Generator' \
        in plain.result
    assert kube.get("dgd", "g", namespace=NS)["spec"]["components"][index]["replicas"] == 3
    from graphs import operations
    from tests.k8s_helpers import CLUSTER, run

    forced = run(operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS,
                                          force=True))
    assert 'took .spec.components[name="decode"].replicas from OpenAPI-Generator (Update): 3 -> 1' in forced.result
    assert kube.get("dgd", "g", namespace=NS)["spec"]["components"][index]["replicas"] == 1


def test_each_planner_decision_is_stamped_with_the_time_its_write_refreshed(cluster, kube, watcher, monkeypatch):
    # The API server stamps a manager's managedFields entry each time its write changes a field
    # (kubernetes/apimachinery eed236ceee2c19c2753a3d93ac0631dc20750454,
    # pkg/util/managedfields/internal/managedfieldsupdater.go); the timeline takes that time.
    from tests.k8s_emulator import apply as field_manager

    graph = make_graph(adapter=True, planner=True)
    apply(graph)
    watcher.watch_once(timeout=0)
    planner = _planner_api(kube)
    for stamp, count in (("2026-01-01T10:00:00Z", 3), ("2026-01-01T11:00:00Z", 2)):
        monkeypatch.setattr(field_manager, "now", lambda stamp=stamp: stamp)
        planner.patch_namespaced_custom_object_scale(G, V, NS, DGDSA, "g-decode", {"spec": {"replicas": count}})
        kube.settle()
        watcher.watch_once(timeout=1)
    changes = list(ReplicaChange.objects.filter(graph=graph).order_by("at", "id"))
    assert [(c.after, c.at.isoformat()) for c in changes] == [(3, "2026-01-01T10:00:00+00:00"),
                                                              (2, "2026-01-01T11:00:00+00:00")]
