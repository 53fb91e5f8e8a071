"""Import, export and API-version conversion judged on upstream Dynamo's own manifests.

The fixtures under tests/fixtures/upstream/ are verbatim files of github.com/ai-dynamo/dynamo at
commit 2a6da14c (the path with '/' as '__'). Two promises: an export in the manifest's own API
version and release gives it back unchanged, and the other API version gets each field where
the operator's conversion webhook puts it (deploy/operator/api/v1alpha1/shared_spec_conversion.go
and dynamographdeployment_conversion.go at that commit), so that converting back gives the
original."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from core.dgd.convert import PAYLOAD
from core.dgd.parse import import_manifest
from core.dgd.render import V1ALPHA1, V1BETA1, conversion_losses, render
from core.schema import structural_findings

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def pruned(value):
    """As the API server stores it: a null in a field that is not nullable is dropped."""
    if isinstance(value, dict):
        return {k: pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [pruned(v) for v in value]
    return value


def documents() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(UPSTREAM.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") == "DynamoGraphDeployment":
                out.append((f"{path.stem}#{i}", pruned(doc)))
    return out


DOCS = documents()
# componentType "main" (upstream's planner test configs) is outside v1beta1's type enum: the
# operator would write type "main", which a v1beta1 client cannot apply.
REFUSED = {"components__src__dynamo__planner__tests__manual__perf_test_configs__agg_8b#0"}


def other(api_version: str) -> str:
    return V1ALPHA1 if api_version == V1BETA1 else V1BETA1


def doc(stem: str, index: int = 0) -> dict:
    return copy.deepcopy(dict(DOCS)[f"{stem}#{index}"])


def test_the_fixtures_hold_manifests_of_both_api_versions():
    assert {d["apiVersion"] for _name, d in DOCS} == {V1ALPHA1, V1BETA1}


@pytest.mark.parametrize(("name", "manifest"), DOCS, ids=[n for n, _ in DOCS])
def test_an_upstream_manifest_comes_back_unchanged_in_its_own_version(name, manifest):
    assert render(import_manifest(copy.deepcopy(manifest)), manifest["apiVersion"]) == manifest


@pytest.mark.parametrize(("name", "manifest"), [d for d in DOCS if d[0] not in REFUSED],
                         ids=[n for n, _ in DOCS if n not in REFUSED])
def test_an_upstream_manifest_converts_to_the_other_version_and_back_unchanged(name, manifest):
    spec = import_manifest(copy.deepcopy(manifest))
    target = other(manifest["apiVersion"])
    assert conversion_losses(spec, target) == []
    converted = render(spec, target)
    assert structural_findings(converted) == []
    assert render(import_manifest(copy.deepcopy(converted)), manifest["apiVersion"]) == manifest


def test_a_trtllm_recipe_keeps_its_components_working_dir():
    # Upstream's 1.x TensorRT-LLM recipes still cd into /workspace/components/backends/trtllm:
    # an export in the graph's own release must not move it.
    manifest = doc("recipes__qwen3-235b-a22b-fp8__trtllm__agg__hopper__deploy", 1)
    main = manifest["spec"]["services"]["TrtllmWorker"]["extraPodSpec"]["mainContainer"]
    assert main["workingDir"] == "/workspace/components/backends/trtllm"
    out = render(import_manifest(copy.deepcopy(manifest)), V1ALPHA1)
    assert out["spec"]["services"]["TrtllmWorker"]["extraPodSpec"]["mainContainer"]["workingDir"] == main["workingDir"]


def test_a_gaie_frontend_sidecar_imports_in_v1beta1_and_its_name_goes_into_the_payload_in_v1alpha1():
    # v1beta1 frontendSidecar names a container (a string); v1alpha1's is an object. Without a
    # v1alpha1 origin the operator keeps the container as a sidecar and the name in the payload
    # (shared_spec_conversion.go:619-627).
    manifest = doc("examples__backends__vllm__deploy__gaie__agg")
    spec = import_manifest(copy.deepcopy(manifest))
    assert spec.service("VllmDecodeWorker").extra_v1beta1["frontendSidecar"] == "sidecar-frontend"
    alpha = render(spec, V1ALPHA1)
    worker = alpha["spec"]["services"]["VllmDecodeWorker"]
    assert "frontendSidecar" not in worker
    assert [c["name"] for c in worker["extraPodSpec"]["containers"]] == ["sidecar-frontend"]
    payload = json.loads(alpha["metadata"]["annotations"][PAYLOAD])
    # The container's name goes with it (needsFrontendSidecarKey, shared_spec_conversion.go:658 + 737),
    # so that a sidecar deleted in v1alpha1 does not bring the reference back (:1711-1720).
    assert payload == {"version": 1, "spec": {"components": [
        {"name": "VllmDecodeWorker", "frontendSidecar": "sidecar-frontend",
         "podTemplate": {"spec": {"containers": [{"name": "sidecar-frontend"}]}}}]}}


def test_a_v1alpha1_frontend_sidecar_becomes_the_sidecar_frontend_container_and_comes_back():
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    sidecar = {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0", "args": ["-m", "dynamo.frontend"],
               "envs": [{"name": "DYN_LOG", "value": "debug"}], "envFromSecret": "hf-token-secret"}
    manifest["spec"]["services"]["decode"]["frontendSidecar"] = sidecar
    beta = render(import_manifest(copy.deepcopy(manifest)), V1BETA1)
    decode = next(c for c in beta["spec"]["components"] if c["name"] == "decode")
    assert decode["frontendSidecar"] == "sidecar-frontend"  # shared_spec_conversion.go:1537-1541
    assert decode["podTemplate"]["spec"]["containers"][-1] == {  # :2151-2171
        "name": "sidecar-frontend", "image": sidecar["image"], "args": sidecar["args"], "env": sidecar["envs"],
        "envFrom": [{"secretRef": {"name": "hf-token-secret"}}]}
    assert structural_findings(beta) == []
    assert render(import_manifest(copy.deepcopy(beta)), V1ALPHA1) == manifest


def test_volume_mounts_become_main_container_mounts_and_pvcs_go_into_the_payload():
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    beta = render(import_manifest(copy.deepcopy(manifest)), V1BETA1)
    decode = next(c for c in beta["spec"]["components"] if c["name"] == "decode")
    main = decode["podTemplate"]["spec"]["containers"][0]
    assert main["volumeMounts"][-1] == {"name": "model-cache", "mountPath": "/opt/model"}  # :1566-1572
    assert "compilationCache" not in decode  # no mount is flagged useAsCompilationCache
    payload = json.loads(beta["metadata"]["annotations"][PAYLOAD])
    assert payload["version"] == 1 and payload["spec"]["pvcs"] == manifest["spec"]["pvcs"]
    assert payload["spec"]["services"]["decode"]["volumeMounts"] == manifest["spec"]["services"]["decode"][
        "volumeMounts"]


def test_a_compilation_cache_mount_becomes_compilation_cache_and_back():
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    manifest["spec"]["services"]["decode"]["volumeMounts"] = [
        {"name": "compilation-cache", "mountPoint": "/root/.cache", "useAsCompilationCache": True}]
    beta = render(import_manifest(copy.deepcopy(manifest)), V1BETA1)
    decode = next(c for c in beta["spec"]["components"] if c["name"] == "decode")
    assert decode["compilationCache"] == {"pvcName": "compilation-cache", "mountPath": "/root/.cache"}  # :190-200
    assert "decode" not in json.loads(beta["metadata"]["annotations"][PAYLOAD])["spec"].get("services", {})
    assert render(import_manifest(copy.deepcopy(beta)), V1ALPHA1) == manifest


def test_compilation_cache_becomes_one_flagged_volume_mount():
    manifest = doc("examples__deployments__EKS__manifests__vllm__disagg")
    alpha = render(import_manifest(copy.deepcopy(manifest)), V1ALPHA1)
    assert alpha["spec"]["services"]["VllmDecodeWorker"]["volumeMounts"] == [  # :1012-1021
        {"name": "compilation-cache", "mountPoint": "/home/dynamo/.cache/vllm", "useAsCompilationCache": True}]
    assert structural_findings(alpha) == []


def test_gpu_memory_service_and_failover_come_back_enabled_with_v1alpha1_mode_spelling():
    manifest = doc("deploy__operator__samples__dgd-gms-failover")
    alpha = render(import_manifest(copy.deepcopy(manifest)), V1ALPHA1)
    service = alpha["spec"]["services"]["agg"]
    experimental = manifest["spec"]["components"][0]["experimental"]
    # shared_spec_conversion.go:1260-1296 (enabled), :1150-1170 with common.go's constants.
    assert service["failover"] == {"enabled": True, "mode": "interPod",
                                   "numShadows": experimental["failover"]["numShadows"]}
    assert service["gpuMemoryService"]["enabled"] is True and service["gpuMemoryService"]["mode"] == "interPod"
    assert structural_findings(alpha) == []


def test_a_component_type_outside_the_v1beta1_enum_is_refused_naming_the_field():
    manifest = doc("components__src__dynamo__planner__tests__manual__perf_test_configs__agg_8b")
    spec = import_manifest(copy.deepcopy(manifest))
    assert [path for path, _why in conversion_losses(spec, V1BETA1)] == ["spec.services.Frontend.componentType"]


def test_the_graph_topology_constraint_is_respelled_both_ways():
    # dynamographdeployment_conversion.go:632-648: topologyProfile <-> clusterTopologyName.
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    manifest["spec"]["topologyConstraint"] = {"topologyProfile": "gb200", "packDomain": "rack"}
    beta = render(import_manifest(copy.deepcopy(manifest)), V1BETA1)
    assert beta["spec"]["topologyConstraint"] == {"clusterTopologyName": "gb200", "packDomain": "rack"}
    assert render(import_manifest(copy.deepcopy(beta)), V1ALPHA1) == manifest


def test_alpha_only_service_fields_travel_in_the_payload_and_come_back():
    # saveSharedAlphaOnlySpec (shared_spec_conversion.go:316-390) keeps what v1beta1 cannot hold.
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    extra = {"dynamoNamespace": "legacy", "annotations": {"team": "inference"}, "ingress": {"enabled": False},
             "livenessProbe": {"httpGet": {"path": "/health", "port": 9090}}}
    manifest["spec"]["services"]["decode"].update(copy.deepcopy(extra))
    spec = import_manifest(copy.deepcopy(manifest))
    assert conversion_losses(spec, V1BETA1) == []
    beta = render(spec, V1BETA1)
    decode = next(c for c in beta["spec"]["components"] if c["name"] == "decode")
    assert decode["podTemplate"]["spec"]["containers"][0]["livenessProbe"] == extra["livenessProbe"]
    saved = json.loads(beta["metadata"]["annotations"][PAYLOAD])["spec"]["services"]["decode"]
    assert {k: saved[k] for k in ("dynamoNamespace", "annotations", "ingress")} == {
        k: extra[k] for k in ("dynamoNamespace", "annotations", "ingress")}
    assert render(import_manifest(copy.deepcopy(beta)), V1ALPHA1) == manifest


def test_a_secret_written_in_main_container_env_from_stays_in_that_list():
    # saveSharedMainContainerOrigins keeps mainContainer.envFrom (shared_spec_conversion.go:457-462),
    # and without a saved envFromSecret the way back leaves the list as it is (:2339-2341).
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    service = manifest["spec"]["services"]["decode"]
    secret = service.pop("envFromSecret", None) or "hf-token-secret"
    service["extraPodSpec"]["mainContainer"]["envFrom"] = [{"secretRef": {"name": secret}}]
    beta = render(import_manifest(copy.deepcopy(manifest)), V1BETA1)
    decode = next(c for c in beta["spec"]["components"] if c["name"] == "decode")
    assert decode["podTemplate"]["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": secret}}]
    back = render(import_manifest(copy.deepcopy(beta)), V1ALPHA1)
    assert "envFromSecret" not in back["spec"]["services"]["decode"]
    assert back == manifest


def test_an_env_from_secret_still_comes_back_as_env_from_secret():
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    manifest["spec"]["services"]["decode"]["envFromSecret"] = "hf-token-secret"
    beta = render(import_manifest(copy.deepcopy(manifest)), V1BETA1)
    assert render(import_manifest(copy.deepcopy(beta)), V1ALPHA1) == manifest


def test_an_empty_extra_pod_spec_travels_in_the_payload():
    # extraPodSpecNeedsPreservation (shared_spec_conversion.go:2232-2234): a pod that holds nothing
    # makes no podTemplate, so the payload keeps it (:366-370) and the way back restores it (:267-271).
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    manifest["spec"]["services"]["decode"] = {"componentType": "worker", "extraPodSpec": {}}
    beta = render(import_manifest(copy.deepcopy(manifest)), V1BETA1)
    assert json.loads(beta["metadata"]["annotations"][PAYLOAD])["spec"]["services"]["decode"] == {"extraPodSpec": {}}
    assert render(import_manifest(copy.deepcopy(beta)), V1ALPHA1) == manifest


def test_the_gpu_count_goes_under_gpu_type():
    # resourcesToNative (shared_spec_conversion.go:2489-2545) names the GPU resource by gpuType.
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    manifest["spec"]["services"]["decode"]["resources"] = {"limits": {"gpu": "8", "gpuType": "amd.com/gpu"}}
    beta = render(import_manifest(copy.deepcopy(manifest)), V1BETA1)
    decode = next(c for c in beta["spec"]["components"] if c["name"] == "decode")
    assert decode["podTemplate"]["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "8"}
    assert render(import_manifest(copy.deepcopy(beta)), V1ALPHA1) == manifest


def test_a_pod_template_of_empty_metadata_and_a_compilation_cache_comes_back():
    manifest = doc("examples__deployments__EKS__manifests__vllm__disagg")
    component = manifest["spec"]["components"][0]
    component["podTemplate"] = {"metadata": {"labels": {}}}
    component["compilationCache"] = {"pvcName": "compilation-cache", "mountPath": "/cache"}
    alpha = render(import_manifest(copy.deepcopy(manifest)), V1ALPHA1)
    assert render(import_manifest(copy.deepcopy(alpha)), V1BETA1) == manifest


@pytest.mark.parametrize(("field", "value", "path"), [
    # v1beta1/common.go:136-140: modelRef.name has MinLength=1; v1alpha1 accepts "".
    ("modelRef", {"name": ""}, "spec.services.decode.modelRef.name"),
    # v1beta1/common.go:340-347: numShadows has Maximum=1; v1alpha1 only a Minimum.
    ("failover", {"enabled": True, "mode": "interPod", "numShadows": 2}, "spec.services.decode.failover.numShadows"),
])
def test_a_value_the_v1beta1_schema_refuses_is_named_not_converted(field, value, path):
    manifest = doc("recipes__deepseek-r1__sglang__disagg-16gpu__deploy")
    manifest["spec"]["services"]["decode"][field] = value
    assert structural_findings(manifest) == []
    assert path in [p for p, _why in conversion_losses(import_manifest(manifest), V1BETA1)]
