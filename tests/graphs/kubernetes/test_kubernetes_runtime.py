"""The Kubernetes runtime through the product's own services (operations), against the API
emulator over real HTTP with the real kubernetes client: apply, re-apply, dry-run diff,
conflicts, scaling through the adapter and without it, the Planner guard, delete, retries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.errors import OperationRefused, RuntimeFailure
from core.specio import spec_from_data
from graphs import operations
from graphs.models import Deployment, Operation
from graphs.services import graph_update
from tests.k8s_helpers import CLUSTER, NS, apply, dgd_path, make_graph, run, scale

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

ROOT = Path(__file__).resolve().parents[3]
ALPHA, BETA = "nvidia.com/v1alpha1", "nvidia.com/v1beta1"
APPLY_CT = "application/apply-patch+yaml"


def _dgd(kube, name="g", version=None):
    return kube.get("dgd", name, namespace=NS, version=version)


def _with_decode_replicas(graph, replicas):
    data = graph.head.graph_spec.model_dump()
    next(s for s in data["services"] if s["name"] == "decode")["replicas"] = replicas
    graph_update(graph=graph, spec=spec_from_data(data), message=f"decode x{replicas}")
    graph.refresh_from_db()
    return graph


# -- apply ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("api_version", [BETA, ALPHA])
def test_apply_creates_the_dgd_with_server_side_apply_in_the_chosen_version(cluster, kube, api_version):
    graph = make_graph()
    op = apply(graph, api_version=api_version)
    assert op.state == "succeeded", op.result
    assert op.result == "revision 1 applied"
    live = _dgd(kube, version=api_version.split("/")[1])
    assert live["apiVersion"] == api_version and live["metadata"]["namespace"] == NS
    if api_version == BETA:
        assert [c["name"] for c in live["spec"]["components"]] == ["Frontend", "prefill", "decode"]
    else:
        assert set(live["spec"]["services"]) == {"Frontend", "prefill", "decode"}
    [patch] = kube.find_requests("PATCH", dgd_path())
    version = api_version.split("/")[1]
    assert patch.path == f"/apis/nvidia.com/{version}/namespaces/{NS}/dynamographdeployments/g"
    assert patch.content_type == APPLY_CT
    assert (patch.param("fieldManager"), patch.param("force"), patch.param("dryRun")) == (
        "dynamo-control-plane", None, None)
    assert [m["manager"] for m in live["metadata"]["managedFields"] if m["operation"] == "Apply"] == [
        "dynamo-control-plane"]
    dep = Deployment.objects.get(graph=graph)
    assert (dep.runtime, dep.cluster_name, dep.namespace, dep.api_version, dep.active) == (
        "kubernetes", CLUSTER, NS, api_version, True)
    assert dep.manifest["metadata"]["namespace"] == NS
    # every later call of this graph speaks the same version
    scale(graph, "decode", 2)
    delete = run(operations.graph_undeploy(graph=graph))
    assert delete.state == "succeeded"
    versions = {r.path.split("/")[3] for r in kube.requests if "/nvidia.com/" in r.path and r.method != "GET"}
    assert versions == {version}


def test_reapply_changes_nothing(cluster, kube):
    graph = make_graph()
    assert apply(graph).state == "succeeded"
    before = _dgd(kube)["metadata"]
    again = apply(graph)
    assert (again.state, again.result, again.diff) == ("succeeded", "no change", "")
    after = _dgd(kube)["metadata"]
    assert (after["resourceVersion"], after["generation"]) == (before["resourceVersion"], before["generation"])


def test_dry_run_stores_nothing_and_shows_a_diff_against_the_live_object(cluster, kube):
    graph = make_graph()
    preview = apply(graph, dry_run=True)
    assert preview.state == "succeeded" and preview.result == "dry run: would change the live graph"
    assert _dgd(kube) is None
    assert "+apiVersion: nvidia.com/v1beta1" in preview.diff and "+  name: g" in preview.diff
    assert kube.find_requests("PATCH", dgd_path())[-1].param("dryRun") == "All"
    assert not Deployment.objects.get(graph=graph).active

    apply(graph)
    live = _dgd(kube)
    _with_decode_replicas(graph, 3)
    preview = apply(graph, dry_run=True)
    assert preview.result == "dry run: would change the live graph"
    lines = [line for line in preview.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert lines == ["-    replicas: 1", "+    replicas: 3"], preview.diff
    assert preview.diff.startswith(f"--- live {CLUSTER}/{NS}/g\n+++ revision 2 (server dry run)")
    for noise in ("managedFields", "resourceVersion", "status:", "uid:"):
        assert noise not in preview.diff
    assert _dgd(kube)["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
    assert Deployment.objects.get(graph=graph).revision.number == 1


def test_a_field_another_manager_owns_is_left_alone_and_named_unless_forced(cluster, kube, api_client_for):
    graph = make_graph()
    apply(graph)
    theirs = {"apiVersion": BETA, "kind": "DynamoGraphDeployment", "metadata": {"name": "g", "namespace": NS},
              "spec": {"components": [{"name": "decode", "replicas": 5}]}}
    api_client_for(kube).call_api(
        f"/apis/nvidia.com/v1beta1/namespaces/{NS}/dynamographdeployments/g", "PATCH", body=theirs,
        query_params=[("fieldManager", "kubectl"), ("force", "true")],
        header_params={"Content-Type": APPLY_CT}, auth_settings=["BearerToken"], response_type="object")
    op = apply(graph)
    assert op.state == "succeeded", op.result
    assert 'left .spec.components[name="decode"].replicas at 5 (revision: 1): owned by kubectl (Apply)' in op.result
    assert "apply with force to take it" in op.result
    ours = [r for r in kube.find_requests("PATCH", dgd_path()) if r.param("fieldManager") == "dynamo-control-plane"]
    assert ours and all(r.param("force") is None for r in ours)
    assert _dgd(kube)["spec"]["components"][2]["replicas"] == 5
    assert Deployment.objects.get(graph=graph).desired_replicas(graph.head.graph_spec)["decode"] == 5
    forced = run(operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS,
                                          force=True, via="api"))
    assert forced.state == "succeeded", forced.result
    assert 'took .spec.components[name="decode"].replicas from kubectl (Apply): 5 -> 1' in forced.result
    assert _dgd(kube)["spec"]["components"][2]["replicas"] == 1
    managers = {e["manager"] for e in _dgd(kube)["metadata"]["managedFields"]
                if "f:replicas" in str(e.get("fieldsV1", {}).get("f:spec", {}))}
    assert "kubectl" not in managers


def test_an_apply_after_our_own_scale_takes_the_replicas_back(cluster, kube):
    graph = make_graph()
    apply(graph)
    assert scale(graph, "decode", 3).state == "succeeded"
    op = apply(graph)  # the revision says 1: our own earlier patch is the only other owner
    assert op.state == "succeeded", op.result
    assert _dgd(kube)["spec"]["components"][2]["replicas"] == 1
    conflict, forced = kube.find_requests("PATCH", dgd_path())[-2:]
    assert (conflict.status, forced.status, forced.param("force")) == (409, 200, "true")
    assert Deployment.objects.get(graph=graph).replicas == {}


def test_target_must_be_a_registered_cluster_and_an_allowed_namespace(cluster, kube):
    graph = make_graph()
    with pytest.raises(OperationRefused, match="namespace 'kube-system' is not allowed on cluster emu"):
        operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace="kube-system")
    with pytest.raises(OperationRefused, match="no cluster named 'nope'"):
        operations.graph_apply(graph=graph, runtime="kubernetes", cluster="nope", namespace=NS)
    apply(graph)
    with pytest.raises(OperationRefused, match="runs on cluster emu in namespace llm; delete it there first"):
        operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace="default")
    assert not kube.find_requests("PATCH", dgd_path(namespace="default"))


# -- scale ------------------------------------------------------------------------------------------
def test_scale_goes_through_the_scaling_adapter_when_it_exists(cluster, kube):
    graph = make_graph(adapter=True)
    apply(graph)
    assert kube.get("dgdsa", "g-decode", namespace=NS) is not None
    kube.clear_requests()
    op = scale(graph, "decode", 3)
    assert op.state == "succeeded", op.result
    [patch] = kube.find_requests("PATCH")
    assert patch.path.endswith("/dynamographdeploymentscalingadapters/g-decode/scale")
    assert patch.body == {"spec": {"replicas": 3}} and patch.status == 200
    assert _dgd(kube)["spec"]["components"][2]["replicas"] == 3  # the operator copies it into the DGD
    assert _dgd(kube)["spec"]["components"][1].get("replicas") == 1  # prefill untouched
    # a re-apply keeps the adapter's count instead of fighting its webhook
    again = apply(graph)
    assert again.state == "succeeded", again.result
    assert "decode keeps its live 3 replicas: its scaling adapter owns the count" in again.result
    assert _dgd(kube)["spec"]["components"][2]["replicas"] == 3
    assert Deployment.objects.get(graph=graph).replicas == {"decode": 3}


def test_scale_without_an_adapter_patches_the_dgd_with_a_json_patch_test_op(cluster, kube):
    graph = make_graph()
    apply(graph)
    kube.clear_requests()
    assert scale(graph, "decode", 2).state == "succeeded"
    adapter, patch = kube.find_requests("PATCH")
    assert adapter.path.endswith("/g-decode/scale") and adapter.status == 404
    assert patch.content_type == "application/json-patch+json" and patch.status == 200
    assert patch.body == [{"op": "test", "path": "/spec/components/2/name", "value": "decode"},
                          {"op": "replace", "path": "/spec/components/2/replicas", "value": 2}]
    live = _dgd(kube)["spec"]["components"]
    assert [c.get("replicas") for c in live] == [1, 1, 2]
    assert Deployment.objects.get(graph=graph).replicas == {"decode": 2}


def test_scale_of_a_v1alpha1_graph_merge_patches_its_service(cluster, kube):
    graph = make_graph()
    apply(graph, api_version=ALPHA)
    kube.clear_requests()
    assert scale(graph, "prefill", 2).state == "succeeded"
    patch = kube.find_requests("PATCH")[-1]
    assert patch.path == f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments/g"
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == {"spec": {"services": {"prefill": {"replicas": 2}}}}
    services = _dgd(kube, version="v1alpha1")["spec"]["services"]
    assert (services["prefill"]["replicas"], services["decode"]["replicas"]) == (2, 1)


def test_a_pool_the_planner_manages_warns_before_a_manual_scale(cluster, kube):
    graph = make_graph(planner=True)
    assert apply(graph).state == "succeeded"
    with pytest.raises(OperationRefused, match=r"managed by Dynamo's Planner \(Planner\).*force"):
        operations.graph_scale(graph=graph, service="decode", replicas=2)
    op = scale(graph, "decode", 2, force=True)
    assert op.state == "succeeded" and op.params["force"] is True
    assert _dgd(kube)["spec"]["components"][2]["replicas"] == 2


# -- delete -----------------------------------------------------------------------------------------
def test_delete_removes_the_dgd_and_already_gone_is_success(cluster, kube):
    graph = make_graph()
    apply(graph)
    assert run(operations.graph_undeploy(graph=graph)).state == "succeeded"
    assert _dgd(kube) is None and kube.list_objects("pods", NS) == []
    dep = Deployment.objects.get(graph=graph)
    assert (dep.active, dep.state) == (False, "deleting")
    apply(graph)
    kube.delete_object("dgd", "g", namespace=NS)  # someone else deleted it first
    op = run(operations.graph_undeploy(graph=graph))
    assert op.state == "succeeded", op.result
    assert kube.find_requests("DELETE", dgd_path())[-1].status == 404


# -- failures ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [503, 429, 500])
def test_transient_errors_are_retried_then_succeed(cluster, kube, status):
    graph = make_graph()
    kube.inject("PATCH", dgd_path(), status, times=2, retry_after=1 if status == 429 else None)
    op = apply(graph)
    assert op.state == "succeeded", op.result
    assert [r.status for r in kube.find_requests("PATCH", dgd_path())] == [status, status, 201]


def test_a_dropped_connection_mid_apply_is_retried(cluster, kube):
    graph = make_graph()
    kube.inject("PATCH", dgd_path(), drop=True)
    op = apply(graph)
    assert op.state == "succeeded", op.result
    assert [r.status for r in kube.find_requests("PATCH", dgd_path())] == [-1, 201]
    assert _dgd(kube) is not None


def test_transient_errors_that_last_leave_the_operation_to_be_retried(cluster, kube):
    graph = make_graph()
    kube.inject("PATCH", dgd_path(), 503, times=None)
    op = operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS)
    with pytest.raises(RuntimeFailure) as err:
        operations.operation_run(op.pk)
    assert err.value.transient
    op.refresh_from_db()
    assert op.state == "running" and "gave up after 3 attempts" in op.result and "(HTTP 503)" in op.result
    assert len(kube.find_requests("PATCH", dgd_path())) == 3
    kube.clear_faults()
    Operation.objects.filter(pk=op.pk).update(lease_until=None, state="pending")
    assert run(op).state == "succeeded"


def test_client_errors_are_not_retried_and_fail_with_the_servers_message(cluster, kube):
    graph = make_graph()
    message = ('dynamographdeployments.nvidia.com "g" is forbidden: User "system:serviceaccount:cp:dash" '
               'cannot patch resource "dynamographdeployments" in API group "nvidia.com" in the namespace "llm"')
    kube.inject("PATCH", dgd_path(), 403, body={"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                "message": message, "reason": "Forbidden", "code": 403})
    op = apply(graph)
    assert op.state == "failed"
    assert message in op.result and "(HTTP 403)" in op.result
    assert len(kube.find_requests("PATCH", dgd_path())) == 1


def test_a_cluster_without_the_dynamo_crds_says_so(cluster, kube):
    graph = make_graph()
    kube.remove_crd("dynamographdeployments.nvidia.com")
    op = apply(graph)
    assert op.state == "failed"
    assert "(HTTP 404)" in op.result and "is the Dynamo operator installed" in op.result


def test_an_unreachable_cluster_fails_fast_and_transiently(cluster, kube):
    graph = make_graph()
    kube.stop()
    op = operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS)
    with pytest.raises(RuntimeFailure) as err:
        operations.operation_run(op.pk)
    assert err.value.transient and "no answer from cluster emu" in str(err.value)


# -- the one-module rule ----------------------------------------------------------------------------
def test_only_one_product_module_imports_the_kubernetes_client():
    importers = set()
    tops = [p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
            and p.name not in ("tests", "var", "node_modules", "staticfiles")]
    for path in [*ROOT.glob("*.py"), *(f for top in tops for f in top.rglob("*.py"))]:
        rel = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(), str(rel))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(n == "kubernetes" or n.startswith("kubernetes.") for n in names):
                importers.add(str(rel))
    assert importers == {"clusters/kubernetes.py"}


@pytest.fixture
def api_client_for():
    def make(kube):
        return kube.api_client()

    return make

