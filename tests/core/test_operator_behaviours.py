"""Five behaviours of the Dynamo operator, each written from its source (ai-dynamo/dynamo,
``deploy/operator/``), enforced by the emulator's fake operator as the real one does, and handled
by the product: immutable component topology, a failing reconcile, the scaling-adapter webhook
rule, the shared-memory volume, and names with dots."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from clusters.resources import service_name
from core.errors import OperationRefused
from core.specio import spec_from_data
from graphs import operations
from graphs.models import Deployment, Pod
from graphs.runtimes.kubernetes.watch import ClusterWatcher
from graphs.services import graph_update
from tests.k8s_helpers import CLUSTER, NS, apply, make_graph, run, scale

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

G, V, DGD, DGDSA = "nvidia.com", "v1beta1", "dynamographdeployments", "dynamographdeploymentscalingadapters"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"


def _api(kube, user: str | None = None):
    if user is None:
        return client.CustomObjectsApi(kube.api_client())
    kube.add_user(f"token-{user}", user)
    return client.CustomObjectsApi(kube.api_client(token=f"token-{user}"))


def _dgd(name="t", *, comps=("Frontend", "decode"), adapter=False, shm=None):
    components = []
    for comp in comps:
        entry = {"name": comp, "type": "frontend" if comp == "Frontend" else "decode", "replicas": 1,
                 "podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}}}
        if comp != "Frontend" and adapter:
            entry["scalingAdapter"] = {}
        if comp != "Frontend" and shm is not None:
            entry["sharedMemorySize"] = shm
        components.append(entry)
    return {"apiVersion": f"{G}/{V}", "kind": "DynamoGraphDeployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"backendFramework": "vllm", "components": components}}


def _status(err: ApiException) -> dict:
    import json

    return json.loads(err.body)


def _revise(graph, change):
    data = graph.head.graph_spec.model_dump()
    change(data)
    graph_update(graph=graph, spec=spec_from_data(data), message="changed")
    graph.refresh_from_db()
    return graph


# -- 1. component topology is immutable ------------------------------------------------------------
# deploy/operator/internal/webhook/validation/dynamographdeployment.go, validateDynamoGraphDeploymentSpecUpdate


def test_the_webhook_refuses_adding_or_removing_a_component(kube):
    api = _api(kube)
    kube.simulate_operator = True
    api.create_namespaced_custom_object(G, V, NS, DGD, _dgd())
    kube.settle()
    live = api.get_namespaced_custom_object(G, V, NS, DGD, "t")
    grown = {**live, "spec": {**live["spec"], "components": [*live["spec"]["components"], {
        **live["spec"]["components"][1], "name": "prefill", "type": "prefill"}]}}
    with pytest.raises(ApiException) as err:
        api.replace_namespaced_custom_object(G, V, NS, DGD, "t", grown)
    assert err.value.status == 422
    assert _status(err.value)["message"] == (
        'admission webhook "vdynamographdeployment.kb.io" denied the request: DynamoGraphDeployment.nvidia.com '
        '"t" is invalid: spec.components: Forbidden: component topology is immutable and cannot be modified '
        'after creation: components added: [prefill]')
    shrunk = {**live, "spec": {**live["spec"], "components": live["spec"]["components"][:1]}}
    with pytest.raises(ApiException) as err:
        api.replace_namespaced_custom_object(G, V, NS, DGD, "t", shrunk)
    assert "components removed: [decode]" in _status(err.value)["message"]
    assert [c["name"] for c in api.get_namespaced_custom_object(G, V, NS, DGD, "t")["spec"]["components"]] == [
        "Frontend", "decode"]


def test_the_product_detects_a_topology_change_before_applying_and_recreates_on_confirmation(cluster, kube):
    graph = make_graph()
    apply(graph)
    _revise(graph, lambda d: d["services"].append({**next(s for s in d["services"] if s["name"] == "decode"),
                                                   "name": "decode2"}))
    kube.clear_requests()
    with pytest.raises(OperationRefused) as refused:
        operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS)
    assert "revision 2 adds decode2" in str(refused.value)
    assert "component topology is immutable" in str(refused.value)
    assert "stops all of its pods (Frontend, prefill, decode)" in str(refused.value)
    assert not kube.find_requests("PATCH")  # nothing reached the cluster
    with pytest.raises(OperationRefused) as unconfirmed:
        operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS, recreate=True,
                                 confirm="wrong")
    assert "confirm with the graph's name (g)" in str(unconfirmed.value)
    old_uid = kube.get("dgd", "g", namespace=NS)["metadata"]["uid"]
    op = run(operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS,
                                      recreate=True, confirm="g"))
    assert op.state == "succeeded", op.result
    assert "deleted and recreated" in op.result
    live = kube.get("dgd", "g", namespace=NS)
    assert live["metadata"]["uid"] != old_uid
    assert [c["name"] for c in live["spec"]["components"]] == ["Frontend", "prefill", "decode", "decode2"]


def test_the_graph_page_offers_delete_and_recreate_naming_the_downtime(cluster, kube, admin_client):
    graph = make_graph()
    apply(graph)
    frontend = graph.head.graph_spec.service("Frontend")
    _revise(graph, lambda d: d["services"].append({"name": "Planner", "role": "planner", "replicas": 1,
                                                   "image": frontend.image, "command": ["python3", "-m",
                                                                                        "dynamo.planner"]}))
    page = admin_client.get(f"/graphs/{graph.name}/").content.decode()
    assert "Revision 2 adds Planner" in page
    assert "stops all of its pods" in page and "Delete and recreate" in page
    refused = admin_client.post(f"/api/graphs/{graph.name}/apply/", {"runtime": "kubernetes", "cluster": CLUSTER,
                                                                      "namespace": NS}, content_type="application/json")
    assert refused.status_code in (400, 409) and "component topology is immutable" in refused.content.decode()


# -- 2. a failing reconcile ------------------------------------------------------------------------
# deploy/operator/internal/controller/dynamographdeployment_controller.go, Reconcile's deferred status update


def test_a_failing_reconcile_shows_the_operators_message_and_a_failed_state(cluster, kube):
    graph = make_graph()
    apply(graph)
    watcher = ClusterWatcher(cluster.pk)
    watcher.watch_once(timeout=0)
    error = "failed to reconcile Dynamo components deployments: no multinode orchestrator available"
    kube.operator.fail_reconcile["g"] = error
    _revise(graph, lambda d: next(s for s in d["services"] if s["name"] == "decode").update(replicas=2))
    assert apply(graph).state == "succeeded"
    live = kube.get("dgd", "g", namespace=NS)
    assert live["status"]["state"] == "failed"
    assert live["status"]["observedGeneration"] == 1 and live["metadata"]["generation"] == 2
    [ready] = live["status"]["conditions"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "failed_to_reconcile_the_resources",
                                                                    error)
    watcher.watch_once(timeout=1)
    dep = Deployment.objects.get(graph=graph)
    assert dep.state == "failed"
    assert error in dep.message and "generation 2" in dep.message
    assert "has not reconciled generation" not in dep.message


# -- 3. the scaling-adapter webhook ----------------------------------------------------------------
# deploy/operator/internal/webhook/validation/shared_v1beta1.go:663-670@2a6da14c (the component update rule;
# shared.go, which held it before, was deleted upstream in June 2026)
# and deploy/operator/internal/webhook/common.go (CanModifyDGDReplicas)


def _replicas_patch(api, value, index=1, manager=None):
    kwargs = {"field_manager": manager} if manager else {}
    return api.api_client.call_api(
        f"/apis/{G}/{V}/namespaces/{NS}/{DGD}/t", "PATCH",
        body=[{"op": "replace", "path": f"/spec/components/{index}/replicas", "value": value}],
        query_params=[("fieldManager", kwargs["field_manager"])] if manager else [],
        header_params={"Content-Type": "application/json-patch+json"}, auth_settings=["BearerToken"],
        response_type="object")


def test_the_rule_fires_on_scaling_adapter_in_the_old_or_the_new_spec_adapter_object_or_not(kube):
    kube.simulate_operator = True
    api = _api(kube)
    api.create_namespaced_custom_object(G, V, NS, DGD, _dgd())
    kube.settle()
    live = api.get_namespaced_custom_object(G, V, NS, DGD, "t")
    # new spec only: scalingAdapter added in the same write as a replica change (no adapter object yet)
    added = {**live, "spec": {**live["spec"], "components": [live["spec"]["components"][0], {
        **live["spec"]["components"][1], "scalingAdapter": {}, "replicas": 3}]}}
    with pytest.raises(ApiException) as err:
        api.replace_namespaced_custom_object(G, V, NS, DGD, "t", added)
    assert err.value.status == 422
    assert "spec.components[1].replicas: Forbidden: cannot be modified directly when scaling adapter is enabled" \
        in _status(err.value)["message"]
    assert kube.get("dgdsa", "t-decode", namespace=NS) is None
    api.replace_namespaced_custom_object(G, V, NS, DGD, "t", {**added, "spec": {
        **added["spec"], "components": [added["spec"]["components"][0],
                                        {**added["spec"]["components"][1], "replicas": 1}]}})
    kube.settle()
    assert kube.get("dgdsa", "t-decode", namespace=NS) is not None
    # old spec only: dropping scalingAdapter while changing replicas
    live = api.get_namespaced_custom_object(G, V, NS, DGD, "t")
    dropped = dict(live["spec"]["components"][1])
    dropped.pop("scalingAdapter")
    with pytest.raises(ApiException) as err:
        api.replace_namespaced_custom_object(G, V, NS, DGD, "t", {**live, "spec": {
            **live["spec"], "components": [live["spec"]["components"][0], {**dropped, "replicas": 4}]}})
    assert err.value.status == 422


def test_the_rule_exempts_by_identity_not_by_field_manager(kube):
    kube.simulate_operator = True
    _api(kube).create_namespaced_custom_object(G, V, NS, DGD, _dgd(adapter=True))
    kube.settle()
    with pytest.raises(ApiException) as err:  # a person calling themselves "planner" is still refused
        _replicas_patch(_api(kube), 2, manager="planner")
    assert err.value.status == 422
    with pytest.raises(ApiException):  # a service account with another name too
        _replicas_patch(_api(kube, f"system:serviceaccount:{NS}:my-autoscaler"), 2)
    planner = _api(kube, "system:serviceaccount:anywhere:planner-serviceaccount")
    body, code, _headers = _replicas_patch(planner, 2)
    assert code == 200 and body["spec"]["components"][1]["replicas"] == 2  # admitted
    kube.settle()
    # ... and the adapter, the source of truth, sets it back (the operator copies its count)
    assert kube.get("dgd", "t", namespace=NS)["spec"]["components"][1]["replicas"] == 1


def test_older_releases_answer_403_and_the_product_reads_both_as_the_webhook(cluster, kube):
    kube.operator.webhook_status = 403
    kube.simulate_operator = True
    _api(kube).create_namespaced_custom_object(G, V, NS, DGD, _dgd(adapter=True))
    kube.settle()
    with pytest.raises(ApiException) as err:
        _replicas_patch(_api(kube), 2)
    assert (err.value.status, _status(err.value)["reason"]) == (403, "Forbidden")
    kube.operator.webhook_status = 422
    # The product: a 422 from the webhook on its replica patch is not a failed test op, so it is
    # not retried; the operation fails with the webhook's words.
    graph = make_graph()
    apply(graph)
    kube.inject("PATCH", r"/dynamographdeployments/g$", status=422, times=None, body={
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422, "reason": "Invalid",
        "message": 'admission webhook "vdynamographdeployment.kb.io" denied the request: DynamoGraphDeployment.'
                   'nvidia.com "g" is invalid: spec.components[2].replicas: Forbidden: cannot be modified directly '
                   'when scaling adapter is enabled'})
    kube.clear_requests()
    op = scale(graph, "decode", 3)
    assert op.state == "failed"
    assert "cannot be modified directly when scaling adapter is enabled" in op.result
    assert len(kube.find_requests("PATCH", r"/dynamographdeployments/g$")) == 1


def test_the_product_keeps_live_replicas_of_a_component_that_gains_an_adapter(cluster, kube):
    graph = make_graph()
    apply(graph)
    _revise(graph, lambda d: next(s for s in d["services"] if s["name"] == "decode").update(
        scaling_adapter=True, replicas=3))
    op = apply(graph)
    assert op.state == "succeeded", op.result  # the webhook would refuse 1 -> 3 in this very write
    assert "decode keeps its live 1 replicas" in op.result
    assert kube.get("dgdsa", "g-decode", namespace=NS)["spec"]["replicas"] == 1
    assert scale(graph, "decode", 3).state == "succeeded"  # through the adapter now
    assert kube.get("dgd", "g", namespace=NS)["spec"]["components"][2]["replicas"] == 3


# -- 4. shared memory -----------------------------------------------------------------------------
# deploy/operator/internal/dynamo/shared_memory.go and internal/consts/consts.go
# (KubeValueNameSharedMemory "shared-memory", DefaultSharedMemoryMountPath "/dev/shm", DefaultSharedMemorySize "8Gi")


@pytest.mark.parametrize(("size", "volume"), [
    (None, {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}),
    ("32Gi", {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}),
    ("0", None),
])
def test_pods_get_the_operators_shared_memory_volume(kube, size, volume):
    kube.simulate_operator = True
    _api(kube).create_namespaced_custom_object(G, V, NS, DGD, _dgd(shm=size))
    kube.settle()
    pod = next(p for p in client.CoreV1Api(kube.api_client()).list_namespaced_pod(
        NS, label_selector="nvidia.com/dynamo-component=decode").items)
    volumes = [(v.name, v.empty_dir.medium, v.empty_dir.size_limit) for v in pod.spec.volumes or []
               if v.name == "shared-memory"]
    mounts = [(m.name, m.mount_path) for m in pod.spec.containers[0].volume_mounts or []]
    if volume is None:
        assert volumes == [] and mounts == []
    else:
        assert volumes == [(volume["name"], volume["emptyDir"]["medium"], volume["emptyDir"]["sizeLimit"])]
        assert mounts == [("shared-memory", "/dev/shm")]


def test_the_product_reads_the_operators_volume_and_warns_of_nothing(cluster, kube):
    from graphs.diagnosis import diagnose

    graph = make_graph()
    apply(graph)
    ClusterWatcher(cluster.pk).watch_once(timeout=0)
    dep = Deployment.objects.get(graph=graph)
    pods = list(Pod.objects.filter(deployment=dep))
    assert {p.service: p.shm_bytes for p in pods}["decode"] == 16 * 2**30  # the revision's sharedMemorySize
    assert not [d for d in diagnose(dep, pods) if "/dev/shm" in d.title]


# -- 5. names with dots --------------------------------------------------------------------------
# deploy/operator/internal/dynamo/graph.go, NormalizeKubeResourceName: lower case, dots to "-"


def test_services_of_a_dgd_with_a_dot_in_its_name_are_normalised(kube):
    kube.simulate_operator = True
    _api(kube).create_namespaced_custom_object(G, V, NS, DGD, _dgd(name="qwen3.5"))
    kube.settle()
    names = {s.metadata.name for s in client.CoreV1Api(kube.api_client()).list_namespaced_service(NS).items}
    assert names == {"qwen3-5-frontend", "qwen3-5-decode"}
    assert service_name("qwen3.5", "Frontend") == "qwen3-5-frontend"
    assert kube.get("dgdsa", "qwen3.5-decode", namespace=NS) is None  # adapters keep the dot: no adapter here


def test_an_imported_dgd_with_a_dot_keeps_its_name_and_gets_the_right_frontend_url(cluster, kube):
    import copy

    from core.dgd.render import render
    from graphs import services
    from graphs.runtimes.kubernetes.watch import ClusterWatcher

    dotted = copy.deepcopy(render(make_graph().head.graph_spec, "nvidia.com/v1beta1"))
    dotted["metadata"]["name"] = "qwen3.5-disagg"
    imported, _revision, _report = services.graph_import(obj=dotted)
    assert imported.name == "qwen3-5-disagg"  # graph names are DNS labels (they are in URLs)
    assert render(imported.head.graph_spec, "nvidia.com/v1beta1")["metadata"]["name"] == "qwen3.5-disagg"
    assert apply(imported).state == "succeeded"
    assert kube.get("dgd", "qwen3.5-disagg", namespace=NS) is not None
    ClusterWatcher(cluster.pk).watch_once(timeout=0)
    dep = Deployment.objects.get(graph=imported)
    assert dep.endpoint == f"http://qwen3-5-disagg-frontend.{NS}.svc.cluster.local:8000"
    assert kube.get("services", "qwen3-5-disagg-frontend", namespace=NS)["spec"]["ports"][0]["port"] == 8000
