"""Leaving a field another manager owns: the product's plain apply leaves it out of its apply
configuration (for a list-map item, all but the item's key fields), so the other manager stays its
sole owner and its next change does not conflict with us; a forced apply takes it.

Server-side apply makes every manager that applies a field an owner of it, same value or not: in
kubernetes-sigs/structured-merge-diff at 15d075473efece0367330fd20a7cc2aad2eeb998,
merge/multiple_appliers_test.go: "same_value_no_conflict" (a second applier of the same value is a
second owner) and "unset_scalar_shared_with_applier" (a manager that stops applying a field gives
up its share; the other owner keeps the field and its value).

The owners are read from ``metadata.managedFields`` directly (FieldsV1), not with product code."""

from __future__ import annotations

import pytest
from kubernetes import client

from graphs import operations
from graphs.models import Deployment
from graphs.runtimes.kubernetes.watch import ClusterWatcher
from tests.k8s_helpers import CLUSTER, NS, apply, make_graph, run

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

G, V, DGD = "nvidia.com", "v1beta1", "dynamographdeployments"
DECODE_REPLICAS = ("f:spec", "f:components", 'k:{"name":"decode"}', "f:replicas")


def _managers_of(obj: dict, path: tuple[str, ...]) -> list[str]:
    found = []
    for entry in obj["metadata"].get("managedFields") or []:
        node = entry.get("fieldsV1") or {}
        for seg in path:
            node = node.get(seg) if isinstance(node, dict) else None
            if node is None:
                break
        if node is not None:
            found.append(f"{entry['manager']}/{entry['operation']}")
    return found


def _ops_apply(kube, replicas: int, *, force: bool = False) -> dict:
    """A person's server-side apply of decode's replicas alone, as ``kubectl apply --server-side
    --field-manager ops`` sends it."""
    body = {"apiVersion": f"{G}/{V}", "kind": "DynamoGraphDeployment", "metadata": {"name": "g"},
            "spec": {"components": [{"name": "decode", "replicas": replicas}]}}
    query = [("fieldManager", "ops")] + ([("force", "true")] if force else [])
    data = kube.api_client().call_api(
        f"/apis/{G}/{V}/namespaces/{NS}/{DGD}/g", "PATCH", body=body, query_params=query,
        header_params={"Content-Type": "application/apply-patch+yaml"}, auth_settings=["BearerToken"],
        response_type="object", _return_http_data_only=True)
    return data


def _decode(obj: dict) -> dict:
    return next(c for c in obj["spec"]["components"] if c["name"] == "decode")


def test_a_plain_apply_leaves_another_appliers_count_to_it_alone_and_its_next_change_does_not_conflict(
        cluster, kube, admin_client):
    graph = make_graph()
    assert apply(graph).state == "succeeded"
    _ops_apply(kube, 3, force=True)  # takes the count from us: we applied it first
    live = kube.get("dgd", "g", namespace=NS)
    assert _managers_of(live, DECODE_REPLICAS) == ["ops/Apply"]
    op = apply(graph)
    assert op.state == "succeeded", op.result
    assert 'left .spec.components[name="decode"].replicas at 3 (revision: 1): owned by ops (Apply)' in op.result
    live = kube.get("dgd", "g", namespace=NS)
    assert _decode(live)["replicas"] == 3
    assert _managers_of(live, DECODE_REPLICAS) == ["ops/Apply"]  # not shared with dynamo-control-plane
    # The item itself is still ours: its key field is in our apply.
    assert "dynamo-control-plane/Apply" in _managers_of(live, (*DECODE_REPLICAS[:3], "f:name"))
    # ops changes its count again without force: no conflict with us.
    assert _decode(_ops_apply(kube, 5))["replicas"] == 5
    ClusterWatcher(cluster.pk).watch_once(timeout=0)
    api = admin_client.get(f"/api/graphs/{graph.name}/ownership/").json()
    pool = next(p for p in api["pools"] if p["service"] == "decode")
    assert (pool["live"], pool["owner"], pool["owner_is"]) == (5, "ops", "ops")
    page = admin_client.get(f"/graphs/{graph.name}/").content.decode()
    row = page[page.index('<tr data-pool="decode">'):]
    row = row[:row.index("</tr>")]
    owned_by = row.rsplit("<td>", 1)[1]
    assert owned_by.startswith("ops") and "control plane" not in owned_by


def test_a_forced_apply_takes_the_field_and_leaves_the_other_manager_nothing(cluster, kube):
    graph = make_graph()
    apply(graph)
    _ops_apply(kube, 3, force=True)
    forced = run(operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS,
                                        force=True))
    assert forced.state == "succeeded", forced.result
    live = kube.get("dgd", "g", namespace=NS)
    assert _decode(live)["replicas"] == 1
    assert _managers_of(live, DECODE_REPLICAS) == ["dynamo-control-plane/Apply"]
    # ops keeps what it applied and we did not take: the item's key.
    assert "ops/Apply" in _managers_of(live, (*DECODE_REPLICAS[:3], "f:name"))


def test_the_planners_patched_count_stays_the_planners_alone_after_a_plain_apply(cluster, kube, admin_client):
    # Without an adapter the Planner JSON-patches the DGD (kubernetes_api.py _update_dgd_replicas),
    # an Update by its client's default manager.
    graph = make_graph(planner=True)
    apply(graph)
    index = [c["name"] for c in kube.get("dgd", "g", namespace=NS)["spec"]["components"]].index("decode")
    client.CustomObjectsApi(kube.api_client()).api_client.call_api(
        f"/apis/{G}/{V}/namespaces/{NS}/{DGD}/g", "PATCH", body=[
            {"op": "test", "path": f"/spec/components/{index}/name", "value": "decode"},
            {"op": "replace", "path": f"/spec/components/{index}/replicas", "value": 3}],
        header_params={"Content-Type": "application/json-patch+json"}, auth_settings=["BearerToken"],
        response_type="object")
    assert apply(graph).state == "succeeded"
    live = kube.get("dgd", "g", namespace=NS)
    assert _managers_of(live, DECODE_REPLICAS) == ["OpenAPI-Generator/Update"]
    ClusterWatcher(cluster.pk).watch_once(timeout=0)
    pool = next(p for p in Deployment.objects.get(graph=graph).ownership["pools"] if p["service"] == "decode")
    assert (pool["owner"], pool["owner_is"]) == ("OpenAPI-Generator", "the Planner")


def test_a_count_the_adapters_operator_wrote_stays_the_operators_after_a_plain_apply(cluster, kube):
    graph = make_graph(adapter=True)
    apply(graph)
    client.CustomObjectsApi(kube.api_client()).patch_namespaced_custom_object_scale(
        G, V, NS, "dynamographdeploymentscalingadapters", "g-decode", {"spec": {"replicas": 4}})
    kube.settle()  # the operator copies the adapter's count into the DGD
    live = kube.get("dgd", "g", namespace=NS)
    assert _decode(live)["replicas"] == 4
    assert _managers_of(live, DECODE_REPLICAS) == ["dynamo-operator/Update"]
    op = apply(graph)
    assert op.state == "succeeded", op.result
    live = kube.get("dgd", "g", namespace=NS)
    assert _decode(live)["replicas"] == 4
    assert _managers_of(live, DECODE_REPLICAS) == ["dynamo-operator/Update"]


def test_leaving_a_field_out_keeps_the_items_key_and_drops_what_it_empties():
    from core.dgd import ownership

    body = {"spec": {"components": [{"name": "decode", "replicas": 1,
                                     "resources": {"limits": {"gpu": "1"}}}]}}
    item = ("f:spec", "f:components", 'k:{"name":"decode"}')
    assert ownership.leave_out(body, (*item, "f:replicas")) is True
    assert ownership.leave_out(body, (*item, "f:resources", "f:limits", "f:gpu")) is True
    assert ownership.leave_out(body, (*item, "f:name")) is False  # a key field names the item: it stays
    assert body == {"spec": {"components": [{"name": "decode"}]}}
