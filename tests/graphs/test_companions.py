"""A revision's companions (the ConfigMaps, PVCs, DRA claims... its manifest file held beside the
DGD) go wherever the revision goes: shown on the graph and revisions pages, diffed, exported (UI,
API), applied before the DGD on a cluster (the API emulator over HTTP), named as not applicable
on the local runtime. A Secret is never kept. Inputs are upstream's own files
(tests/fixtures/upstream-2a6da14c, verbatim from ai-dynamo/dynamo@2a6da14c)."""

from __future__ import annotations

import html
from pathlib import Path

import pytest
import yaml

from core.documents import load_bundle
from graphs import operations
from graphs.models import Graph, Revision
from graphs.services import graph_update, revision_manifest
from tests.k8s_helpers import NS, apply, make_graph, run

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

UPSTREAM = Path(__file__).parents[1] / "fixtures" / "upstream-2a6da14c"
COMPUTE_DOMAIN_CRD = Path(__file__).parents[1] / "k8s_emulator" / "crds" / "resource.nvidia.com_computedomains.yaml"
MULTINODE = "examples__backends__trtllm__deploy__disagg-multinode.yaml"  # ConfigMap nvidia-config, PVC models, DGD
SECRET = "apiVersion: v1\nkind: Secret\nmetadata: {name: hf-token}\nstringData: {HF_TOKEN: hf_live_value}\n"


def upstream(name: str) -> str:
    return (UPSTREAM / name).read_text()


def companions_of(name: str, *kinds: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(upstream(name)) if d and d["kind"] in kinds]


def imported(api_for, text: str, role: str = "operator"):
    return api_for(role).post("/api/graphs/import/", data=text.encode(), content_type="application/yaml")


def with_configmap_value(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


# -- shown ------------------------------------------------------------------------------------------
def test_the_graph_and_revisions_pages_list_each_companion_with_its_yaml_to_viewers(api_for, client_for):
    assert imported(api_for, upstream(MULTINODE)).status_code == 201
    page = client_for("viewer").get("/graphs/trtllm-disagg-tp8/").content.decode()
    assert 'data-companion="ConfigMap/nvidia-config"' in page
    assert 'data-companion="PersistentVolumeClaim/models"' in page
    assert "free_gpu_memory_fraction: 0.80" in page  # the ConfigMap's YAML, shown
    assert "storage: 100Gi" in page
    revisions = client_for("viewer").get("/graphs/trtllm-disagg-tp8/revisions/").content.decode()
    assert "ConfigMap nvidia-config, PVC models" in revisions
    assert 'data-companion="PersistentVolumeClaim/models"' in revisions
    body = api_for("viewer").get("/api/graphs/trtllm-disagg-tp8/revisions/1/").json()
    assert [(c["kind"], c["name"], c["namespace"]) for c in body["companions"]] == [
        ("ConfigMap", "nvidia-config", ""), ("PersistentVolumeClaim", "models", "")]
    assert body["companions"][1]["object"]["spec"]["resources"] == {"requests": {"storage": "100Gi"}}


def test_a_secret_beside_the_graph_is_refused_everywhere_and_nothing_is_stored(api_for, client_for):
    text = SECRET + "---\n" + upstream(MULTINODE)
    response = imported(api_for, text)
    assert response.status_code == 400
    finding = response.json()["findings"][0]
    assert finding["code"] == "companion_secret"
    assert "Secret hf-token" in finding["message"] and "create Secret hf-token" in finding["fix"]
    assert "hf_live_value" not in response.content.decode()
    page = client_for("operator").post("/graphs/import/", {"yaml": text})
    assert page.status_code == 400
    assert "a Secret is never kept with a graph" in page.content.decode()
    assert "hf_live_value" not in page.content.decode().split("</textarea>")[1]
    checked = api_for("viewer").post("/api/validate/", data=text.encode(), content_type="application/yaml")
    assert checked.status_code == 400 and checked.json()["findings"][0]["code"] == "companion_secret"
    assert not Graph.objects.exists()


def test_a_secret_stored_before_the_rule_is_shown_and_exported_without_its_values(api_for, client_for):
    assert imported(api_for, upstream(MULTINODE)).status_code == 201
    secret = yaml.safe_load(SECRET) | {"data": {"HF_TOKEN": "aGZfbGl2ZV92YWx1ZQ=="}}
    Revision.objects.filter(graph__name="trtllm-disagg-tp8").update(companions=[secret])  # an older row
    for text in (client_for("viewer").get("/graphs/trtllm-disagg-tp8/revisions/").content.decode(),
                 api_for("viewer").get("/api/graphs/trtllm-disagg-tp8/revisions/1/").content.decode(),
                 api_for("viewer").get("/api/graphs/trtllm-disagg-tp8/export/").content.decode(),
                 client_for("viewer").get("/graphs/trtllm-disagg-tp8/export/").content.decode()):
        assert "HF_TOKEN" in text
        assert "hf_live_value" not in text and "aGZfbGl2ZV92YWx1ZQ==" not in text


# -- diffed -----------------------------------------------------------------------------------------
def test_a_changed_configmap_shows_in_the_revisions_diff(api_for, client_for):
    text = upstream(MULTINODE)
    assert imported(api_for, text).status_code == 201
    changed = with_configmap_value(text, "max_num_tokens: 8192", "max_num_tokens: 4096")
    assert imported(api_for, changed).status_code == 200
    diff = api_for("viewer").get("/api/graphs/trtllm-disagg-tp8/diff/?from_revision=1&to_revision=2").json()["diff"]
    # The ConfigMap's file as a block: the changed line, once (prefill.yaml; decode.yaml keeps 8192).
    assert [line for line in diff.splitlines() if "max_num_tokens" in line and line[0] in "+-"] == [
        "-    max_num_tokens: 8192", "+    max_num_tokens: 4096"]
    page = client_for("viewer").get("/graphs/trtllm-disagg-tp8/revisions/?from=1&to=2").content.decode()
    assert "+    max_num_tokens: 4096" in page
    same = api_for("viewer").get("/api/graphs/trtllm-disagg-tp8/diff/?from_revision=2&to_revision=2").json()
    assert same["diff"] == ""


# -- exported ---------------------------------------------------------------------------------------
def test_the_export_is_the_companions_then_the_dgd_and_imports_back_unchanged(api_for, client_for):
    assert imported(api_for, upstream(MULTINODE)).status_code == 201
    graph = Graph.objects.get(name="trtllm-disagg-tp8")
    api_text = api_for("viewer").get("/api/graphs/trtllm-disagg-tp8/export/").content.decode()
    page = client_for("viewer").get("/graphs/trtllm-disagg-tp8/export/")
    assert page["Content-Type"].startswith("application/yaml")
    assert page.content.decode() == api_text
    documents = list(yaml.safe_load_all(api_text))
    assert [d["kind"] for d in documents] == ["ConfigMap", "PersistentVolumeClaim", "DynamoGraphDeployment"]
    bundle = load_bundle(api_text, max_bytes=1 << 20)
    assert bundle.companions == graph.head.companions
    assert bundle.manifest == revision_manifest(graph.head)
    # Imported back, it is the same revision's content: unchanged, so no new revision.
    response = imported(api_for, api_text)
    assert response.status_code == 200 and response.json()["unchanged"] is True
    graph.refresh_from_db()
    assert graph.head.number == 1 and Revision.objects.filter(graph=graph).count() == 1


def test_a_graph_without_companions_exports_its_dgd_alone(api_for):
    make_graph("plain")
    text = api_for("viewer").get("/api/graphs/plain/export/").content.decode()
    assert "---" not in text and yaml.safe_load(text)["kind"] == "DynamoGraphDeployment"


def test_the_api_schema_says_what_export_answers_and_that_import_takes_archives(api_for):
    schema = yaml.safe_load(api_for("viewer").get("/api/schema/").content)
    export = schema["paths"]["/api/graphs/{name}/export/"]["get"]["responses"]["200"]
    assert "companions" in export["description"] and "application/yaml" in export["content"]
    body = schema["paths"]["/api/graphs/import/"]["post"]["requestBody"]["content"]
    assert {"application/yaml", "application/gzip", "application/zip"} <= set(body)
    assert body["application/gzip"]["schema"]["format"] == "binary"


# -- applied on a cluster ---------------------------------------------------------------------------
def _with_companions(graph: Graph, companions: list[dict]) -> Graph:
    graph_update(graph=graph, spec=graph.head.graph_spec, companions=companions, message="companions")
    graph.refresh_from_db()
    return graph


def _upstream_companions() -> list[dict]:
    return (companions_of(MULTINODE, "ConfigMap", "PersistentVolumeClaim")
            + companions_of("examples__backends__vllm__deploy__xpu__agg_xpu_dra.yaml", "ResourceClaimTemplate")
            + companions_of("recipes__deepseek-v4__deepseek-v4-pro__vllm__disagg__gb200__deploy.yaml",
                            "ComputeDomain"))


def test_companions_are_applied_before_the_dgd_by_server_side_apply_in_its_namespace(cluster, kube):
    kube.install_crd(COMPUTE_DOMAIN_CRD)
    graph = _with_companions(make_graph(), _upstream_companions())
    op = apply(graph)
    assert op.state == "succeeded", op.result
    for resource, name in (("configmaps", "nvidia-config"), ("persistentvolumeclaims", "models"),
                           ("resourceclaimtemplates", "gpu-template"), ("computedomains", "dsv4-pro-compute-domain")):
        obj = kube.get(resource, name, namespace=NS)
        assert obj is not None, resource
        assert [m["manager"] for m in obj["metadata"]["managedFields"]] == ["dynamo-control-plane"]
        assert not obj["metadata"].get("ownerReferences")  # a PVC outlives the graph's deployment
    assert kube.get("configmaps", "nvidia-config", namespace=NS)["data"]["prefill.yaml"].startswith("# SPDX")
    assert kube.get("computedomains", "dsv4-pro-compute-domain", namespace=NS)["spec"]["numNodes"] == 0
    # A server dry run of every companion, then each for real, then the DGD.
    writes = [(r.path.rsplit("/", 2)[-2], r.param("dryRun")) for r in kube.find_requests("PATCH")]
    kinds = ["configmaps", "persistentvolumeclaims", "resourceclaimtemplates", "computedomains"]
    assert writes == [*((k, "All") for k in kinds), *((k, None) for k in kinds), ("dynamographdeployments", None)]
    assert all(r.param("fieldManager") == "dynamo-control-plane" and r.param("force") is None
               for r in kube.find_requests("PATCH"))
    again = apply(graph)
    assert again.state == "succeeded" and again.result.startswith("no change"), again.result


def test_a_dry_run_previews_the_companions_and_writes_nothing(cluster, kube):
    kube.install_crd(COMPUTE_DOMAIN_CRD)
    graph = _with_companions(make_graph(), _upstream_companions())
    op = apply(graph, dry_run=True)
    assert op.state == "succeeded", op.result
    assert f"+++ revision {graph.head.number}: ConfigMap {NS}/nvidia-config (server dry run)" in op.diff
    assert "+  name: models" in op.diff
    assert kube.get("configmaps", "nvidia-config", namespace=NS) is None
    assert kube.get("dgd", "g", namespace=NS) is None


@pytest.mark.parametrize(("companion", "message"), [
    # Upstream's own placeholder: recipes/deepseek-v4/deepseek-v4-pro/sglang/disagg-gb200/deploy.yaml.
    (companions_of("recipes__deepseek-v4__deepseek-v4-pro__sglang__disagg-gb200__deploy.yaml", "ComputeDomain")[0],
     "ComputeDomain dsv4-pro-compute-domain names namespace '<your-namespace>'"),
    (companions_of("examples__global_planner__global-planner-vllm-test.yaml", "ClusterRoleBinding")[0],
     "ClusterRoleBinding is cluster-wide"),
])
def test_a_companion_outside_the_graphs_namespace_is_refused_before_anything_is_written(cluster, kube, companion,
                                                                                          message):
    kube.install_crd(COMPUTE_DOMAIN_CRD)
    graph = _with_companions(make_graph(), [*companions_of(MULTINODE, "ConfigMap"), companion])
    op = apply(graph)
    assert op.state == "failed"
    assert message in op.result
    assert not kube.find_requests("PATCH")
    assert kube.get("dgd", "g", namespace=NS) is None


def test_a_kind_the_cluster_does_not_serve_fails_naming_it_and_writes_nothing(cluster, kube):
    graph = _with_companions(make_graph(), _upstream_companions())  # no ComputeDomain CRD installed
    op = apply(graph)
    assert op.state == "failed"
    assert "ComputeDomain dsv4-pro-compute-domain" in op.result
    assert "does not serve resource.nvidia.com/v1beta1 ComputeDomain" in op.result
    assert not [r for r in kube.find_requests("PATCH") if r.param("dryRun") is None]
    assert kube.get("configmaps", "nvidia-config", namespace=NS) is None
    assert kube.get("dgd", "g", namespace=NS) is None


def test_a_companion_field_another_manager_owns_is_a_conflict_naming_it_unless_forced(cluster, kube):
    from kubernetes import client

    configmap = companions_of(MULTINODE, "ConfigMap")[0]
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nvidia-config", "namespace": NS},
              "data": {"prefill.yaml": "tensor_parallel_size: 4\n"}}
    api = client.ApiClient(kube.configuration())
    api.call_api(f"/api/v1/namespaces/{NS}/configmaps/nvidia-config", "PATCH", body=theirs,
                 query_params=[("fieldManager", "kubectl")], auth_settings=["BearerToken"],
                 header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"})
    graph = _with_companions(make_graph(), [configmap])
    op = apply(graph)
    assert op.state == "failed"
    assert f"apply ConfigMap {NS}/nvidia-config on cluster emu" in op.result
    assert "apply with force" in op.result and "kubectl" in op.result
    assert kube.get("dgd", "g", namespace=NS) is None
    forced = run(operations.graph_apply(graph=graph, runtime="kubernetes", cluster="emu", namespace=NS, force=True))
    assert forced.state == "succeeded", forced.result
    assert kube.get("configmaps", "nvidia-config", namespace=NS)["data"] == configmap["data"]


def test_deleting_the_deployment_leaves_the_companions_and_says_so(cluster, kube):
    graph = _with_companions(make_graph(), companions_of(MULTINODE, "ConfigMap", "PersistentVolumeClaim"))
    assert apply(graph).state == "succeeded"
    assert run(operations.graph_undeploy(graph=graph)).state == "succeeded"
    assert kube.get("dgd", "g", namespace=NS) is None
    assert kube.get("persistentvolumeclaims", "models", namespace=NS) is not None
    graph.deployment.refresh_from_db()
    assert "ConfigMap nvidia-config, PVC models stay in llm" in graph.deployment.message


# -- the local runtime ------------------------------------------------------------------------------
def test_the_local_runtime_names_the_companions_it_does_not_apply(api_for, client_for):
    assert imported(api_for, upstream(MULTINODE)).status_code == 201
    graph = Graph.objects.get(name="trtllm-disagg-tp8")
    note = "ConfigMap nvidia-config and PVC models are applied on clusters only; the local runtime runs the graph's " \
           "processes without them"
    assert note in html.unescape(client_for("viewer").get("/graphs/trtllm-disagg-tp8/").content.decode())
    op = run(operations.graph_apply(graph=graph, runtime="local", via="api"))
    assert op.state == "succeeded", op.result
    assert note in op.result
