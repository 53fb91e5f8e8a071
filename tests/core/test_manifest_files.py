"""A manifest file imports as ``kubectl apply -f`` takes it: the DGD beside its ConfigMaps and
claims, YAML anchors and merge keys, nulls the API server prunes, a status it ignores, several
DGDs in one file. Inputs are upstream's own files (tests/fixtures/upstream-2a6da14c, verbatim from
ai-dynamo/dynamo@2a6da14c)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.documents import as_stored, load_bundle
from core.errors import ManifestError
from core.specio import MAX_EXPANDED_NODES, load_documents
from graphs.models import Graph
from graphs.services import revision_manifest
from tests.badinput import alias_bomb

pytestmark = pytest.mark.django_db
UPSTREAM = Path(__file__).parents[1] / "fixtures" / "upstream-2a6da14c"
IMPORT = "/api/graphs/import/"


def upstream(name: str) -> bytes:
    return (UPSTREAM / name).read_bytes()


def post(api_for, body: bytes | str, role: str = "operator"):
    data = body.encode() if isinstance(body, str) else body
    return api_for(role).post(IMPORT, data=data, content_type="application/yaml")


def test_a_dgd_beside_its_configmap_and_pvc_imports_and_keeps_them(api_for):
    # examples/backends/trtllm/deploy/disagg-multinode.yaml: ConfigMap nvidia-config, PVC models, the DGD.
    response = post(api_for, upstream("examples__backends__trtllm__deploy__disagg-multinode.yaml"))
    assert response.status_code == 201, response.json()
    head = Graph.objects.get(name="trtllm-disagg-tp8").head
    assert [(c["kind"], c["metadata"]["name"]) for c in head.companions] == [
        ("ConfigMap", "nvidia-config"), ("PersistentVolumeClaim", "models")]
    documents = list(yaml.safe_load_all(upstream("examples__backends__trtllm__deploy__disagg-multinode.yaml")))
    assert head.companions == [d for d in documents if d and d["kind"] != "DynamoGraphDeployment"]


def test_an_edit_of_the_spec_alone_keeps_the_companions(api_for):
    post(api_for, upstream("examples__backends__trtllm__deploy__agg-with-config.yaml"))
    graph = Graph.objects.get(name="trtllm-agg")
    manifest = revision_manifest(graph.head)
    manifest["metadata"].setdefault("labels", {})["team"] = "serving"
    response = post(api_for, yaml.safe_dump(manifest))
    assert response.status_code == 200, response.json()
    graph.refresh_from_db()
    assert graph.head.number == 2
    assert [c["metadata"]["name"] for c in graph.head.companions] == ["nvidia-config"]


def test_validation_names_the_companions_it_keeps(api_for):
    response = api_for("viewer").post("/api/validate/", data=upstream(
        "examples__backends__vllm__deploy__xpu__disagg_planner_xpu_dra.yaml"), content_type="application/yaml")
    assert response.status_code == 200
    kept = [f for f in response.json()["findings"] if f["code"] == "companions_kept"]
    assert len(kept) == 1
    assert "ConfigMap planner-profile-data" in kept[0]["message"]
    assert "ResourceClaimTemplate gpu-template" in kept[0]["message"]


def test_yaml_anchors_are_expanded_as_kubectl_expands_them():
    text = upstream("recipes__qwen3-32b__vllm__cloud-providers__kustomize__base__deploy.yaml")
    (graph,) = load_bundle(text, max_bytes=1 << 20).graphs
    assert graph == as_stored(yaml.safe_load(text))
    assert graph["apiVersion"] == "nvidia.com/v1alpha1"
    envs = [s["extraPodSpec"]["mainContainer"].get("env") for s in graph["spec"]["services"].values()
            if s.get("extraPodSpec", {}).get("mainContainer", {}).get("env")]
    assert len(envs) == 2 and envs[0] == envs[1]
    assert envs[0][0] == {"name": "MODEL_NAME", "value": "Qwen/Qwen3-32B"}
    # Each place is its own copy: changing one does not change the other.
    envs[0].append({"name": "X", "value": "1"})
    assert envs[1] != envs[0]


def test_merge_keys_apply_and_a_written_key_overrides_a_merged_one():
    text = ("base: &base {a: 1, b: 2}\n"
            "child:\n  <<: *base\n  b: 3\n")
    (doc,) = load_documents(text, max_bytes=1 << 20)
    assert doc["child"] == {"a": 1, "b": 3}


def test_a_key_written_twice_is_still_refused_beside_a_merge():
    with pytest.raises(ManifestError, match="duplicate key 'b'"):
        load_documents("base: &base {a: 1}\nchild:\n  <<: *base\n  b: 3\n  b: 4\n", max_bytes=1 << 20)


def test_an_alias_bomb_is_refused_by_its_expanded_size(api_for):
    with pytest.raises(ManifestError, match=f"more than {MAX_EXPANDED_NODES:,} values"):
        load_documents(alias_bomb(7), max_bytes=1 << 20)
    response = post(api_for, alias_bomb(7))
    assert response.status_code == 400
    assert "more than" in response.json()["detail"]
    assert Graph.objects.count() == 0


def test_a_recursive_alias_is_refused():
    with pytest.raises(ManifestError, match="recursive alias"):
        load_documents("a: &a\n  b: *a\n", max_bytes=1 << 20)


def test_nulls_the_api_server_prunes_are_pruned(api_for):
    # recipes/deepseek-v32-fp4/trtllm/agg-round-robin/deploy.yaml writes `containers: null`.
    name = "recipes__deepseek-v32-fp4__trtllm__agg-round-robin__deploy.yaml"
    response = post(api_for, upstream(name))
    assert response.status_code == 201, response.json()
    graph = Graph.objects.get(name=response.json()["name"])
    exported = revision_manifest(graph.head)
    assert "containers: null" in upstream(name).decode()
    written = next(d for d in yaml.safe_load_all(upstream(name)) if d and d["kind"] == "DynamoGraphDeployment")
    assert exported == as_stored(written)
    assert "null" not in yaml.safe_dump(exported)


def test_nullable_fields_keep_their_null():
    schema = {"properties": {"keep": {"type": "string", "nullable": True}, "drop": {"type": "string"}}}
    from core.documents import prune_nulls

    assert prune_nulls({"keep": None, "drop": None, "other": None}, schema) == {"keep": None, "other": None}


def test_a_status_block_is_ignored_as_the_status_subresource_ignores_it(api_for):
    # The operator's own test output: the DGD it generates, with its status.
    name = "deploy__operator__internal__controller__testdata__dgdr__deployment__output.yaml"
    written = next(d for d in yaml.safe_load_all(upstream(name)) if d and d["kind"] == "DynamoGraphDeployment")
    assert "status" in written
    response = post(api_for, yaml.safe_dump(written))
    assert response.status_code == 201, response.json()
    assert "status" not in revision_manifest(Graph.objects.get(name=response.json()["name"]).head)


def test_a_file_of_several_dgds_imports_each_as_a_graph(api_for):
    name = "examples__global_planner__global-planner-mocker-test.yaml"
    documents = [d for d in yaml.safe_load_all(upstream(name)) if d]
    dgds = [d["metadata"]["name"] for d in documents if d["kind"] == "DynamoGraphDeployment"]
    assert len(dgds) == 5
    response = post(api_for, upstream(name))
    assert response.status_code == 201, response.json()
    assert sorted(response.json()["imported_graphs"]) == sorted(n.replace(".", "-") for n in dgds)
    assert Graph.objects.count() == 5


def test_a_file_whose_other_objects_are_not_kubernetes_objects_is_refused_whole(api_for):
    text = upstream("examples__backends__trtllm__deploy__agg-with-config.yaml").decode() + "---\n- just a list\n"
    response = post(api_for, text)
    assert response.status_code == 400
    assert "document 3 is not a Kubernetes object" in response.json()["detail"]
    assert Graph.objects.count() == 0


def test_a_file_without_a_graph_says_what_it_holds(api_for):
    response = post(api_for, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
                             "apiVersion: v1\nkind: Secret\nmetadata: {name: b}\n")
    assert response.status_code == 400
    assert "(ConfigMap, Secret) and no DynamoGraphDeployment" in response.json()["detail"]


def test_the_import_page_imports_a_file_with_companions(client_for):
    text = upstream("examples__backends__trtllm__deploy__agg-with-config.yaml").decode()
    response = client_for("operator").post("/graphs/import/", {"yaml": text})
    assert response.status_code == 302, response.content[:2000]
    assert Graph.objects.get(name="trtllm-agg").head.companions[0]["kind"] == "ConfigMap"
