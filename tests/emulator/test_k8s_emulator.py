"""Tests of the Kubernetes API emulator (tests/k8s_emulator), driven by the real kubernetes client."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from tests.k8s_emulator import UNSCHEDULABLE_MESSAGE, KubeEmulator

REFERENCE = Path(__file__).parents[1] / "fixtures" / "reference"
SEED = REFERENCE / "seed-disagg.yaml"
TEMPLATES = sorted((REFERENCE / "dgd-templates-1.6.1").glob("*.yaml"))
G, ALPHA, BETA = "nvidia.com", "v1alpha1", "v1beta1"
DGD, DGDSA = "dynamographdeployments", "dynamographdeploymentscalingadapters"
NS = "default"


# -- fixtures and helpers ----------------------------------------------------------------------------
@pytest.fixture
def kube():
    with KubeEmulator() as emulator:
        yield emulator
    assert not emulator.errors, emulator.errors


@pytest.fixture
def api_client(kube):
    return kube.api_client()


@pytest.fixture
def co(api_client):
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def core(api_client):
    return client.CoreV1Api(api_client)


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def seed() -> dict[str, Any]:
    doc = load(SEED)
    doc["metadata"]["namespace"] = NS
    return doc


# The operator's webhook refuses a main image whose tag is no semantic version unless the component
# sets runtimeVersionOverride (webhook/validation/shared_v1beta1.go@2a6da14c:173-184).
IMAGE = "img:1.1.0"


def beta_dgd(name: str = "graph", adapter: bool = False, replicas: int = 1) -> dict[str, Any]:
    decode: dict[str, Any] = {"name": "decode", "type": "decode", "replicas": replicas,
                              "podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}}}
    if adapter:
        decode["scalingAdapter"] = {}
    return {"apiVersion": f"{G}/{BETA}", "kind": "DynamoGraphDeployment", "metadata": {"name": name},
            "spec": {"components": [
                {"name": "Frontend", "type": "frontend", "replicas": 1,
                 "podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}}},
                decode]}}


def dgdsa(name: str = "graph-decode", replicas: int = 2) -> dict[str, Any]:
    return {"apiVersion": f"{G}/{BETA}", "kind": "DynamoGraphDeploymentScalingAdapter",
            "metadata": {"name": name},
            "spec": {"dgdRef": {"name": "graph", "componentName": "decode"}, "replicas": replicas}}


def raw(api_client, method: str, path: str, body: Any = None, content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None) -> tuple[Any, int, dict[str, str]]:
    """A call with an explicit Content-Type (the generated APIs cannot send JSON patch or apply)."""
    return api_client.call_api(path, method, query_params=query or [], body=body,
                               header_params={"Content-Type": content_type, "Accept": "application/json"},
                               response_type="object", auth_settings=["BearerToken"],
                               _return_http_data_only=False)


def status_of(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


def dgd_path(name: str = "", version: str = BETA, plural: str = DGD) -> str:
    return f"/apis/{G}/{version}/namespaces/{NS}/{plural}" + (f"/{name}" if name else "")


# -- discovery and CRDs ------------------------------------------------------------------------------
def test_discovery_documents(api_client, tmp_path):
    assert client.VersionApi(api_client).get_code().git_version.startswith("v1.")
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    groups = {g.name: g for g in client.ApisApi(api_client).get_api_versions().groups}
    assert groups[G].preferred_version.version == BETA
    assert {v.version for v in groups[G].versions} == {ALPHA, BETA}
    assert "apiextensions.k8s.io" in groups
    listing, _, _ = raw(api_client, "GET", f"/apis/{G}/{BETA}")
    names = {r["name"] for r in listing["resources"]}
    assert {DGD, f"{DGD}/status", DGDSA, f"{DGDSA}/status", f"{DGDSA}/scale"} <= names
    assert f"{DGD}/scale" not in names
    dyn = DynamicClient(api_client, cache_file=str(tmp_path / "discovery.json"))
    resource = dyn.resources.get(api_version=f"{G}/{BETA}", kind="DynamoGraphDeployment")
    assert resource.namespaced and "status" in resource.subresources
    assert dyn.resources.get(api_version="v1", kind="Pod").get(namespace=NS).items == []


def test_crds_list_get_and_removal(kube, api_client, co):
    ext = client.ApiextensionsV1Api(api_client)
    crds = {c.metadata.name: c for c in ext.list_custom_resource_definition().items}
    assert set(crds) == {f"{DGD}.{G}", f"{DGDSA}.{G}"}
    adapter = ext.read_custom_resource_definition(f"{DGDSA}.{G}")
    assert [v.name for v in adapter.spec.versions if v.served] == [ALPHA, BETA]
    assert adapter.spec.versions[1].subresources.scale.spec_replicas_path == ".spec.replicas"
    with pytest.raises(ApiException) as err:
        ext.read_custom_resource_definition("nope.nvidia.com")
    assert err.value.status == 404
    kube.remove_crd(f"{DGDSA}.{G}")
    with pytest.raises(ApiException) as err:
        co.list_namespaced_custom_object(G, BETA, NS, DGDSA)
    assert err.value.status == 404
    assert [c.metadata.name for c in ext.list_custom_resource_definition().items] == [f"{DGD}.{G}"]
    kube.install_crd(REFERENCE.parents[2] / "core/crds/nvidia.com_dynamographdeploymentscalingadapters.yaml",
                     versions=[ALPHA])
    assert co.list_namespaced_custom_object(G, ALPHA, NS, DGDSA)["items"] == []
    with pytest.raises(ApiException):
        co.list_namespaced_custom_object(G, BETA, NS, DGDSA)


# -- validation against the CRD schemas --------------------------------------------------------------
def test_seed_is_accepted_as_v1alpha1_with_deprecation_warning(api_client, co):
    body, code, headers = raw(api_client, "POST", dgd_path(version=ALPHA), seed())
    assert code == 201
    meta = body["metadata"]
    assert meta["generation"] == 1 and meta["uid"] and meta["creationTimestamp"] and int(meta["resourceVersion"])
    assert "deprecated" in headers.get("Warning", "")
    got = co.get_namespaced_custom_object(G, ALPHA, NS, DGD, "vllm-disagg")
    assert got["spec"]["services"]["VllmPrefillWorker"]["subComponentType"] == "prefill"
    assert "status" not in got


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.stem)
def test_release_templates_are_accepted_as_v1beta1(co, template):
    created = co.create_namespaced_custom_object(G, BETA, NS, DGD, load(template))
    assert created["metadata"]["namespace"] == NS
    assert created["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]["name"] == "main"


def test_unknown_field_strict_warn_and_ignore(api_client, co):
    doc = seed()
    doc["spec"]["x"] = 1
    doc["spec"]["services"]["Frontend"]["bogus"] = True
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, ALPHA, NS, DGD, doc, field_validation="Strict")
    assert err.value.status == 400
    assert status_of(err.value)["message"] == (
        'strict decoding error: unknown field "spec.services.Frontend.bogus", unknown field "spec.x"')
    body, code, headers = raw(api_client, "POST", dgd_path(version=ALPHA), doc)
    assert code == 201 and "x" not in body["spec"] and "bogus" not in body["spec"]["services"]["Frontend"]
    assert 'unknown field \\"spec.x\\"' in headers["Warning"]
    doc["metadata"]["name"] = "other"
    body, _, headers = raw(api_client, "POST", dgd_path(version=ALPHA), doc, query=[("fieldValidation", "Ignore")])
    assert "x" not in body["spec"] and "unknown field" not in headers.get("Warning", "")


def test_schema_errors_are_422_with_field_paths(co):
    doc = seed()
    doc["spec"]["services"]["Frontend"]["replicas"] = "two"
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, ALPHA, NS, DGD, doc)
    status = status_of(err.value)
    assert (err.value.status, status["reason"], status["kind"]) == (422, "Invalid", "Status")
    # A type error blocks the CRD's CEL rules, and the API server says so in one more cause
    # (apiextensions-apiserver customresource strategy, hasBlockingErr; upstream's envtest suite
    # deploy/operator/internal/webhook/validation/suite_envtest_test.go@2a6da14c:506 skips it by this text).
    assert status["details"]["causes"] == [{
        "reason": "FieldValueTypeInvalid", "field": "spec.services.Frontend.replicas",
        "message": 'Invalid value: "string": spec.services.Frontend.replicas in body must be of type integer: '
                   '"string"'}, {
        "reason": "FieldValueInvalid", "field": "<nil>",
        "message": 'Invalid value: "null": some validation rules were not checked because the object was invalid; '
                   "correct the existing errors to complete validation"}]
    assert status["message"].startswith('DynamoGraphDeployment.nvidia.com "vllm-disagg" is invalid: '
                                        "[spec.services.Frontend.replicas: Invalid value")
    bad = beta_dgd()
    del bad["spec"]["components"][0]["name"]
    bad["spec"]["components"][1]["type"] = "bogus"
    bad["spec"]["components"][1]["replicas"] = -1
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, bad)
    causes = {c["field"]: c for c in status_of(err.value)["details"]["causes"]}
    assert causes["spec.components[0].name"]["reason"] == "FieldValueRequired"
    assert causes["spec.components[1].type"]["reason"] == "FieldValueNotSupported"
    assert "greater than or equal to 0" in causes["spec.components[1].replicas"]["message"]
    dup = beta_dgd()
    dup["spec"]["components"][1]["name"] = "Frontend"
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, dup)
    assert status_of(err.value)["details"]["causes"][0]["reason"] == "FieldValueDuplicate"
    with pytest.raises(ApiException) as err:  # the v1alpha1 shape is not v1beta1
        co.create_namespaced_custom_object(G, BETA, NS, DGD, {**seed(), "apiVersion": f"{G}/{BETA}"},
                                           field_validation="Strict")
    assert 'unknown field "spec.services"' in status_of(err.value)["message"]


def test_int_or_string_preserve_unknown_and_defaults(co):
    doc = beta_dgd()
    comp = doc["spec"]["components"][1]
    comp["podTemplate"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": 2, "memory": "1Gi"}}
    comp["multinode"] = {}
    comp["providerOverride"] = {"apiVersion": "x/v1", "value": {"anything": {"goes": [1, 2]}}}
    created = co.create_namespaced_custom_object(G, BETA, NS, DGD, doc, field_validation="Strict")
    comp = created["spec"]["components"][1]
    assert comp["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == 2
    assert comp["multinode"] == {"nodeCount": 2}  # schema default
    assert comp["providerOverride"]["value"] == {"anything": {"goes": [1, 2]}}
    bad = beta_dgd("bad")
    bad["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": True}}
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, bad)
    assert status_of(err.value)["details"]["causes"][0]["field"] == (
        "spec.components[1].podTemplate.spec.containers[0].resources.limits.cpu")


# -- CRUD semantics --------------------------------------------------------------------------------
def test_create_get_list_delete_status_objects(kube, co):
    co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
    assert (err.value.status, status_of(err.value)["reason"]) == (409, "AlreadyExists")
    assert status_of(err.value)["message"] == 'dynamographdeployments.nvidia.com "graph" already exists'
    listed = co.list_namespaced_custom_object(G, BETA, NS, DGD)
    assert listed["kind"] == "DynamoGraphDeploymentList" and len(listed["items"]) == 1
    assert co.list_cluster_custom_object(G, BETA, DGD)["items"][0]["metadata"]["name"] == "graph"
    gone = co.delete_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    assert gone["status"] == "Success" and gone["details"]["name"] == "graph"
    with pytest.raises(ApiException) as err:
        co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    status = status_of(err.value)
    assert (err.value.status, status["kind"], status["reason"], status["details"]["name"]) == (
        404, "Status", "NotFound", "graph")
    assert status["message"] == 'dynamographdeployments.nvidia.com "graph" not found'
    with pytest.raises(ApiException) as err:
        co.delete_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    assert err.value.status == 404
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, "missing-ns", DGD, beta_dgd())
    assert status_of(err.value)["message"] == 'namespaces "missing-ns" not found'
    generated = beta_dgd()
    generated["metadata"] = {"generateName": "graph-"}
    assert co.create_namespaced_custom_object(G, BETA, NS, DGD, generated)["metadata"]["name"].startswith("graph-")


def test_replace_conflict_generation_and_no_op(co):
    created = co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
    stale = copy.deepcopy(created)
    created["metadata"]["labels"] = {"team": "a"}
    relabeled = co.replace_namespaced_custom_object(G, BETA, NS, DGD, "graph", created)
    assert relabeled["metadata"]["generation"] == 1
    assert int(relabeled["metadata"]["resourceVersion"]) > int(stale["metadata"]["resourceVersion"])
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object(G, BETA, NS, DGD, "graph", stale)
    assert (err.value.status, status_of(err.value)["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status_of(err.value)["message"]
    relabeled["spec"]["components"][1]["replicas"] = 3
    bumped = co.replace_namespaced_custom_object(G, BETA, NS, DGD, "graph", relabeled)
    assert bumped["metadata"]["generation"] == 2
    same = co.replace_namespaced_custom_object(G, BETA, NS, DGD, "graph", bumped)
    assert same["metadata"]["resourceVersion"] == bumped["metadata"]["resourceVersion"]
    del bumped["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object(G, BETA, NS, DGD, "graph", bumped)
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "metadata.resourceVersion"


def test_finalizers_and_owner_cascade(kube, co, core):
    doc = beta_dgd()
    doc["metadata"]["finalizers"] = ["example.com/hold"]
    owner = co.create_namespaced_custom_object(G, BETA, NS, DGD, doc)
    ref = {"apiVersion": f"{G}/{BETA}", "kind": "DynamoGraphDeployment", "name": "graph",
           "uid": owner["metadata"]["uid"]}
    kube.set_pod("graph-pod", owner={**ref, "controller": True})
    marked = co.delete_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    assert marked["metadata"]["deletionTimestamp"]
    assert co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")["metadata"]["deletionTimestamp"]
    co.patch_namespaced_custom_object(G, BETA, NS, DGD, "graph", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException):
        co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    assert core.list_namespaced_pod(NS).items == []


# -- patches -----------------------------------------------------------------------------------------
def test_merge_patch_and_json_patch(api_client, co):
    co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
    change = {"metadata": {"labels": {"a": "b"}}, "spec": {"backendFramework": "vllm"}}
    merged = co.patch_namespaced_custom_object(G, BETA, NS, DGD, "graph", change)
    assert merged["metadata"]["labels"] == {"a": "b"} and merged["spec"]["backendFramework"] == "vllm"
    assert merged["metadata"]["generation"] == 2
    ops = [{"op": "test", "path": "/spec/components/1/name", "value": "decode"},
           {"op": "replace", "path": "/spec/components/1/replicas", "value": 4}]
    body, code, _ = raw(api_client, "PATCH", dgd_path("graph"), ops, "application/json-patch+json")
    assert code == 200 and body["spec"]["components"][1]["replicas"] == 4
    ops[0]["value"] = "prefill"
    with pytest.raises(ApiException) as err:
        raw(api_client, "PATCH", dgd_path("graph"), ops, "application/json-patch+json")
    assert (err.value.status, status_of(err.value)["reason"]) == (422, "Invalid")
    with pytest.raises(ApiException) as err:
        raw(api_client, "PATCH", dgd_path("graph"), [{"op": "remove", "path": "/spec/nope"}],
            "application/json-patch+json")
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        co.patch_namespaced_custom_object(G, BETA, NS, DGD, "graph", {"spec": {"components": [{"name": 5}]}})
    assert err.value.status == 422


def test_strategic_merge_patch_refused_on_crs_but_used_for_core(kube, api_client, co, core):
    co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
    with pytest.raises(ApiException) as err:
        raw(api_client, "PATCH", dgd_path("graph"), {"spec": {}}, "application/strategic-merge-patch+json")
    assert (err.value.status, status_of(err.value)["reason"]) == (415, "UnsupportedMediaType")
    kube.set_pod("p1", labels={"app": "x"})
    patched = core.patch_namespaced_pod("p1", NS, {"metadata": {"labels": {"extra": "1"}},
                                                   "spec": {"containers": [{"name": "main", "image": "new:2"}]}})
    assert patched.metadata.labels == {"app": "x", "extra": "1"}
    assert [(c.name, c.image) for c in patched.spec.containers] == [("main", "new:2")]
    assert kube.find_requests("PATCH", "/pods/p1")[-1].content_type == "application/strategic-merge-patch+json"


def test_server_side_apply_ownership_conflicts_and_pruning(api_client, co):
    apply = "application/apply-patch+yaml"
    doc = beta_dgd()
    doc["metadata"]["labels"] = {"owner": "dash"}
    with pytest.raises(ApiException) as err:
        raw(api_client, "PATCH", dgd_path("graph"), doc, apply)
    assert err.value.status == 400  # fieldManager is required
    body, code, _ = raw(api_client, "PATCH", dgd_path("graph"), doc, apply, [("fieldManager", "dash")])
    assert code == 201 and body["metadata"]["managedFields"][0]["manager"] == "dash"
    assert body["metadata"]["managedFields"][0]["operation"] == "Apply"
    theirs = {"apiVersion": f"{G}/{BETA}", "kind": "DynamoGraphDeployment", "metadata": {"name": "graph"},
              "spec": {"components": [{"name": "decode", "replicas": 5}]}}
    with pytest.raises(ApiException) as err:
        raw(api_client, "PATCH", dgd_path("graph"), theirs, apply, [("fieldManager", "planner")])
    status = status_of(err.value)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"].startswith('Apply failed with 1 conflict: conflict with "dash"')
    assert status["details"]["causes"][0]["field"] == '.spec.components[name="decode"].replicas'
    body, _, _ = raw(api_client, "PATCH", dgd_path("graph"), theirs, apply,
                     [("fieldManager", "planner"), ("force", "true")])
    assert [c.get("replicas") for c in body["spec"]["components"]] == [1, 5]
    assert len(body["spec"]["components"]) == 2  # list-map merge by name
    same_values = copy.deepcopy(theirs)
    raw(api_client, "PATCH", dgd_path("graph"), same_values, apply, [("fieldManager", "other")])  # no conflict
    smaller = beta_dgd()
    smaller["spec"]["components"][0].pop("replicas")
    smaller["spec"]["components"][1].pop("replicas")
    body, _, _ = raw(api_client, "PATCH", dgd_path("graph"), smaller, apply, [("fieldManager", "dash")])
    assert "labels" not in body["metadata"]  # dash stopped applying it: pruned
    assert "replicas" not in body["spec"]["components"][0]
    assert body["spec"]["components"][1]["replicas"] == 5  # now owned by planner and other
    managers = {e["manager"] for e in co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")["metadata"][
        "managedFields"]}
    assert managers == {"dash", "planner", "other"}


def test_dry_run_stores_nothing_and_emits_nothing(co):
    listed = co.list_namespaced_custom_object(G, BETA, NS, DGD)
    preview = co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd(), dry_run="All")
    assert preview["metadata"]["name"] == "graph" and preview["metadata"]["uid"]
    with pytest.raises(ApiException):
        co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    bad = beta_dgd()
    bad["spec"]["components"][1]["replicas"] = "x"
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, bad, dry_run="All")
    assert err.value.status == 422
    real = co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
    patched = co.patch_namespaced_custom_object(G, BETA, NS, DGD, "graph", {"spec": {"backendFramework": "vllm"}},
                                                dry_run="All")
    assert patched["spec"]["backendFramework"] == "vllm"
    assert "backendFramework" not in co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")["spec"]
    events = list(watch.Watch().stream(co.list_namespaced_custom_object, G, BETA, NS, DGD,
                                       resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=1))
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", real["metadata"]["resourceVersion"])]


# -- subresources ------------------------------------------------------------------------------------
def test_status_subresource(co):
    doc = beta_dgd()
    doc["status"] = {"state": "successful"}
    created = co.create_namespaced_custom_object(G, BETA, NS, DGD, doc)
    assert "status" not in created
    status = {"state": "pending", "observedGeneration": 1, "conditions": [
        {"type": "Ready", "status": "False", "reason": "pods_not_ready", "message": "waiting",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    updated = co.patch_namespaced_custom_object_status(
        G, BETA, NS, DGD, "graph", {"status": status, "spec": {"backendFramework": "vllm"}})
    assert updated["status"]["state"] == "pending" and "backendFramework" not in updated["spec"]
    assert updated["metadata"]["generation"] == 1
    ignored = co.patch_namespaced_custom_object(G, BETA, NS, DGD, "graph", {"status": {"state": "failed"}})
    assert ignored["status"]["state"] == "pending"
    with pytest.raises(ApiException) as err:
        co.patch_namespaced_custom_object_status(G, BETA, NS, DGD, "graph", {"status": {"state": "bogus"}})
    assert status_of(err.value)["details"]["causes"][0]["field"] == "status.state"
    full = co.get_namespaced_custom_object_status(G, BETA, NS, DGD, "graph")
    full["status"]["state"] = "successful"
    assert co.replace_namespaced_custom_object_status(G, BETA, NS, DGD, "graph", full)["status"]["state"] == (
        "successful")


def test_scale_subresource(co):
    co.create_namespaced_custom_object(G, BETA, NS, DGDSA, dgdsa())
    scale = co.get_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "graph-decode")
    assert (scale["kind"], scale["apiVersion"], scale["spec"]["replicas"]) == ("Scale", "autoscaling/v1", 2)
    scaled = co.patch_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "graph-decode", {"spec": {"replicas": 5}})
    assert scaled["spec"]["replicas"] == 5
    assert co.get_namespaced_custom_object(G, BETA, NS, DGDSA, "graph-decode")["spec"]["replicas"] == 5
    stale = dict(scale, spec={"replicas": 7})
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "graph-decode", stale)
    assert err.value.status == 409
    fresh = co.get_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "graph-decode")
    fresh["spec"]["replicas"] = 7
    assert co.replace_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "graph-decode", fresh)["spec"][
        "replicas"] == 7
    with pytest.raises(ApiException) as err:
        co.patch_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "graph-decode", {"spec": {"replicas": -1}})
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        co.patch_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "missing", {"spec": {"replicas": 1}})
    assert err.value.status == 404
    co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
    with pytest.raises(ApiException) as err:
        co.get_namespaced_custom_object_scale(G, BETA, NS, DGD, "graph")
    assert err.value.status == 404


def test_versions_share_one_store_with_conversion(co):
    co.create_namespaced_custom_object(G, ALPHA, NS, DGD, seed())
    beta = co.get_namespaced_custom_object(G, BETA, NS, DGD, "vllm-disagg")
    comps = {c["name"]: c for c in beta["spec"]["components"]}
    assert comps["VllmPrefillWorker"]["type"] == "prefill" and comps["VllmPrefillWorker"]["replicas"] == 2
    main = comps["VllmDecodeWorker"]["podTemplate"]["spec"]["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert main["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]
    assert co.list_namespaced_custom_object(G, BETA, NS, DGD)["items"][0]["apiVersion"] == f"{G}/{BETA}"
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, load(TEMPLATES[-1]))  # same name, other version
    assert err.value.status == 409
    alpha = co.get_namespaced_custom_object(G, ALPHA, NS, DGD, "vllm-disagg")
    assert alpha["spec"] == seed()["spec"]
    co.patch_namespaced_custom_object(G, BETA, NS, DGD, "vllm-disagg", {"metadata": {"labels": {"x": "y"}}})
    back = co.get_namespaced_custom_object(G, ALPHA, NS, DGD, "vllm-disagg")["spec"]["services"]
    assert back["VllmPrefillWorker"]["subComponentType"] == "prefill"
    assert back["VllmPrefillWorker"]["dynamoNamespace"] == "vllm-disagg"
    assert back["VllmPrefillWorker"]["resources"] == {"limits": {"gpu": "1"}}
    co.create_namespaced_custom_object(G, BETA, NS, DGDSA, dgdsa())
    assert co.get_namespaced_custom_object(G, ALPHA, NS, DGDSA, "graph-decode")["spec"]["dgdRef"] == {
        "name": "graph", "serviceName": "decode"}


# -- selectors and pagination ------------------------------------------------------------------------
def test_label_and_field_selectors(kube, core, co):
    kube.set_pod("fe", dgd="g", component="Frontend", component_type="frontend")
    kube.set_pod("pre", dgd="g", component="VllmPrefillWorker", component_type="worker",
                 sub_component_type="prefill", waiting_reason="ImagePullBackOff")
    kube.set_pod("other", labels={"app": "x"})

    def names(**kw):
        return sorted(p.metadata.name for p in core.list_namespaced_pod(NS, **kw).items)

    dgd_label = "nvidia.com/dynamo-graph-deployment-name"
    assert names(label_selector=f"{dgd_label}=g") == ["fe", "pre"]
    assert names(label_selector=f"{dgd_label}==g,nvidia.com/dynamo-component!=Frontend") == ["pre"]
    assert names(label_selector="nvidia.com/dynamo-component in (Frontend, Other)") == ["fe"]
    assert names(label_selector="nvidia.com/dynamo-component notin (Frontend)") == ["other", "pre"]
    assert names(label_selector=f"!{dgd_label}") == ["other"]
    assert names(label_selector="app") == ["other"]
    assert names(field_selector="status.phase=Pending") == ["pre"]
    assert names(field_selector="metadata.name!=fe,status.phase=Running") == ["other"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, label_selector="a in (b")
    assert err.value.status == 400
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, field_selector="spec.containers=x")
    assert status_of(err.value)["message"] == "field label not supported: spec.containers"
    pod = kube.get("pods", "pre")
    kube.add_event(pod, "Failed", 'Failed to pull image "img"')
    kube.add_event({"kind": "Pod", "name": "fe", "namespace": NS}, "Started", "Started container", type="Normal")
    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=pre").items
    assert [(e.reason, e.involved_object.uid, e.type) for e in events] == [
        ("Failed", pod["metadata"]["uid"], "Warning")]
    co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
    assert len(co.list_namespaced_custom_object(G, BETA, NS, DGD, field_selector="metadata.name=graph")["items"]) == 1
    with pytest.raises(ApiException):
        co.list_namespaced_custom_object(G, BETA, NS, DGD, field_selector="spec.backendFramework=vllm")


def test_pagination_limit_continue(kube, core):
    for i in range(5):
        kube.set_pod(f"p{i}")
    first = core.list_namespaced_pod(NS, limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    second = core.list_namespaced_pod(NS, limit=2, _continue=first.metadata._continue)
    third = core.list_namespaced_pod(NS, limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in second.items + third.items] == ["p2", "p3", "p4"]
    assert third.metadata._continue is None
    kube.set_pod("p5")
    kube.expire_history()
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, limit=2, _continue=first.metadata._continue)
    assert err.value.status == 410


# -- watch -------------------------------------------------------------------------------------------
def test_watch_streams_live_events_and_ends_at_timeout(kube, co):
    start = co.list_namespaced_custom_object(G, BETA, NS, DGD)["metadata"]["resourceVersion"]

    def writer():
        time.sleep(0.2)
        co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd())
        co.patch_namespaced_custom_object(G, BETA, NS, DGD, "graph", {"metadata": {"labels": {"a": "b"}}})
        co.delete_namespaced_custom_object(G, BETA, NS, DGD, "graph")

    thread = threading.Thread(target=writer)
    began = time.monotonic()
    thread.start()
    events = list(watch.Watch().stream(co.list_namespaced_custom_object, G, BETA, NS, DGD,
                                       resource_version=start, timeout_seconds=1))
    thread.join()
    assert time.monotonic() - began > 0.9  # the stream stayed open until its timeout_seconds
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(start)
    assert kube.find_requests("GET", DGD)[-1].param("watch") == "True"


def test_watch_initial_state_resume_and_selector_transitions(kube, core):
    kube.set_pod("a", labels={"app": "x"})
    initial = list(watch.Watch().stream(core.list_namespaced_pod, NS, label_selector="app=x", timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in initial] == [("ADDED", "a")]
    resume = initial[-1]["object"].metadata.resource_version
    kube.set_pod("b", labels={"app": "x"})
    kube.set_pod("a", labels={"app": "y"})  # leaves the selector: DELETED for this watch
    kube.set_pod("c", labels={"app": "y"})
    w = watch.Watch()
    events = [(e["type"], e["object"].metadata.name)
              for e in w.stream(core.list_namespaced_pod, NS, label_selector="app=x", resource_version=resume,
                                timeout_seconds=1)]
    assert events == [("ADDED", "b"), ("DELETED", "a")]
    assert int(w.resource_version) > int(resume)


def test_watch_410_gone_and_bookmarks(kube, core, api_client):
    kube.set_pod("a")
    old = core.list_namespaced_pod(NS).metadata.resource_version
    kube.set_pod("b")
    kube.expire_history()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=old, timeout_seconds=1))
    assert err.value.status == 410
    current = core.list_namespaced_pod(NS).metadata.resource_version
    events = list(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=current, timeout_seconds=1,
                                       allow_watch_bookmarks=True))
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert events[0]["raw_object"]["metadata"]["resourceVersion"] == current


# -- test hooks --------------------------------------------------------------------------------------
def test_fault_injection(kube, co):
    fault = kube.inject("GET", rf"/{DGD}$", 500)
    with pytest.raises(ApiException) as err:
        co.list_namespaced_custom_object(G, BETA, NS, DGD)
    assert err.value.status == 500 and status_of(err.value)["reason"] == "InternalError"
    assert co.list_namespaced_custom_object(G, BETA, NS, DGD)["items"] == []
    assert fault.hits == 1
    kube.inject("*", DGD, 429, times=2, retry_after=1)
    with pytest.raises(ApiException) as err:
        co.list_namespaced_custom_object(G, BETA, NS, DGD)
    assert err.value.status == 429 and err.value.headers["Retry-After"] == "1"
    retrying = client.CustomObjectsApi(kube.api_client(retries=None))  # urllib3 honours Retry-After
    assert retrying.list_namespaced_custom_object(G, BETA, NS, DGD)["items"] == []
    assert [r.status for r in kube.find_requests("GET", DGD)[-3:]] == [429, 429, 200]
    kube.inject("GET", DGD, 503, times=None)
    for _ in range(2):
        with pytest.raises(ApiException):
            co.list_namespaced_custom_object(G, BETA, NS, DGD)
    kube.clear_faults()
    kube.inject("GET", DGD, delay=1.0)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        co.list_namespaced_custom_object(G, BETA, NS, DGD, _request_timeout=(1, 0.2))
    kube.inject("GET", DGD, drop=True)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        co.list_namespaced_custom_object(G, BETA, NS, DGD)
    assert co.list_namespaced_custom_object(G, BETA, NS, DGD)["items"] == []


def test_request_recording(kube, api_client, co):
    co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd(), field_manager="dash")
    raw(api_client, "PATCH", dgd_path("graph"), beta_dgd(), "application/apply-patch+yaml",
        [("fieldManager", "dash"), ("force", "true")])
    post, patch = kube.find_requests(path=rf"/{DGD}")
    assert (post.method, post.content_type, post.param("fieldManager"), post.status) == (
        "POST", "application/json", "dash", 201)
    assert post.body["spec"]["components"][1]["name"] == "decode"
    assert (patch.content_type, patch.param("force"), patch.body["kind"]) == (
        "application/apply-patch+yaml", "true", "DynamoGraphDeployment")
    kube.clear_requests()
    assert kube.requests == []


def test_bearer_token_is_checked(tmp_path):
    with KubeEmulator(token="s3cret") as kube:
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(kube.api_client(token="wrong")).list_namespace()
        assert (err.value.status, status_of(err.value)["reason"]) == (401, "Unauthorized")
        names = [n.metadata.name for n in client.CoreV1Api(kube.api_client()).list_namespace().items]
        assert "default" in names
        path = kube.write_kubeconfig(tmp_path / "kubeconfig")
        loaded = client.Configuration()
        config.load_kube_config(config_file=str(path), client_configuration=loaded)
        assert client.CoreV1Api(client.ApiClient(loaded)).read_namespace("default").status.phase == "Active"


def test_seeded_pods_events_nodes_and_logs(kube, core):
    kube.set_pod("ok", dgd="g", component="Frontend", component_type="frontend")
    kube.set_pod("pull", waiting_reason="ImagePullBackOff")
    kube.set_pod("crash", waiting_reason="CrashLoopBackOff")
    kube.set_pod("pending", unschedulable=True, gpus=1)
    kube.add_node("gpu-1", gpus=8)
    kube.add_secret("hf-token-secret", data={"HF_TOKEN": "x"})
    kube.set_pod_log("ok", "line1\nline2\n")
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(NS).items}
    assert pods["ok"].status.phase == "Running" and pods["ok"].status.container_statuses[0].ready
    assert pods["ok"].metadata.labels["nvidia.com/dynamo-component-type"] == "frontend"
    assert pods["pull"].status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"
    crash = pods["crash"].status.container_statuses[0]
    assert crash.state.waiting.reason == "CrashLoopBackOff" and crash.restart_count >= 5
    cond = pods["pending"].status.conditions[0]
    assert (pods["pending"].status.phase, cond.type, cond.status, cond.reason, cond.message) == (
        "Pending", "PodScheduled", "False", "Unschedulable", UNSCHEDULABLE_MESSAGE)
    assert pods["pending"].spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    node = core.read_node("gpu-1")
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert core.read_namespaced_secret("hf-token-secret", NS).data == {"HF_TOKEN": "eA=="}
    assert core.read_namespaced_pod_log("ok", NS, tail_lines=1) == "line2\n"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod_log("missing", NS)
    assert err.value.status == 404
    deleted = core.delete_namespaced_pod("pull", NS)
    assert deleted.metadata.name == "pull"


# -- the fake operator -------------------------------------------------------------------------------
def test_fake_operator_adapters_pods_status_and_scaling(kube, api_client, co, core):
    kube.simulate_operator = True
    co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd(adapter=True, replicas=2))
    kube.settle()
    adapter = co.get_namespaced_custom_object(G, BETA, NS, DGDSA, "graph-decode")
    assert adapter["spec"] == {"dgdRef": {"name": "graph", "componentName": "decode"}, "replicas": 2}
    assert adapter["status"]["replicas"] == 2
    pods = core.list_namespaced_pod(NS, label_selector="nvidia.com/dynamo-graph-deployment-name=graph").items
    assert sorted(p.metadata.labels["nvidia.com/dynamo-component"] for p in pods) == ["Frontend", "decode", "decode"]
    dgd = co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    assert dgd["status"]["state"] == "successful"
    assert dgd["status"]["conditions"][0]["reason"] == "all_resources_are_ready"
    assert dgd["status"]["components"]["decode"]["readyReplicas"] == 2
    co.patch_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "graph-decode", {"spec": {"replicas": 3}})
    kube.settle()
    dgd = co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    assert dgd["spec"]["components"][1]["replicas"] == 3
    assert len(core.list_namespaced_pod(NS, label_selector="nvidia.com/dynamo-component=decode").items) == 3
    with pytest.raises(ApiException) as err:  # the adapter webhook
        raw(api_client, "PATCH", dgd_path("graph"), [
            {"op": "replace", "path": "/spec/components/1/replicas", "value": 1}], "application/json-patch+json")
    assert (err.value.status, status_of(err.value)["reason"]) == (422, "Invalid")
    assert 'admission webhook "vdynamographdeployment.kb.io" denied the request' in status_of(err.value)["message"]
    planner = raw(api_client, "PATCH", dgd_path("graph"), [
        {"op": "replace", "path": "/spec/components/1/replicas", "value": 3}], "application/json-patch+json",
        [("fieldManager", "planner")])
    assert planner[1] == 200
    co.delete_namespaced_custom_object(G, BETA, NS, DGD, "graph")
    kube.settle()
    assert co.list_namespaced_custom_object(G, BETA, NS, DGDSA)["items"] == []
    assert core.list_namespaced_pod(NS).items == []


def test_fake_operator_converges_after_the_write_with_pods_ready_later(kube, co, core):
    kube.simulate_operator = True
    kube.operator.ready_delay = 3600  # a slow kubelet: the pods stay ContainerCreating
    co.create_namespaced_custom_object(G, BETA, NS, DGD, beta_dgd(replicas=2))
    kube.operator.settle(pods=False)  # the operator has acted; its pods are starting
    pods = core.list_namespaced_pod(NS, label_selector="nvidia.com/dynamo-graph-deployment-name=graph").items
    assert len(pods) == 3
    assert {(p.status.phase, p.status.container_statuses[0].state.waiting.reason) for p in pods} == {
        ("Pending", "ContainerCreating")}
    status = co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")["status"]
    assert (status["state"], status["conditions"][0]["reason"]) == ("pending", "pods_not_ready")
    assert status["components"]["decode"]["readyReplicas"] == 0
    kube.operator.start_pods_now()
    kube.settle()
    status = co.get_namespaced_custom_object(G, BETA, NS, DGD, "graph")["status"]
    assert (status["state"], status["components"]["decode"]["readyReplicas"]) == ("successful", 2)
    assert {p.status.phase for p in core.list_namespaced_pod(NS).items} == {"Running"}


def test_fake_operator_alpha_seed_and_unschedulable_pods(kube, co, core):
    kube.simulate_operator = True
    kube.operator.pod_overrides["VllmPrefillWorker"] = {"unschedulable": True}
    doc = seed()
    doc["spec"]["services"]["VllmDecodeWorker"]["scalingAdapter"] = {"enabled": True}
    co.create_namespaced_custom_object(G, ALPHA, NS, DGD, doc)
    kube.settle()
    dgd = co.get_namespaced_custom_object(G, ALPHA, NS, DGD, "vllm-disagg")
    assert dgd["status"]["state"] == "pending"
    assert dgd["status"]["conditions"][0]["reason"] == "insufficient_capacity"
    assert set(dgd["status"]["services"]) == {"Frontend", "VllmPrefillWorker", "VllmDecodeWorker"}
    assert dgd["spec"] == doc["spec"]
    prefill = core.list_namespaced_pod(NS, label_selector="nvidia.com/dynamo-sub-component-type=prefill").items
    assert len(prefill) == 2 and prefill[0].metadata.labels["nvidia.com/dynamo-component-type"] == "worker"
    assert prefill[0].status.conditions[0].reason == "Unschedulable"
    adapter = co.get_namespaced_custom_object(G, ALPHA, NS, DGDSA, "vllm-disagg-vllmdecodeworker")
    assert adapter["spec"]["dgdRef"] == {"name": "vllm-disagg", "serviceName": "VllmDecodeWorker"}
    co.patch_namespaced_custom_object_scale(G, BETA, NS, DGDSA, "vllm-disagg-vllmdecodeworker",
                                            {"spec": {"replicas": 3}})
    kube.settle()
    scaled = co.get_namespaced_custom_object(G, ALPHA, NS, DGD, "vllm-disagg")
    assert scaled["spec"]["services"]["VllmDecodeWorker"]["replicas"] == 3
    assert scaled["status"]["services"]["VllmDecodeWorker"]["replicas"] == 3
    for pod in prefill:
        kube.set_pod(pod.metadata.name, **{"dgd": "vllm-disagg", "component": "VllmPrefillWorker",
                                           "component_type": "worker", "sub_component_type": "prefill"})
    kube.settle()
    assert co.get_namespaced_custom_object(G, ALPHA, NS, DGD, "vllm-disagg")["status"]["state"] == "successful"
    core.delete_namespaced_pod(prefill[0].metadata.name, NS)  # recreated, like a ReplicaSet would
    kube.settle()
    assert len(core.list_namespaced_pod(NS, label_selector="nvidia.com/dynamo-sub-component-type=prefill").items) == 2


# -- more core semantics -----------------------------------------------------------------------------
def test_metadata_validation(co, core):
    bad = beta_dgd("Bad_Name")
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, bad)
    assert status_of(err.value)["details"]["causes"][0]["field"] == "metadata.name"
    bad = beta_dgd()
    bad["metadata"]["labels"] = {"app": "not valid!"}
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, bad)
    assert status_of(err.value)["details"]["causes"][0]["field"] == "metadata.labels"
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="p"), spec=client.V1PodSpec(
        containers=[client.V1Container(name="main", image="img")]), status=client.V1PodStatus(phase="Running"))
    created = core.create_namespaced_pod(NS, pod)
    assert created.status.phase == "Pending"  # status is not writable through the main endpoint
    running = core.patch_namespaced_pod_status("p", NS, {"status": {"phase": "Running"}})
    assert running.status.phase == "Running"


def test_delete_collection_and_namespace_cascade(kube, core, co):
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="team")))
    for i in range(3):
        kube.set_pod(f"p{i}", "team", labels={"batch": "yes" if i < 2 else "no"})
    co.create_namespaced_custom_object(G, BETA, "team", DGD, beta_dgd())
    core.delete_collection_namespaced_pod("team", label_selector="batch=yes")
    assert [p.metadata.name for p in core.list_namespaced_pod("team").items] == ["p2"]
    core.delete_namespace("team")
    assert core.list_pod_for_all_namespaces().items == []
    assert co.list_cluster_custom_object(G, BETA, DGD)["items"] == []


def test_any_crd_created_through_the_api_is_served(api_client, kube):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {"spec": {"type": "object", "properties": {
                            "size": {"type": "integer", "minimum": 1},
                            "port": {"x-kubernetes-int-or-string": True},
                            "note": {"type": "string", "nullable": True},
                            "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                                         "properties": {"spec": {"type": "object"}}}}}}}}}]}}
    ext = client.ApiextensionsV1Api(api_client)
    ext.create_custom_resource_definition(crd)
    co = client.CustomObjectsApi(api_client)
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 2}}
    assert co.create_namespaced_custom_object("example.com", "v1", NS, "widgets", widget)["spec"]["size"] == 2
    rich = {**widget, "metadata": {"name": "rich"}, "spec": {
        "size": 1, "port": "http", "note": None,
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t", "bogus": 1}, "spec": {"x": 1}}}}
    spec = co.create_namespaced_custom_object("example.com", "v1", NS, "widgets", rich)["spec"]
    assert spec["port"] == "http" and spec["note"] is None
    assert spec["template"] == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"}, "spec": {}}
    rich["metadata"]["name"] = "rich2"
    rich["spec"]["port"] = 8080
    assert co.create_namespaced_custom_object("example.com", "v1", NS, "widgets", rich)["spec"]["port"] == 8080
    rich["metadata"]["name"] = "rich3"
    rich["spec"]["port"] = [1]
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object("example.com", "v1", NS, "widgets", rich)
    assert status_of(err.value)["details"]["causes"][0]["message"].endswith(
        'spec.port in body must be of type integer or string: "array"')
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object("example.com", "v1", NS, "widgets",
                                           {**widget, "metadata": {"name": "x"}, "spec": {"size": 0}})
    assert err.value.status == 422
    ext.delete_custom_resource_definition("widgets.example.com")
    with pytest.raises(ApiException) as err:
        co.list_namespaced_custom_object("example.com", "v1", NS, "widgets")
    assert err.value.status == 404


def test_end_watches_closes_streams_cleanly(kube, core):
    # The watch would stay open for an hour: if it ends, end_watches ended it.
    events = ["not ended"]
    reader = threading.Thread(target=lambda: events.__setitem__(slice(None), list(
        watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=3600))), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60  # against a hang, not a speed goal
    while reader.is_alive() and time.monotonic() < deadline:
        kube.end_watches()  # again until it ends: the stream may not be open yet the first time
        reader.join(timeout=0.2)
    assert not reader.is_alive() and events == []


def test_converted_views_are_valid_in_their_version(kube, co):
    alpha = seed()
    alpha["metadata"]["name"] = "seed"
    co.create_namespaced_custom_object(G, ALPHA, NS, DGD, alpha)
    for template in TEMPLATES:
        co.create_namespaced_custom_object(G, BETA, NS, DGD, load(template))
    res = kube.resolve("dgd")
    for version in (ALPHA, BETA):
        items = co.list_namespaced_custom_object(G, version, NS, DGD)["items"]
        assert len(items) == len(TEMPLATES) + 1, version  # the seed and every template, in each version
        for item in items:
            found = res.schema(version).normalize(copy.deepcopy(item))
            assert found.unknown == [] and res.schema(version).validate(item) == [], item["metadata"]["name"]
