"""Validation: every operational check fires on a minimal manifest with exactly that problem
(right code, severity and path), clean templates produce no errors, the seed targeted at a
new release is refused with flag_removed, and structural errors name their path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from core.catalog import TEMPLATES, build_spec
from core.checks import operational_findings
from core.dgd.render import V1ALPHA1, V1BETA1, render
from core.findings import Severity
from core.schema import structural_findings
from core.validation import validate_manifest, validate_spec

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference"
MODEL = "Qwen/Qwen3-0.6B"
ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def image(version: str) -> str:
    return f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{version}"


KV = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def role_args(role: str, version: str) -> list[str]:
    """The role flags of ``version`` (--disaggregation-mode from 1.0.0, ai-dynamo/dynamo#6483), with
    the KV connector a prefill worker needs from 1.0.0 (#6450)."""
    if role not in ("prefill", "decode"):
        return []
    if version >= "1.0":  # the releases used here compare correctly as strings
        return ["--disaggregation-mode", role, *(["--kv-transfer-config", KV] if role == "prefill" else [])]
    return ["--is-prefill-worker"] if role == "prefill" else []


# ------------------------------------------------------------------ minimal v1beta1 graphs


def beta_frontend(version: str = "1.6.1") -> dict:
    return {"name": "Frontend", "type": "frontend", "replicas": 1, "podTemplate": {"spec": {"containers": [
        {"name": "main", "image": image(version), "command": ["python3"], "args": ["-m", "dynamo.frontend"]}]}}}


def beta_worker(name: str, role: str, version: str = "1.6.1") -> dict:
    return {
        "name": name, "type": role, "replicas": 1, "sharedMemorySize": "16Gi",
        "podTemplate": {"spec": {"containers": [{
            "name": "main", "image": image(version), "workingDir": "/workspace/examples/backends/vllm",
            "command": ["python3", "-m", "dynamo.vllm"], "args": ["--model", MODEL, *role_args(role, version)],
            "envFrom": [{"secretRef": {"name": "hf-token-secret"}}],
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }]}},
    }


def beta(name: str = "g", version: str = "1.6.1", *, disagg: bool = True) -> dict:
    """Frontend (components[0]), prefill ([1]) and decode ([2]); or Frontend and worker."""
    workers = [beta_worker("prefill", "prefill", version), beta_worker("decode", "decode", version)] if disagg \
        else [beta_worker("worker", "worker", version)]
    return {"apiVersion": V1BETA1, "kind": "DynamoGraphDeployment", "metadata": {"name": name},
            "spec": {"components": [beta_frontend(version), *workers]}}


def comp(manifest: dict, name: str) -> dict:
    return next(c for c in manifest["spec"]["components"] if c["name"] == name)


def main(manifest: dict, name: str) -> dict:
    return comp(manifest, name)["podTemplate"]["spec"]["containers"][0]


# ------------------------------------------------------------------ minimal v1alpha1 graphs


def alpha(name: str = "g", version: str = "0.5.1") -> dict:
    """The seed manifest's shape: Frontend, prefill and decode services."""
    def worker(role):
        return {"componentType": "worker", "subComponentType": role, "replicas": 1, "envFromSecret": "hf-token-secret",
                "resources": {"limits": {"gpu": "1"}}, "sharedMemory": {"size": "16Gi"},
                "extraPodSpec": {"mainContainer": {
                    "image": image(version), "workingDir": "/workspace/components/backends/vllm"
                    if version < "1" else "/workspace/examples/backends/vllm",
                    "command": ["python3", "-m", "dynamo.vllm"],
                    "args": ["--model", MODEL, *role_args(role, version)]}}}
    return {"apiVersion": V1ALPHA1, "kind": "DynamoGraphDeployment", "metadata": {"name": name}, "spec": {"services": {
        "Frontend": {"componentType": "frontend", "replicas": 1, "extraPodSpec": {"mainContainer": {
            "image": image(version), "command": ["python3"], "args": ["-m", "dynamo.frontend"]}}},
        "prefill": worker("prefill"),
        "decode": worker("decode"),
    }}}


def svc(manifest: dict, name: str) -> dict:
    return manifest["spec"]["services"][name]


def problems(manifest: dict, dynamo_version: str | None = None) -> list:
    """Every finding except the note every v1alpha1 manifest gets."""
    report = validate_manifest(manifest, dynamo_version=dynamo_version)
    return [f for f in report.findings if f.code != "v1alpha1_deprecated"]


# ------------------------------------------------------------------------ the clean bases


@pytest.mark.parametrize("disagg", [True, False], ids=["disagg", "agg"])
def test_the_minimal_v1beta1_graph_has_no_findings_at_all(disagg):
    assert validate_manifest(beta(disagg=disagg)).findings == []


def test_the_minimal_v1alpha1_graph_on_0_5_1_has_no_findings_v1alpha1_is_all_it_serves():
    assert validate_manifest(alpha()).findings == []


# ------------------------------------------------------------ one problem, one finding

CDIR = "podTemplate.spec.containers[main]"


def _without(name):
    def mutate(m):
        m["spec"]["components"] = [c for c in m["spec"]["components"] if c["name"] != name]
    return mutate


BETA_CASES = [
    # id, mutation of beta(), code, severity, path
    ("shm_too_small", lambda m: comp(m, "prefill").update(sharedMemorySize="512Mi"),
     "shm_too_small", ERROR, "spec.components[1].sharedMemorySize"),
    ("shm_disabled", lambda m: comp(m, "decode").update(sharedMemorySize="0"),
     "shm_disabled", ERROR, "spec.components[2].sharedMemorySize"),
    # The operator drops a container's own /dev/shm mount for its own (shared_memory.go:67-73).
    ("shm_mount_replaced",
     lambda m: (comp(m, "decode")["podTemplate"]["spec"].update(
         volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]),
                main(m, "decode").update(volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}])),
     "shm_mount_replaced", WARNING, f"spec.components[2].{CDIR}.volumeMounts[0]"),
    ("shm_mount_replaced_same_size",
     lambda m: (comp(m, "decode")["podTemplate"]["spec"].update(volumes=[{"name": "dshm", "emptyDir": {}}]),
                main(m, "decode").update(volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}])),
     "shm_mount_replaced", INFO, f"spec.components[2].{CDIR}.volumeMounts[0]"),
    ("prefill_role_missing", lambda m: main(m, "prefill").update(args=["--model", MODEL, "--kv-transfer-config", KV]),
     "prefill_role_missing", ERROR, f"spec.components[1].{CDIR}.args"),
    ("decode_role_wrong",
     lambda m: main(m, "decode").update(args=["--model", MODEL, "--disaggregation-mode", "prefill",
                                              "--kv-transfer-config", KV]),
     "decode_role_wrong", ERROR, f"spec.components[2].{CDIR}.args"),
    ("decode_role_missing", lambda m: main(m, "decode").update(args=["--model", MODEL]),
     "decode_role_missing", WARNING, f"spec.components[2].{CDIR}.args"),
    ("flag_removed", lambda m: main(m, "prefill").update(
        args=["--model", MODEL, "--is-prefill-worker", "--kv-transfer-config", KV]),
     "flag_removed", ERROR, f"spec.components[1].{CDIR}.args"),
    ("no_gpu", lambda m: main(m, "prefill").pop("resources"),
     "no_gpu", ERROR, f"spec.components[1].{CDIR}.resources.limits.nvidia.com/gpu"),
    ("no_gpu_zero", lambda m: main(m, "decode")["resources"]["limits"].update({"nvidia.com/gpu": "0"}),
     "no_gpu", ERROR, f"spec.components[2].{CDIR}.resources.limits.nvidia.com/gpu"),
    ("hf_token_missing", lambda m: main(m, "prefill").pop("envFrom"),
     "hf_token_missing", INFO, f"spec.components[1].{CDIR}.envFrom"),
    ("kv_transfer_config_missing", lambda m: main(m, "prefill").update(
        args=["--model", MODEL, "--disaggregation-mode", "prefill"]),
     "kv_transfer_config_missing", ERROR, f"spec.components[1].{CDIR}.args"),
    ("image_version_mismatch", lambda m: main(m, "prefill").update(image=image("1.5.1")),
     "image_version_mismatch", WARNING, f"spec.components[1].{CDIR}.image"),
    ("workdir_moved", lambda m: main(m, "decode").update(workingDir="/workspace/components/backends/vllm"),
     "workdir_moved", INFO, f"spec.components[2].{CDIR}.workingDir"),
    ("replicas_zero", lambda m: comp(m, "decode").update(replicas=0),
     "replicas_zero", WARNING, "spec.components[2].replicas"),
    ("replicas_zero_frontend", lambda m: comp(m, "Frontend").update(replicas=0),
     "replicas_zero", WARNING, "spec.components[0].replicas"),
    ("prefill_without_decode", _without("decode"), "prefill_without_decode", ERROR, "spec.components"),
    ("decode_without_prefill", _without("prefill"), "decode_without_prefill", ERROR, "spec.components"),
    ("no_frontend", _without("Frontend"), "no_frontend", WARNING, "spec.components"),
    ("planner_managed", lambda m: m["spec"]["components"].append(
        {"name": "Planner", "type": "planner", "podTemplate": {"spec": {"containers": [
            {"name": "main", "image": image("1.6.1"), "command": ["python3", "-m", "dynamo.planner"]}]}}}),
     "planner_managed", INFO, "spec.components"),
    # 55 + len("-frontend") = 64 > 63; "-prefill" and "-decode" still fit.
    ("child_name_too_long", lambda m: m["metadata"].update(name="g" * 55),
     "child_name_too_long", ERROR, "spec.components[0].name"),
]


@pytest.mark.parametrize(("mutate", "code", "severity", "path"), [c[1:] for c in BETA_CASES],
                         ids=[c[0] for c in BETA_CASES])
def test_each_check_fires_alone_on_a_v1beta1_graph_with_exactly_that_problem(mutate, code, severity, path):
    manifest = beta()
    mutate(manifest)
    assert structural_findings(manifest) == []
    findings = validate_manifest(manifest).findings
    assert [(f.code, f.severity, f.path) for f in findings] == [(code, severity, path)]
    assert findings[0].message
    assert findings[0].fix


def test_shm_disabled_on_an_aggregated_worker_is_only_a_warning():
    manifest = beta(disagg=False)
    comp(manifest, "worker")["sharedMemorySize"] = "0"
    findings = validate_manifest(manifest).findings
    assert [(f.code, f.severity, f.path) for f in findings] == [
        ("shm_disabled", WARNING, "spec.components[1].sharedMemorySize")]


def test_v1beta1_is_refused_for_a_release_whose_operator_serves_only_v1alpha1():
    manifest = beta(version="1.1.1")
    findings = validate_manifest(manifest).findings
    assert [(f.code, f.severity, f.path) for f in findings] == [("v1beta1_unserved", ERROR, "apiVersion")]


def test_v1beta1_unserved_also_fires_when_the_target_release_is_given_explicitly():
    codes = {f.code for f in validate_manifest(beta(), dynamo_version="1.1.1").findings}
    assert "v1beta1_unserved" in codes


ALPHA_CASES = [
    ("shm_disabled", lambda m: svc(m, "decode").update(sharedMemory={"disabled": True}),
     "shm_disabled", ERROR, "spec.services.decode.sharedMemory.size"),
    ("shm_too_small", lambda m: svc(m, "decode").update(sharedMemory={"size": "64Mi"}),
     "shm_too_small", ERROR, "spec.services.decode.sharedMemory.size"),
    ("no_gpu", lambda m: svc(m, "prefill").pop("resources"),
     "no_gpu", ERROR, "spec.services.prefill.resources.limits.gpu"),
    ("hf_token_missing", lambda m: svc(m, "decode").pop("envFromSecret"),
     "hf_token_missing", INFO, "spec.services.decode.envFromSecret"),
    ("prefill_role_missing",
     lambda m: svc(m, "prefill")["extraPodSpec"]["mainContainer"].update(args=["--model", MODEL]),
     "prefill_role_missing", ERROR, "spec.services.prefill.extraPodSpec.mainContainer.args"),
    ("flag_too_new", lambda m: svc(m, "decode")["extraPodSpec"]["mainContainer"].update(
        args=["--model", MODEL, "--disaggregation-mode", "decode"]),
     "flag_too_new", ERROR, "spec.services.decode.extraPodSpec.mainContainer.args"),
    ("replicas_zero", lambda m: svc(m, "prefill").update(replicas=0),
     "replicas_zero", WARNING, "spec.services.prefill.replicas"),
    # The graph's release is read from the first image (Frontend's); the decode image differs from it.
    ("image_version_mismatch", lambda m: svc(m, "decode")["extraPodSpec"]["mainContainer"].update(
        image=image("0.4.0")),
     "image_version_mismatch", WARNING, "spec.services.decode.extraPodSpec.mainContainer.image"),
    ("dynamo_namespace_ignored", lambda m: svc(m, "Frontend").update(dynamoNamespace="g"),
     "dynamo_namespace_ignored", INFO, "spec.services.Frontend.dynamoNamespace"),
    ("autoscaling_ignored", lambda m: svc(m, "decode").update(
        autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 4}),
     "autoscaling_ignored", WARNING, "spec.services.decode.autoscaling"),
    ("prefill_without_decode", lambda m: m["spec"]["services"].pop("decode"),
     "prefill_without_decode", ERROR, "spec.services"),
    ("no_frontend", lambda m: m["spec"]["services"].pop("Frontend"), "no_frontend", WARNING, "spec.services"),
    ("child_name_too_long", lambda m: m["metadata"].update(name="g" * 55),
     "child_name_too_long", ERROR, "spec.services.Frontend"),
]


@pytest.mark.parametrize(("mutate", "code", "severity", "path"), [c[1:] for c in ALPHA_CASES],
                         ids=[c[0] for c in ALPHA_CASES])
def test_each_check_fires_alone_on_a_v1alpha1_graph_with_exactly_that_problem(mutate, code, severity, path):
    manifest = alpha()
    mutate(manifest)
    assert structural_findings(manifest) == []
    findings = problems(manifest)
    assert [(f.code, f.severity, f.path) for f in findings] == [(code, severity, path)]


@pytest.mark.parametrize(("version", "expected"), [("0.5.1", []), ("1.1.1", []),
                                                   ("1.2.1", [("v1alpha1_deprecated", INFO, "apiVersion")]),
                                                   ("1.6.1", [("v1alpha1_deprecated", INFO, "apiVersion")])])
def test_v1alpha1_is_a_deprecation_note_from_1_2_where_v1beta1_is_served(version, expected):
    # deploy/operator/api/v1alpha1/dynamographdeployment_types.go:346@2a6da14c (#8647, Dynamo 1.2.0).
    findings = validate_manifest(alpha(version=version)).findings
    assert [(f.code, f.severity, f.path) for f in findings] == expected


def test_a_check_reads_the_shell_form_command_line_too():
    manifest = alpha()
    container = svc(manifest, "prefill")["extraPodSpec"]["mainContainer"]
    container["command"] = ["/bin/sh", "-c"]
    container["args"] = [f"python3 -m dynamo.vllm --model {MODEL}"]
    assert [(f.code, f.path) for f in problems(manifest)] == [
        ("prefill_role_missing", "spec.services.prefill.extraPodSpec.mainContainer.args")]


def test_a_model_from_a_local_path_needs_no_token():
    manifest = beta()
    for name in ("prefill", "decode"):
        main(manifest, name).pop("envFrom")
        main(manifest, name)["args"][1] = "/models/qwen3"
    assert validate_manifest(manifest).findings == []


def test_an_hf_token_in_the_environment_counts_as_a_token():
    manifest = beta()
    main(manifest, "prefill").pop("envFrom")
    main(manifest, "prefill")["env"] = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}]
    assert validate_manifest(manifest).findings == []


def test_absurd_replicas_fire_the_replicas_absurd_check_at_the_replicas_field():
    manifest = beta()
    comp(manifest, "decode")["replicas"] = 100000
    findings = validate_manifest(manifest).findings
    assert [(f.code, f.severity, f.path) for f in findings] == [
        ("replicas_absurd", ERROR, "spec.components[2].replicas")]


def test_absurd_replicas_are_an_error_that_names_the_limit():
    manifest = beta()
    comp(manifest, "decode")["replicas"] = 100000
    report = validate_manifest(manifest)
    assert not report.ok
    assert any("512" in f.message and "replicas" in f.path for f in report.findings)


# ------------------------------------------------------------------- the clean templates


@pytest.mark.parametrize("api_version", [V1BETA1, V1ALPHA1])
@pytest.mark.parametrize("template", list(TEMPLATES))
def test_every_catalog_template_on_1_6_1_has_no_errors(template, api_version):
    spec = build_spec(template=template, name=template, dynamo_version="1.6.1")
    report = validate_spec(spec, api_version=api_version)
    assert report.ok, report.findings
    assert validate_manifest(render(spec, api_version)).ok


def test_the_vllm_template_on_0_5_1_has_no_errors_as_v1alpha1_and_is_refused_as_v1beta1():
    spec = build_spec(template="vllm-disagg", name="old", dynamo_version="0.5.1")
    assert validate_spec(spec, api_version=V1ALPHA1).ok
    beta_report = validate_spec(spec, api_version=V1BETA1)
    assert [f.code for f in beta_report.findings if f.severity == ERROR] == ["v1beta1_unserved"]


@pytest.mark.parametrize("path", sorted((REFERENCE / "dgd-templates-1.6.1").glob("*.yaml")), ids=lambda p: p.stem)
def test_the_upstream_1_6_1_templates_have_no_findings(path):
    # They set no sharedMemorySize: the operator's 8Gi default applies (shared_memory.go:28@2a6da14c).
    report = validate_manifest(yaml.safe_load(path.read_text()))
    assert report.findings == []


def test_the_seed_on_its_own_release_has_no_errors_or_warnings():
    report = validate_manifest(yaml.safe_load((REFERENCE / "seed-disagg.yaml").read_text()))
    assert report.ok
    assert report.counts() == {"error": 0, "warning": 0, "info": 3}  # dynamoNamespace, ignored
    assert report.spec is not None and report.spec.dynamo_version == "0.5.1"


# --------------------------------------------------------------- the seed on Dynamo 1.6.1


def test_the_seed_targeted_at_1_6_1_yields_flag_removed_the_missing_connector_and_warnings():
    seed = yaml.safe_load((REFERENCE / "seed-disagg.yaml").read_text())
    report = validate_manifest(seed, dynamo_version="1.6.1")
    assert not report.ok
    errors = [f for f in report.findings if f.severity == ERROR]
    # dynamo.vllm 1.6.1 refuses both: the removed flag (#12089) and a prefill worker without
    # --kv-transfer-config (components/src/dynamo/vllm/args.py:230-246@2a6da14c).
    assert [(f.code, f.path) for f in errors] == [
        ("flag_removed", "spec.services.VllmPrefillWorker.extraPodSpec.mainContainer.args"),
        ("kv_transfer_config_missing", "spec.services.VllmPrefillWorker.extraPodSpec.mainContainer.args")]
    assert "--is-prefill-worker" in errors[0].message
    assert "--disaggregation-mode prefill" in errors[0].fix
    assert "--kv-transfer-config" in errors[1].fix
    warnings = {(f.code, f.path) for f in report.findings if f.severity == WARNING}
    assert warnings == {
        ("decode_role_missing", "spec.services.VllmDecodeWorker.extraPodSpec.mainContainer.args"),
        ("image_version_mismatch", "spec.services.Frontend.extraPodSpec.mainContainer.image"),
        ("image_version_mismatch", "spec.services.VllmPrefillWorker.extraPodSpec.mainContainer.image"),
        ("image_version_mismatch", "spec.services.VllmDecodeWorker.extraPodSpec.mainContainer.image"),
    }
    assert {f.code for f in report.findings if f.severity == INFO} == {
        "v1alpha1_deprecated", "dynamo_namespace_ignored", "workdir_moved"}
    assert report.counts() == {"error": 2, "warning": 4, "info": 6}


def test_findings_are_sorted_errors_first():
    seed = yaml.safe_load((REFERENCE / "seed-disagg.yaml").read_text())
    severities = [f.severity for f in validate_manifest(seed, dynamo_version="1.6.1").findings]
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    assert severities == sorted(severities, key=order.__getitem__)


def test_the_seed_rendered_for_1_6_1_is_a_clean_manifest():
    from core.dgd.parse import import_manifest

    spec = import_manifest(yaml.safe_load((REFERENCE / "seed-disagg.yaml").read_text()))
    report = validate_manifest(render(spec, V1BETA1, "1.6.1"))
    assert report.findings == []
    assert report.spec.dynamo_version == "1.6.1"


def test_validating_a_spec_for_another_release_judges_the_manifest_rendered_for_that_release():
    from core.dgd.parse import import_manifest

    spec = import_manifest(yaml.safe_load((REFERENCE / "seed-disagg.yaml").read_text()))
    report = validate_spec(spec, api_version=V1BETA1, dynamo_version="1.6.1")
    # The rendered manifest says --disaggregation-mode prefill and uses 1.6.1 images.
    assert [f.code for f in report.findings] == []


def test_operational_findings_reads_a_manifest_without_the_schema_step():
    manifest = beta()
    comp(manifest, "prefill")["sharedMemorySize"] = "512Mi"
    assert [f.code for f in operational_findings(manifest)] == ["shm_too_small"]


# ---------------------------------------------------------------------- structural errors


def test_an_unknown_field_is_named_by_its_path():
    manifest = beta()
    comp(manifest, "decode")["replicaCount"] = 2
    findings = validate_manifest(manifest).findings
    unknown = [f for f in findings if f.code == "schema_additionalProperties"]
    assert [(f.severity, f.path) for f in unknown] == [(ERROR, "spec.components[2].replicaCount")]
    assert "unknown field spec.components[2].replicaCount" in unknown[0].message


def test_an_unknown_field_inside_a_v1alpha1_service_is_named_by_its_path():
    manifest = alpha()
    svc(manifest, "prefill")["sharedMemory"]["sise"] = "16Gi"
    paths = [f.path for f in structural_findings(manifest)]
    assert paths == ["spec.services.prefill.sharedMemory.sise"]


def test_a_field_of_the_other_api_version_is_an_unknown_field():
    manifest = beta()
    comp(manifest, "decode")["componentType"] = "worker"
    assert [f.path for f in structural_findings(manifest)] == ["spec.components[2].componentType"]


def test_a_wrong_type_is_named_by_its_path_and_the_expected_type():
    manifest = beta()
    comp(manifest, "prefill")["replicas"] = "two"
    findings = [f for f in validate_manifest(manifest).findings if f.code == "schema_type"]
    assert [(f.severity, f.path) for f in findings] == [(ERROR, "spec.components[1].replicas")]
    assert "integer" in findings[0].message and "string" in findings[0].message


def test_negative_replicas_are_named_by_their_path():
    manifest = alpha()
    svc(manifest, "decode")["replicas"] = -1
    report = validate_manifest(manifest)
    assert not report.ok
    minimum = [f for f in report.findings if f.code == "schema_minimum"]
    assert [(f.severity, f.path) for f in minimum] == [(ERROR, "spec.services.decode.replicas")]
    assert "at least 0" in minimum[0].message


def test_a_value_outside_an_enum_lists_the_allowed_values():
    manifest = beta()
    comp(manifest, "decode")["type"] = "decoder"
    findings = structural_findings(manifest)
    assert [(f.code, f.path) for f in findings] == [("schema_enum", "spec.components[2].type")]
    assert "prefill" in findings[0].message


def test_a_missing_component_name_is_required():
    manifest = beta()
    del comp(manifest, "decode")["name"]
    findings = validate_manifest(manifest).findings
    assert any(f.code == "schema_required" and f.path == "spec.components[2]" and "name" in f.message
               for f in findings)


def test_a_bad_shared_memory_quantity_is_a_schema_error_at_its_path():
    manifest = beta()
    comp(manifest, "decode")["sharedMemorySize"] = "lots"
    findings = validate_manifest(manifest).findings
    assert not validate_manifest(manifest).ok
    assert "spec.components[2].sharedMemorySize" in {f.path for f in findings if f.severity == ERROR}


def test_an_unserved_api_version_is_one_finding_at_apiVersion():
    manifest = beta()
    manifest["apiVersion"] = "nvidia.com/v1"
    findings = structural_findings(manifest)
    assert [(f.code, f.path) for f in findings] == [("api_version", "apiVersion")]
    assert "nvidia.com/v1beta1" in findings[0].fix


def test_a_document_that_is_not_a_mapping_is_refused():
    report = validate_manifest(["not", "a", "manifest"])
    assert not report.ok
    assert report.spec is None
    assert {f.code for f in report.findings} == {"not_a_mapping"}


def test_structural_findings_are_capped_at_50():
    manifest = beta()
    for i in range(80):
        comp(manifest, "decode")[f"unknownField{i:02d}"] = i
        manifest["metadata"]["labels"] = {f"k{i}": i for i in range(80)}
    assert len(structural_findings(manifest)) == 50


def test_a_report_as_a_dict_has_valid_counts_and_findings():
    manifest = beta()
    main(manifest, "decode")["workingDir"] = "/workspace/components/backends/vllm"
    data = validate_manifest(copy.deepcopy(manifest)).as_dict()
    assert data["valid"] is True
    assert data["counts"] == {"error": 0, "warning": 0, "info": 1}
    assert data["findings"] == [{"severity": "info", "code": "workdir_moved",
                                 "path": f"spec.components[2].{CDIR}.workingDir",
                                 "message": data["findings"][0]["message"],
                                 "fix": "use /workspace/examples/backends/vllm"}]


def test_spec_level_errors_point_at_the_manifest_field():
    manifest = beta(name="MyGraph")
    paths = {f.path for f in validate_manifest(manifest).findings}
    assert "metadata.name" in paths
