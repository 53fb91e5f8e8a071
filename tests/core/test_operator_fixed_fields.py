"""More of the Dynamo operator's validating webhook: besides the component topology, an update may not
change ``spec.backendFramework``, move a component between single-node and multi-node, or add,
remove or change ``spec.topologyConstraint``. The emulator refuses each as the operator does and the
product refuses each before anything is sent.

Source: ai-dynamo/dynamo ``deploy/operator/internal/webhook/validation/dynamographdeployment.go``
``validateDynamoGraphDeploymentSpecUpdate`` (backendFramework, topologyConstraint) and the shared
component rule it calls (``validateDynamoComponentDeploymentSharedSpecUpdate``: multinode), read in the
public code index's newest stored version, whose commit the index does not record (the repository
is too large to fetch here). The backendFramework rule is also asserted by the operator's own
``dynamographdeployment_handler_test.go`` at commit fbedd69331b0ee15eb6971950a194adca4d2b484
("stateful validation failure"); the wording of each message is the field-error form of the newer
source (``field.Invalid``: ``<path>: Invalid value: <value>: <detail>``, kubernetes/apimachinery
eed236ceee2c19c2753a3d93ac0631dc20750454 ``pkg/util/validation/field/errors.go``)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from core.errors import OperationRefused
from core.specio import spec_from_data
from graphs import operations
from graphs.services import graph_update
from tests.k8s_helpers import CLUSTER, NS, apply, make_graph, run

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

G, V, DGD = "nvidia.com", "v1beta1", "dynamographdeployments"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
DENIED = 'admission webhook "vdynamographdeployment.kb.io" denied the request: DynamoGraphDeployment.nvidia.com "t" ' \
         'is invalid: '


def _dgd(*, nodes=None, constraint=None, backend="vllm"):
    worker = {"name": "decode", "type": "decode", "replicas": 1,
              "podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}}}
    if nodes is not None:
        worker["multinode"] = {"nodeCount": nodes}
    spec = {"backendFramework": backend, "components": [
        {"name": "Frontend", "type": "frontend", "replicas": 1,
         "podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}}}, worker]}
    if constraint is not None:
        spec["topologyConstraint"] = constraint
    return {"apiVersion": f"{G}/{V}", "kind": "DynamoGraphDeployment", "metadata": {"name": "t", "namespace": NS},
            "spec": spec}


def _replace(kube, mutate):
    kube.settle()  # the operator's status writes move the resourceVersion
    api = client.CustomObjectsApi(kube.api_client())
    live = api.get_namespaced_custom_object(G, V, NS, DGD, "t")
    mutate(live["spec"])
    return api.replace_namespaced_custom_object(G, V, NS, DGD, "t", live)


def _refused(kube, mutate) -> dict:
    with pytest.raises(ApiException) as err:
        _replace(kube, mutate)
    assert err.value.status == 422
    return json.loads(err.value.body)


def _create(kube, body):
    client.CustomObjectsApi(kube.api_client()).create_namespaced_custom_object(G, V, NS, DGD, body)
    kube.settle()


def test_the_webhook_refuses_a_backend_framework_change(kube):
    _create(kube, _dgd())
    status = _refused(kube, lambda spec: spec.update(backendFramework="sglang"))
    assert status["message"] == DENIED + (
        'spec.backendFramework: Invalid value: "sglang": is immutable and cannot be changed after creation')
    assert status["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.backendFramework",
                                            "message": 'Invalid value: "sglang": is immutable and cannot be changed '
                                                       "after creation"}]
    assert kube.get("dgd", "t", namespace=NS)["spec"]["backendFramework"] == "vllm"


def test_the_webhook_refuses_moving_a_component_between_single_and_multi_node(kube):
    _create(kube, _dgd())
    status = _refused(kube, lambda spec: spec["components"][1].update(multinode={"nodeCount": 2}))
    assert status["message"] == DENIED + (
        'spec.components[1].multinode: Invalid value: {"nodeCount":2}: cannot change node topology between '
        "single-node and multi-node after creation")


def test_a_multinode_component_may_change_its_node_count(kube):
    _create(kube, _dgd(nodes=2))
    assert _replace(kube, lambda spec: spec["components"][1].update(multinode={"nodeCount": 3}))
    status = _refused(kube, lambda spec: spec["components"][1].pop("multinode"))
    assert "spec.components[1].multinode: Invalid value: null: cannot change node topology" in status["message"]


def test_the_webhook_refuses_adding_removing_or_changing_the_topology_constraint(kube):
    _create(kube, _dgd())
    status = _refused(kube, lambda spec: spec.update(topologyConstraint={"clusterTopologyName": "default",
                                                                         "packDomain": "rack"}))
    assert status["message"] == DENIED + (
        'spec.topologyConstraint: Invalid value: {"clusterTopologyName":"default","packDomain":"rack"}: is immutable '
        "and cannot be added, removed, or changed after creation; delete and recreate the DynamoGraphDeployment to "
        "change topology constraints")


def test_a_topology_constraint_set_at_creation_stays_and_may_not_go(kube):
    _create(kube, _dgd(constraint={"clusterTopologyName": "default", "packDomain": "rack"}))
    assert _replace(kube, lambda spec: spec["components"][0].update(replicas=2))  # unrelated: allowed
    status = _refused(kube, lambda spec: spec.pop("topologyConstraint"))
    assert "spec.topologyConstraint: Invalid value: null: is immutable" in status["message"]
    status = _refused(kube, lambda spec: spec["topologyConstraint"].update(packDomain="zone"))
    assert "spec.topologyConstraint: Invalid value:" in status["message"]


def test_several_refusals_come_back_together_as_the_operators_error_list(kube):
    _create(kube, _dgd())

    def both(spec):
        spec["backendFramework"] = "trtllm"
        spec["components"][1]["multinode"] = {"nodeCount": 4}

    status = _refused(kube, both)
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.components[1].multinode",
                                                                 "spec.backendFramework"]
    assert status["message"].startswith(DENIED + "[spec.components[1].multinode: Invalid value:")


# -- the product -----------------------------------------------------------------------------------


def _revise(graph, change):
    data = graph.head.graph_spec.model_dump()
    change(data)
    graph_update(graph=graph, spec=spec_from_data(data), message="changed")
    graph.refresh_from_db()
    return graph


def _backend(name):
    """The graph's ``spec.backendFramework``, as an imported manifest carries it (``spec.extra``)."""
    return lambda d: d["extra"].update(backendFramework=name)


def _decode(change):
    return lambda d: change(next(s for s in d["services"] if s["name"] == "decode"))


def test_the_product_refuses_a_backend_change_before_anything_is_sent(cluster, kube):
    graph = _revise(make_graph(), _backend("vllm"))
    assert apply(graph).state == "succeeded"
    assert kube.get("dgd", "g", namespace=NS)["spec"]["backendFramework"] == "vllm"
    _revise(graph, _backend("sglang"))
    kube.clear_requests()
    with pytest.raises(OperationRefused) as err:
        operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS, via="api")
    assert 'spec.backendFramework: Invalid value: "sglang": is immutable and cannot be changed after creation' \
        in str(err.value)
    assert "apply with recreate" in str(err.value)
    assert not kube.find_requests("PATCH") and not kube.find_requests("DELETE")


def test_the_product_refuses_moving_a_pool_to_multi_node_before_anything_is_sent(cluster, kube):
    graph = make_graph()
    apply(graph)
    _revise(graph, _decode(lambda s: s["extra"].update(multinode={"nodeCount": 2})))
    kube.clear_requests()
    with pytest.raises(OperationRefused) as err:
        operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS, via="api")
    assert ('spec.components[2].multinode: Invalid value: {"nodeCount":2}: cannot change node topology between '
            "single-node and multi-node after creation") in str(err.value)
    assert not kube.find_requests("PATCH")


def test_the_product_sends_a_node_count_change_the_operator_allows(cluster, kube):
    """2 -> 4 nodes keeps the component multi-node: the operator's webhook allows it
    (shared_v1beta1.go@2a6da14c:646 compares IsMultinode only; upstream's envtest "node count-only
    update remains allowed"), so the product applies it in place, without the recreate offer."""
    graph = _revise(make_graph(), _decode(lambda s: s["extra"].update(multinode={"nodeCount": 2})))
    assert apply(graph).state == "succeeded"
    _revise(graph, _decode(lambda s: s["extra"].update(multinode={"nodeCount": 4})))
    kube.clear_requests()
    op = run(operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS, via="api"))
    assert op.state == "succeeded", op.result
    assert not kube.find_requests("DELETE")
    live = kube.get("dgd", "g", namespace=NS)
    assert next(c for c in live["spec"]["components"] if c["name"] == "decode")["multinode"]["nodeCount"] == 4


def test_the_runtime_refuses_it_too_against_the_live_object_and_recreates_on_confirmation(cluster, kube):
    graph = _revise(make_graph(), _backend("vllm"))
    apply(graph)
    _revise(graph, _backend("sglang"))
    kube.clear_requests()
    # The stored manifest no longer says what is live (as after someone else's change): the runtime
    # compares with the live object itself before it sends anything.
    from graphs.models import Deployment

    Deployment.objects.filter(graph=graph).update(manifest={})
    op = run(operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS, via="api"))
    assert op.state == "failed"
    assert 'spec.backendFramework: Invalid value: "sglang": is immutable' in op.result
    assert not kube.find_requests("PATCH") and not kube.find_requests("DELETE")
    Deployment.objects.filter(graph=graph).update(manifest=kube.get("dgd", "g", namespace=NS))
    old_uid = kube.get("dgd", "g", namespace=NS)["metadata"]["uid"]
    op = run(operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS, recreate=True,
                                    confirm=graph.name, via="api"))
    assert op.state == "succeeded", op.result
    assert "deleted and recreated" in op.result
    live = kube.get("dgd", "g", namespace=NS)
    assert live["spec"]["backendFramework"] == "sglang" and live["metadata"]["uid"] != old_uid


def _create_refused(kube, body) -> dict:
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(kube.api_client()).create_namespaced_custom_object(G, V, NS, DGD, body)
    assert err.value.status == 422
    return json.loads(err.value.body)


def test_the_webhook_refuses_a_create_with_a_main_image_that_names_no_release(kube):
    """Creates go through the webhook too (dynamographdeployment_handler.go@2a6da14c:60-80); upstream's
    envtest "component custom image requires runtime version override" (envtest:94) gives the words."""
    body = _dgd()
    body["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["image"] = "registry.example/runtime:custom"
    status = _create_refused(kube, body)
    assert status["message"] == DENIED + (
        "spec.components[1].runtimeVersionOverride: Required value: is required when the specified main container "
        "image has no parseable semantic-version tag")
    assert status["details"]["causes"][0]["reason"] == "FieldValueRequired"
    body["spec"]["components"][1]["runtimeVersionOverride"] = "1.1.0"
    _create(kube, body)  # the override names the release: accepted


def test_the_api_server_evaluates_the_crds_cel_rules_on_create_and_update(kube):
    """The CRD's x-kubernetes-validations (envtest:473 and :499): minAvailable at most replicas, and
    immutable once set (a transition rule, evaluated on update only). No webhook prefix: the API
    server refuses before any webhook is called."""
    body = _dgd()
    body["spec"]["components"][1].update(replicas=1, minAvailable=2)
    status = _create_refused(kube, body)
    assert status["message"] == ('DynamoGraphDeployment.nvidia.com "t" is invalid: spec.components[1]: Invalid value: '
                                 '"object": minAvailable must be less than or equal to replicas unless replicas is 0')
    body["spec"]["components"][1].update(replicas=2, minAvailable=1)
    _create(kube, body)
    status = _refused(kube, lambda spec: spec["components"][1].update(minAvailable=2))
    assert status["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.components[1]",
                                            "message": 'Invalid value: "object": minAvailable is immutable after '
                                                       "creation"}]
