"""The emulator's server-side apply and managedFields over HTTP, against the real DGD CRD, where it
could differ from a real API server; each case cites the upstream code it follows:

* kubernetes-sigs/structured-merge-diff 15d075473efece0367330fd20a7cc2aad2eeb998 (SMD);
* kubernetes/apimachinery eed236ceee2c19c2753a3d93ac0631dc20750454 (``pkg/util/managedfields/internal``);
* kubernetes/apiserver 24a394e516bfda066d7e2221d7d92c052de27c54 (``pkg/endpoints/handlers``).
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.k8s_emulator import KubeEmulator
from tests.k8s_emulator import apply as field_manager

G, V, DGD, NS = "nvidia.com", "v1beta1", "dynamographdeployments", "default"
PATH = f"/apis/{G}/{V}/namespaces/{NS}/{DGD}/g"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"


@pytest.fixture
def kube():
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def clock(monkeypatch):
    """The field manager's clock, moved by hand (its stamps have one-second resolution)."""
    now = {"t": "2026-01-01T00:00:00Z"}
    monkeypatch.setattr(field_manager, "now", lambda: now["t"])
    return now


def _dgd(ports=None, replicas=1):
    main = {"name": "main", "image": IMAGE, **({"ports": ports} if ports is not None else {})}
    return {"apiVersion": f"{G}/{V}", "kind": "DynamoGraphDeployment", "metadata": {"name": "g"},
            "spec": {"backendFramework": "vllm", "components": [
                {"name": "decode", "type": "decode", "replicas": replicas,
                 "podTemplate": {"spec": {"containers": [main]}}}]}}


def _call(kube, method, body, *, manager, content_type, force=False, path=PATH):
    query = [("fieldManager", manager)] + ([("force", "true")] if force else [])
    return kube.api_client().call_api(path, method, body=body, query_params=query,
                                      header_params={"Content-Type": content_type}, auth_settings=["BearerToken"],
                                      response_type="object", _return_http_data_only=True)


def _apply(kube, body, manager="ops", force=False):
    return _call(kube, "PATCH", body, manager=manager, content_type="application/apply-patch+yaml", force=force)


def _entry(obj, manager):
    return next(e for e in obj["metadata"]["managedFields"] if e["manager"] == manager)


def _container(obj):
    return obj["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]


def test_a_port_applied_without_its_defaulted_protocol_is_keyed_by_the_default_and_pruned_later(kube):
    # SMD merge/default_keys_test.go "apply_missing_defaulted_key_A": the missing key takes its
    # schema default (typed/helpers.go keyedAssociativeListItemToPathElement); the merged object is
    # then defaulted (apimachinery structuredmerge.go Apply: objectDefaulter.Default).
    obj = _apply(kube, _dgd(ports=[{"containerPort": 9345}]))
    assert _container(obj)["ports"] == [{"containerPort": 9345, "protocol": "TCP"}]
    containers = _entry(obj, "ops")["fieldsV1"]["f:spec"]["f:components"]['k:{"name":"decode"}'][
        "f:podTemplate"]["f:spec"]["f:containers"]['k:{"name":"main"}']
    assert "null" not in json.dumps(obj["metadata"]["managedFields"])
    assert containers["f:ports"] == {'k:{"containerPort":9345,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}}
    # Applied again with the protocol spelled out: the same item, no second one.
    obj = _apply(kube, _dgd(ports=[{"containerPort": 9345, "protocol": "TCP"}]))
    assert _container(obj)["ports"] == [{"containerPort": 9345, "protocol": "TCP"}]
    # Applied without it: the item it owned goes (merge/key_test.go "removing_obsolete_applied_structs").
    obj = _apply(kube, _dgd())
    assert "ports" not in _container(obj)
    assert "f:ports" not in json.dumps(_entry(obj, "ops")["fieldsV1"])


def test_an_appliers_time_moves_when_it_changes_a_value_and_stays_on_a_no_op(kube, clock):
    # apimachinery managedfieldsupdater.go Apply: the time is stamped when the object changed.
    _apply(kube, _dgd(replicas=2))
    clock["t"] = "2026-01-01T00:05:00Z"
    obj = _apply(kube, _dgd(replicas=3))
    assert _entry(obj, "ops")["time"] == "2026-01-01T00:05:00Z"
    clock["t"] = "2026-01-01T00:09:00Z"
    obj = _apply(kube, _dgd(replicas=3))
    assert _entry(obj, "ops")["time"] == "2026-01-01T00:05:00Z"


def test_an_updaters_time_moves_when_it_rewrites_a_field_it_owns(kube, clock):
    # managedfieldsupdater.go Update: the write runs as "current-operation"; when that took any
    # field, the writer's entry is merged with it and stamped.
    _apply(kube, _dgd())
    patch = [{"op": "replace", "path": "/spec/components/0/replicas", "value": 2}]
    _call(kube, "PATCH", patch, manager="planner", content_type="application/json-patch+json")
    clock["t"] = "2026-01-01T00:05:00Z"
    patch[0]["value"] = 3
    obj = _call(kube, "PATCH", patch, manager="planner", content_type="application/json-patch+json")
    entry = _entry(obj, "planner")
    assert entry["time"] == "2026-01-01T00:05:00Z"
    assert entry["fieldsV1"]["f:spec"]["f:components"]['k:{"name":"decode"}'] == {"f:replicas": {}}
    clock["t"] = "2026-01-01T00:09:00Z"
    obj = _call(kube, "PATCH", patch, manager="planner", content_type="application/json-patch+json")
    assert _entry(obj, "planner")["time"] == "2026-01-01T00:05:00Z"  # nothing changed


def test_a_conflict_names_an_updater_with_its_version_and_time_and_an_applier_bare(kube, clock):
    # apimachinery conflict.go getConflictMessage / printManager
    _apply(kube, _dgd(), manager="alice")
    with pytest.raises(ApiException) as err:
        _apply(kube, _dgd(replicas=2), manager="bob")
    assert err.value.status == 409
    assert json.loads(err.value.body)["message"] == (
        'Apply failed with 1 conflict: conflict with "alice": .spec.components[name="decode"].replicas')
    patch = [{"op": "replace", "path": "/spec/components/0/replicas", "value": 4}]
    _call(kube, "PATCH", patch, manager="planner", content_type="application/json-patch+json")
    with pytest.raises(ApiException) as err:
        _apply(kube, _dgd(replicas=2), manager="alice")
    assert json.loads(err.value.body)["message"] == (
        'Apply failed with 1 conflict: conflict with "planner" using nvidia.com/v1beta1 at 2026-01-01T00:00:00Z: '
        '.spec.components[name="decode"].replicas')


def test_scale_refuses_a_count_that_does_not_fit_int32(kube):
    # apiserver handlers/patch.go applyPatchToCurrentObject: a patched Scale that does not decode
    # is 422 on field "patch"; handlers/rest.go transformDecodeError: a PUT body is 400.
    adapter = {"apiVersion": f"{G}/{V}", "kind": "DynamoGraphDeploymentScalingAdapter",
               "metadata": {"name": "g-decode", "namespace": NS},
               "spec": {"dgdRef": {"name": "g", "componentName": "decode"}, "replicas": 1}}
    kube.put(adapter)
    path = f"/apis/{G}/{V}/namespaces/{NS}/dynamographdeploymentscalingadapters/g-decode/scale"
    with pytest.raises(ApiException) as err:
        _call(kube, "PATCH", {"spec": {"replicas": 3_000_000_000}}, manager="hpa",
              content_type="application/merge-patch+json", path=path)
    assert err.value.status == 422
    assert ("json: cannot unmarshal number 3000000000 into Go struct field ScaleSpec.spec.replicas of type int32"
            in err.value.body)
    assert '"field": "patch"' in err.value.body
    scale = _call(kube, "GET", None, manager="hpa", content_type="application/json", path=path)
    with pytest.raises(ApiException) as err:
        _call(kube, "PUT", {**scale, "spec": {"replicas": 2**31}}, manager="hpa", content_type="application/json",
              path=path)
    assert err.value.status == 400
    assert 'Scale in version \\"v1\\" cannot be handled as a Scale' in err.value.body
    assert kube.get("dgdsa", "g-decode", namespace=NS)["spec"]["replicas"] == 1
    assert _call(kube, "PATCH", {"spec": {"replicas": 2**31 - 1}}, manager="hpa",
                 content_type="application/merge-patch+json", path=path)["spec"]["replicas"] == 2**31 - 1


def test_a_conflict_across_versions_names_the_field_in_the_owners_version(kube):
    # SMD merge/leaf_test.go "apply_update_apply_with_conflict_across_version" and merge/update.go
    # (each manager's set is compared in its own version, after conversion).
    alpha = {"apiVersion": f"{G}/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": "g"},
             "spec": {"backendFramework": "vllm", "services": {"decode": {
                 "componentType": "worker", "replicas": 1, "extraPodSpec": {"mainContainer": {"image": IMAGE}}}}}}
    _call(kube, "PATCH", alpha, manager="alice", content_type="application/apply-patch+yaml",
          path=f"/apis/{G}/v1alpha1/namespaces/{NS}/{DGD}/g")
    beta = {"apiVersion": f"{G}/{V}", "kind": "DynamoGraphDeployment", "metadata": {"name": "g"},
            "spec": {"components": [{"name": "decode", "replicas": 2}]}}
    with pytest.raises(ApiException) as err:
        _apply(kube, beta, manager="bob")
    assert json.loads(err.value.body)["message"] == (
        'Apply failed with 1 conflict: conflict with "alice": .spec.services.decode.replicas')
    obj = _apply(kube, beta, manager="bob", force=True)
    assert obj["spec"]["components"][0]["replicas"] == 2
    alice = _entry(obj, "alice")
    assert alice["apiVersion"] == f"{G}/v1alpha1"
    assert "f:replicas" not in json.dumps(alice["fieldsV1"])  # forced: alice lost it
    assert "f:replicas" in json.dumps(_entry(obj, "bob")["fieldsV1"])
