"""Render and import: lossless round trips, the v1beta1 form of the recipe's graph, command-line
translation between Dynamo releases, fields the spec does not model, and golden renders of the
catalog templates.

Golden files live in tests/golden/. Regenerate them with
``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/core/test_manifest.py`` and read the diff."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from core.catalog import TEMPLATES, build_spec
from core.dgd.commandline import tokens, translate_role_flag
from core.dgd.parse import import_manifest
from core.dgd.render import V1ALPHA1, V1BETA1, normalise_api_version, render
from core.facts import DynamoVersion
from core.schema import structural_findings
from core.spec import GraphSpec
from core.specio import dump_yaml

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference"
SEED = REFERENCE / "seed-disagg.yaml"
TEMPLATES_161 = sorted((REFERENCE / "dgd-templates-1.6.1").glob("*.yaml"))
GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
UPDATE_GOLDEN = os.environ.get("UPDATE_GOLDEN") == "1"

OLD = DynamoVersion.parse("0.5.1")
NEW = DynamoVersion.parse("1.6.1")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def seed() -> dict:
    return load(SEED)


def through_json(spec: GraphSpec) -> GraphSpec:
    """What a revision stores and reads back."""
    return GraphSpec.model_validate(spec.model_dump(mode="json"))


def container_of(manifest: dict, service: str) -> dict:
    """The main container of a service, in either API version."""
    if manifest["apiVersion"] == V1ALPHA1:
        return manifest["spec"]["services"][service]["extraPodSpec"]["mainContainer"]
    component = next(c for c in manifest["spec"]["components"] if c["name"] == service)
    return next(c for c in component["podTemplate"]["spec"]["containers"] if c["name"] == "main")


# ----------------------------------------------------------------------------- round trips


def test_import_then_render_gives_back_the_seed_manifest():
    original = seed()
    spec = import_manifest(copy.deepcopy(original))
    assert spec.dynamo_version == "0.5.1"
    assert spec.backend == "vllm"
    assert spec.model == "Qwen/Qwen3-0.6B"
    assert [(s.name, s.role) for s in spec.services] == [
        ("Frontend", "frontend"), ("VllmPrefillWorker", "prefill"), ("VllmDecodeWorker", "decode")]
    assert render(spec, V1ALPHA1) == original


def test_the_seed_survives_storage_as_json_and_renders_the_same():
    original = seed()
    assert render(through_json(import_manifest(original)), V1ALPHA1) == original


def test_import_does_not_modify_the_object_it_reads():
    original = seed()
    untouched = copy.deepcopy(original)
    import_manifest(original)
    assert original == untouched


@pytest.mark.parametrize("path", TEMPLATES_161, ids=lambda p: p.stem)
def test_import_then_render_gives_back_each_1_6_1_template(path):
    original = load(path)
    assert original["apiVersion"] == V1BETA1
    spec = import_manifest(copy.deepcopy(original))
    assert spec.dynamo_version == "1.6.1"
    assert render(spec, V1BETA1) == original
    assert render(through_json(spec), V1BETA1) == original


@pytest.mark.parametrize("path", TEMPLATES_161, ids=lambda p: p.stem)
def test_each_1_6_1_template_is_imported_with_its_backend_and_roles(path):
    spec = import_manifest(load(path))
    backend = path.stem.split("-")[0]
    assert spec.backend == backend
    roles = sorted(s.role for s in spec.services)
    expected = ["frontend", "worker"] if path.stem.endswith("-agg") else ["decode", "frontend", "prefill"]
    assert roles == expected
    assert all(s.hf_token_secret == "hf-token-secret" for s in spec.services if s.is_worker)


@pytest.mark.parametrize("path", TEMPLATES_161, ids=lambda p: p.stem)
def test_a_1_6_1_template_rendered_as_v1alpha1_and_imported_again_renders_the_same_v1beta1(path):
    original = load(path)
    alpha = render(import_manifest(original), V1ALPHA1)
    assert structural_findings(alpha) == []
    assert render(import_manifest(alpha), V1BETA1) == original


def test_the_seed_rendered_as_v1beta1_and_imported_again_renders_the_same_v1alpha1():
    original = seed()
    assert all("dynamoNamespace" in s for s in original["spec"]["services"].values())
    beta = render(import_manifest(original), V1BETA1)
    # dynamoNamespace exists only in v1alpha1: the operator keeps it in its nvidia.com/dgd-spec
    # annotation (deploy/operator/api/v1alpha1/shared_spec_conversion.go@2a6da14c), and so do we.
    assert "nvidia.com/dgd-spec" in beta["metadata"]["annotations"]
    assert render(import_manifest(beta), V1ALPHA1) == original


# ---------------------------------------------------------------------- the recipe's graph


@pytest.mark.parametrize("version", ["0.5.1", "1.6.1"])
def test_the_recipes_graph_rendered_as_v1beta1_passes_the_crd_schema(version):
    manifest = render(import_manifest(seed()), V1BETA1, version)
    assert manifest["apiVersion"] == V1BETA1
    assert [c["name"] for c in manifest["spec"]["components"]] == ["Frontend", "VllmPrefillWorker", "VllmDecodeWorker"]
    assert structural_findings(manifest) == []


def test_the_recipes_graph_as_v1beta1_keeps_types_replicas_shm_gpus_and_the_token_secret():
    manifest = render(import_manifest(seed()), V1BETA1)
    components = {c["name"]: c for c in manifest["spec"]["components"]}
    assert components["Frontend"]["type"] == "frontend"
    assert components["VllmPrefillWorker"]["type"] == "prefill"
    assert components["VllmDecodeWorker"]["type"] == "decode"
    for name in ("VllmPrefillWorker", "VllmDecodeWorker"):
        component = components[name]
        assert component["replicas"] == 2
        assert component["sharedMemorySize"] == "16Gi"
        main = container_of(manifest, name)
        assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert main["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]
        assert main["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.5.1"
    assert "dynamoNamespace" not in components["Frontend"]


def test_the_recipes_graph_for_1_6_1_gets_new_images_workdir_and_role_flags():
    manifest = render(import_manifest(seed()), V1BETA1, "1.6.1")
    prefill = container_of(manifest, "VllmPrefillWorker")
    decode = container_of(manifest, "VllmDecodeWorker")
    assert prefill["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
    assert prefill["workingDir"] == "/workspace/examples/backends/vllm"
    assert prefill["command"] == ["/bin/sh", "-c"]
    # 0.5.1's vLLM used NIXL by default; from 1.0.0 a prefill worker must name its connector
    # (components/src/dynamo/vllm/args.py:230-246@2a6da14c), so the render adds it.
    assert prefill["args"] == ["python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --disaggregation-mode prefill "
                               f"--kv-transfer-config {NIXL_QUOTED}"]
    assert decode["args"] == ["python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --disaggregation-mode decode"]


def test_rendering_the_seed_for_its_own_release_changes_nothing_in_the_command_lines():
    original = seed()
    manifest = render(import_manifest(original), V1ALPHA1, "0.5.1")
    assert manifest == original


# ------------------------------------------------------------------ command-line translation


NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
NIXL_QUOTED = f"'{NIXL}'"


def translate(command, args, role, *, to, source, engine="vllm"):
    return translate_role_flag(command, args, role=role, engine=engine, version=DynamoVersion.parse(to),
                               source_version=DynamoVersion.parse(source))


def test_is_prefill_worker_becomes_disaggregation_mode_prefill_in_the_same_place():
    command, args = translate(["python3", "-m", "dynamo.vllm"],
                              ["--model", "Qwen/Qwen3-0.6B", "--is-prefill-worker", "--tensor-parallel-size", "2"],
                              "prefill", to="1.6.1", source="0.5.1")
    assert command == ["python3", "-m", "dynamo.vllm"]
    assert args == ["--model", "Qwen/Qwen3-0.6B", "--disaggregation-mode", "prefill", "--tensor-parallel-size", "2",
                    "--kv-transfer-config", NIXL]


def test_disaggregation_mode_prefill_becomes_is_prefill_worker_in_the_same_place():
    _, args = translate(["python3", "-m", "dynamo.vllm"],
                        ["--model", "M", "--disaggregation-mode", "prefill", "--block-size", "16"],
                              "prefill", to="0.5.1", source="1.6.1")
    assert args == ["--model", "M", "--is-prefill-worker", "--block-size", "16"]


def test_disaggregation_mode_with_an_equals_sign_is_translated_too():
    _, args = translate(["python3", "-m", "dynamo.vllm"], ["--disaggregation-mode=prefill", "--model", "M"],
                        "prefill", to="0.5.1", source="1.6.1")
    assert args == ["--is-prefill-worker", "--model", "M"]


def test_disaggregation_mode_decode_is_dropped_for_an_old_release_because_no_flag_means_decode():
    _, args = translate(["python3", "-m", "dynamo.vllm"], ["--model", "M", "--disaggregation-mode", "decode", "--x"],
                        "decode", to="0.5.1", source="1.6.1")
    assert args == ["--model", "M", "--x"]


def test_the_decode_flag_is_added_when_a_graph_moves_from_an_old_release_to_a_new_one():
    _, args = translate(["python3", "-m", "dynamo.vllm"], ["--model", "M"], "decode", to="1.6.1", source="0.5.1")
    assert args == ["--model", "M", "--disaggregation-mode", "decode"]


@pytest.mark.parametrize("target", ["1.0.2", "1.3.1"])
def test_the_decode_flag_is_added_for_every_release_that_has_disaggregation_mode(target):
    # --disaggregation-mode exists since 1.0.0 (ai-dynamo/dynamo#6483); without it a 1.x worker runs
    # aggregated (components/src/dynamo/vllm/backend_args.py:646-647@2a6da14c).
    _, args = translate(["python3", "-m", "dynamo.vllm"], ["--model", "M"], "decode", to=target, source="0.5.1")
    assert args == ["--model", "M", "--disaggregation-mode", "decode"]


@pytest.mark.parametrize(("source", "target"), [("1.6.1", "1.6.1"), ("1.4.2", "1.6.1"), ("0.5.1", "0.5.1"),
                                                ("1.0.2", "1.3.1")])
def test_the_decode_flag_is_not_added_unless_moving_from_an_old_release_to_a_new_one(source, target):
    _, args = translate(["python3", "-m", "dynamo.vllm"], ["--model", "M"], "decode", to=target, source=source)
    assert args == ["--model", "M"]


def test_the_decode_flag_is_not_added_to_a_prefill_worker_or_an_aggregated_worker():
    _, args = translate(["python3", "-m", "dynamo.vllm"], ["--model", "M", "--is-prefill-worker"], "prefill",
                        to="1.6.1", source="0.5.1")
    assert args.count("--disaggregation-mode") == 1
    assert args[-4:] == ["--disaggregation-mode", "prefill", "--kv-transfer-config", NIXL]
    _, args = translate(["python3", "-m", "dynamo.vllm"], ["--model", "M"], "worker", to="1.6.1", source="0.5.1")
    assert args == ["--model", "M"]


def test_a_decode_worker_without_a_flag_rendered_from_0_5_1_to_1_6_1_gets_it_in_the_manifest():
    manifest = render(import_manifest(seed()), V1ALPHA1, "1.6.1")
    decode = container_of(manifest, "VllmDecodeWorker")
    assert decode["args"] == ["python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --disaggregation-mode decode"]


def test_the_shell_form_keeps_sh_c_and_one_script_string():
    command, args = translate(["/bin/sh", "-c"], ["python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --is-prefill-worker"],
                              "prefill", to="1.6.1", source="0.5.1")
    assert command == ["/bin/sh", "-c"]
    assert args == [f"python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --disaggregation-mode prefill "
                    f"--kv-transfer-config {NIXL_QUOTED}"]


def test_the_shell_form_with_the_script_inside_command_is_rewritten_in_place():
    command, args = translate(["sh", "-c", "python3 -m dynamo.vllm --model M --is-prefill-worker"], None,
                              "prefill", to="1.6.1", source="0.5.1")
    assert command == ["sh", "-c", f"python3 -m dynamo.vllm --model M --disaggregation-mode prefill "
                                   f"--kv-transfer-config {NIXL_QUOTED}"]
    assert args is None


def test_a_shell_script_with_a_quoted_json_argument_stays_one_string_and_keeps_the_json():
    script = ("python3 -m dynamo.vllm --model M --is-prefill-worker "
              "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\"}'")
    command, args = translate(["/bin/sh", "-c"], [script], "prefill", to="1.6.1", source="0.5.1")
    assert command == ["/bin/sh", "-c"]
    assert len(args) == 1
    assert tokens(command, args) == ["python3", "-m", "dynamo.vllm", "--model", "M", "--disaggregation-mode", "prefill",
                                     "--kv-transfer-config", '{"kv_connector":"NixlConnector"}']


def test_a_shell_script_with_operators_and_variables_still_runs_the_same_after_translation():
    script = "cd /workspace && exec python3 -m dynamo.vllm --model $MODEL --is-prefill-worker"
    _, args = translate(["/bin/sh", "-c"], [script], "prefill", to="1.6.1", source="0.5.1")
    assert args == ["cd /workspace && exec python3 -m dynamo.vllm --model $MODEL --disaggregation-mode prefill "
                    f"--kv-transfer-config {NIXL_QUOTED}"]


def test_a_command_line_already_right_for_the_release_is_returned_unchanged():
    for command, args, role, version in [
        (["/bin/sh", "-c"], ["python3   -m dynamo.vllm  --model M"], "decode", "0.5.1"),
        (["/bin/sh", "-c"], ["python3 -m dynamo.vllm --model M --disaggregation-mode prefill"], "prefill", "1.6.1"),
        (["python3", "-m", "dynamo.vllm"], ["--model", "M", "--disaggregation-mode", "decode"], "decode", "1.6.1"),
    ]:
        assert translate(command, args, role, to=version, source=version) == (command, args)


def test_the_module_in_args_exec_form_keeps_every_token_position():
    _, args = translate(["python3"], ["-m", "dynamo.vllm", "--is-prefill-worker", "--model", "M"], "prefill",
                        to="1.6.1", source="0.5.1")
    assert args == ["-m", "dynamo.vllm", "--disaggregation-mode", "prefill", "--model", "M",
                    "--kv-transfer-config", NIXL]


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_sglang_and_trtllm_command_lines_are_never_rewritten(engine):
    args = ["--model-path", "M", "--disaggregation-mode", "prefill"]
    assert translate(["python3", "-m", f"dynamo.{engine}"], args, "prefill", to="0.5.1", source="1.6.1",
                     engine=engine) == (["python3", "-m", f"dynamo.{engine}"], args)


def test_the_frontend_command_is_never_rewritten():
    _, args = translate(["python3"], ["-m", "dynamo.frontend", "--is-prefill-worker"], "frontend",
                        to="1.6.1", source="0.5.1")
    assert args == ["-m", "dynamo.frontend", "--is-prefill-worker"]


def test_the_mocker_follows_the_vllm_flag_change():
    _, args = translate(["python3", "-m", "dynamo.mocker"], ["--model-path", "M", "--disaggregation-mode", "prefill"],
                        "prefill", to="0.5.1", source="1.6.1", engine="mocker")
    assert args == ["--model-path", "M", "--is-prefill-worker"]


def test_translation_does_not_modify_the_lists_it_was_given():
    command, args = ["python3", "-m", "dynamo.vllm"], ["--is-prefill-worker"]
    translate(command, args, "prefill", to="1.6.1", source="0.5.1")
    assert args == ["--is-prefill-worker"]


# ------------------------------------------------------------------------ unmodeled fields


def alpha_with_unmodeled_fields() -> dict:
    obj = seed()
    obj["metadata"]["annotations"] = {"team.example.com/owner": "inference", "note": "keep me"}
    obj["metadata"]["labels"] = {"app": "vllm-disagg"}
    obj["spec"]["backendFramework"] = "vllm"
    obj["spec"]["envs"] = [{"name": "DYN_LOG", "value": "debug"}]
    obj["spec"]["pvcs"] = [{"name": "model-cache", "create": False}]
    prefill = obj["spec"]["services"]["VllmPrefillWorker"]
    prefill["multinode"] = {"nodeCount": 2}
    prefill["envs"] = [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}]
    prefill["extraPodMetadata"] = {"annotations": {"prometheus.io/scrape": "true"}, "labels": {"tier": "prefill"}}
    prefill["resources"]["requests"] = {"cpu": "4", "memory": "32Gi"}
    pod = prefill["extraPodSpec"]
    pod["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pod["priorityClassName"] = "inference-high"
    pod["mainContainer"]["volumeMounts"] = [{"name": "model-cache", "mountPath": "/root/.cache"}]
    pod["mainContainer"]["ports"] = [{"containerPort": 9090, "name": "metrics"}]
    pod["volumes"] = [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
    obj["spec"]["services"]["Frontend"]["scalingAdapter"] = {"enabled": False}
    return obj


def beta_with_unmodeled_fields() -> dict:
    obj = load(REFERENCE / "dgd-templates-1.6.1" / "vllm-disagg.yaml")
    obj["metadata"]["namespace"] = "inference"
    obj["metadata"]["annotations"] = {"team.example.com/owner": "inference"}
    obj["metadata"]["labels"] = {"app": "vllm-disagg"}
    obj["spec"]["env"] = [{"name": "DYN_LOG", "value": "debug"}]
    decode = obj["spec"]["components"][1]
    decode["multinode"] = {"nodeCount": 2}
    decode["scalingAdapter"] = {}
    decode["podTemplate"]["metadata"] = {"annotations": {"prometheus.io/scrape": "true"}}
    pod = decode["podTemplate"]["spec"]
    pod["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pod["containers"].append({"name": "log-shipper", "image": "fluent/fluent-bit:3.0",
                              "args": ["--config", "/etc/fluent/fluent.conf"]})
    main = pod["containers"][0]
    main["env"] = [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}]
    main["envFrom"].append({"configMapRef": {"name": "vllm-tuning"}})
    main["volumeMounts"] = [{"name": "cache", "mountPath": "/root/.cache"}]
    pod["volumes"] = [{"name": "cache", "emptyDir": {}}]
    return obj


def test_the_unmodeled_fields_fixtures_are_valid_manifests():
    assert structural_findings(alpha_with_unmodeled_fields()) == []
    assert structural_findings(beta_with_unmodeled_fields()) == []


def test_unmodeled_fields_survive_import_and_render_in_v1alpha1():
    original = alpha_with_unmodeled_fields()
    spec = through_json(import_manifest(copy.deepcopy(original)))
    assert render(spec, V1ALPHA1) == original


def test_unmodeled_fields_survive_import_and_render_in_v1beta1():
    original = beta_with_unmodeled_fields()
    spec = through_json(import_manifest(copy.deepcopy(original)))
    assert render(spec, V1BETA1) == original


def test_an_extra_container_stays_beside_the_main_container():
    manifest = render(import_manifest(beta_with_unmodeled_fields()), V1BETA1)
    containers = manifest["spec"]["components"][1]["podTemplate"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "log-shipper"]
    assert containers[1]["image"] == "fluent/fluent-bit:3.0"


def test_fields_both_versions_know_follow_the_graph_into_the_other_api_version():
    beta = render(import_manifest(alpha_with_unmodeled_fields()), V1BETA1)
    assert structural_findings(beta) == []
    annotations = dict(beta["metadata"]["annotations"])
    assert "nvidia.com/dgd-spec" in annotations  # v1alpha1-only fields, kept as the operator keeps them
    annotations.pop("nvidia.com/dgd-spec")
    assert annotations == {"team.example.com/owner": "inference", "note": "keep me"}
    prefill = next(c for c in beta["spec"]["components"] if c["name"] == "VllmPrefillWorker")
    assert prefill["multinode"] == {"nodeCount": 2}
    assert prefill["podTemplate"]["metadata"]["labels"] == {"tier": "prefill"}
    assert prefill["podTemplate"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert prefill["podTemplate"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert beta["spec"]["env"] == [{"name": "DYN_LOG", "value": "debug"}]
    assert "pvcs" not in beta["spec"]  # v1alpha1 only

    alpha = render(import_manifest(beta_with_unmodeled_fields()), V1ALPHA1)
    assert structural_findings(alpha) == []
    decode = alpha["spec"]["services"]["decode"]
    assert decode["multinode"] == {"nodeCount": 2}
    assert decode["extraPodSpec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert decode["scalingAdapter"] == {"enabled": True}
    assert decode["resources"]["limits"]["gpu"] == "1"


def test_a_sidecar_listed_before_the_main_container_keeps_its_position():
    original = load(REFERENCE / "dgd-templates-1.6.1" / "vllm-disagg.yaml")
    original["spec"]["components"][1]["podTemplate"]["spec"]["containers"].insert(
        0, {"name": "proxy", "image": "envoyproxy/envoy:v1.30.0"})
    assert render(import_manifest(copy.deepcopy(original)), V1BETA1) == original


def test_a_component_without_a_container_named_main_gets_no_empty_container_added():
    original = load(REFERENCE / "dgd-templates-1.6.1" / "vllm-disagg.yaml")
    original["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]["name"] = "frontend"
    assert structural_findings(original) == []
    assert render(import_manifest(copy.deepcopy(original)), V1BETA1) == original


def test_integer_quantities_keep_their_type_through_a_round_trip():
    original = load(REFERENCE / "dgd-templates-1.6.1" / "vllm-disagg.yaml")
    original["spec"]["components"][1]["sharedMemorySize"] = 17179869184
    original["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] = 1
    assert structural_findings(original) == []
    assert render(import_manifest(copy.deepcopy(original)), V1BETA1) == original


# ------------------------------------------------------------------------- api versions


@pytest.mark.parametrize(("given", "expected"), [
    (None, V1BETA1), ("", V1BETA1), ("v1beta1", V1BETA1), ("nvidia.com/v1beta1", V1BETA1),
    ("v1alpha1", V1ALPHA1), (" NVIDIA.COM/V1ALPHA1 ", V1ALPHA1),
])
def test_api_versions_are_accepted_in_short_and_long_form(given, expected):
    assert normalise_api_version(given) == expected


@pytest.mark.parametrize("given", ["v1", "nvidia.com/v2", "apps/v1", "example.com/v1beta1"])
def test_unknown_api_versions_are_refused(given):
    with pytest.raises(ValueError, match="unknown apiVersion"):
        normalise_api_version(given)


# ------------------------------------------------------------------------------ golden files

GOLDEN_CASES = [(key, "1.6.1") for key in TEMPLATES] + [("vllm-disagg", "0.5.1")]


def golden_render(template: str, version: str, api_version: str) -> dict:
    spec = build_spec(template=template, name=template, dynamo_version=version)
    return render(spec, api_version)


def golden_path(template: str, version: str, api_version: str) -> Path:
    return GOLDEN_DIR / f"{template}-{version}-{api_version.split('/')[-1]}.yaml"


@pytest.mark.parametrize("api_version", [V1BETA1, V1ALPHA1], ids=["v1beta1", "v1alpha1"])
@pytest.mark.parametrize(("template", "version"), GOLDEN_CASES, ids=[f"{t}-{v}" for t, v in GOLDEN_CASES])
def test_each_template_renders_as_its_golden_file(template, version, api_version):
    text = dump_yaml(golden_render(template, version, api_version))
    path = golden_path(template, version, api_version)
    if UPDATE_GOLDEN:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} is missing: run with UPDATE_GOLDEN=1 to create it"
    assert path.read_text() == text, f"{path.name} differs from the render: review, then rerun with UPDATE_GOLDEN=1"


@pytest.mark.parametrize("api_version", [V1BETA1, V1ALPHA1], ids=["v1beta1", "v1alpha1"])
@pytest.mark.parametrize(("template", "version"), GOLDEN_CASES, ids=[f"{t}-{v}" for t, v in GOLDEN_CASES])
def test_each_golden_file_is_a_valid_manifest_that_imports_back_to_the_same_render(template, version, api_version):
    obj = load(golden_path(template, version, api_version))
    assert obj["apiVersion"] == api_version
    assert obj["metadata"]["name"] == template
    assert structural_findings(obj) == []
    spec = import_manifest(obj)
    assert spec.dynamo_version == version
    assert spec.backend == TEMPLATES[template].backend
    assert render(spec, api_version) == obj


def golden_container(template: str, version: str, api_version: str, service: str) -> dict:
    return container_of(load(golden_path(template, version, api_version)), service)


@pytest.mark.parametrize("api_version", [V1BETA1, V1ALPHA1])
def test_the_0_5_1_vllm_golden_prefill_ends_with_is_prefill_worker_and_decode_has_no_flag(api_version):
    prefill = golden_container("vllm-disagg", "0.5.1", api_version, "prefill")
    decode = golden_container("vllm-disagg", "0.5.1", api_version, "decode")
    assert prefill["command"] == ["python3", "-m", "dynamo.vllm"]
    assert prefill["args"] == ["--model", "Qwen/Qwen3-0.6B", "--is-prefill-worker"]
    assert decode["args"] == ["--model", "Qwen/Qwen3-0.6B"]
    assert prefill["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.5.1"
    assert prefill["workingDir"] == "/workspace/components/backends/vllm"


@pytest.mark.parametrize("api_version", [V1BETA1, V1ALPHA1])
def test_the_1_6_1_vllm_golden_uses_disaggregation_mode_for_both_roles(api_version):
    prefill = golden_container("vllm-disagg", "1.6.1", api_version, "prefill")
    decode = golden_container("vllm-disagg", "1.6.1", api_version, "decode")
    # As the 1.6.1 template: dynamo.vllm refuses a prefill worker without an explicit KV connector.
    assert prefill["args"] == ["--model", "Qwen/Qwen3-0.6B", "--disaggregation-mode", "prefill",
                               "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}']
    assert decode["args"] == ["--model", "Qwen/Qwen3-0.6B", "--disaggregation-mode", "decode"]
    assert prefill["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
    assert prefill["workingDir"] == "/workspace/examples/backends/vllm"


def test_the_golden_v1alpha1_workers_use_the_v1alpha1_spelling_of_roles_gpus_shm_and_secret():
    obj = load(golden_path("vllm-disagg", "1.6.1", V1ALPHA1))
    prefill = obj["spec"]["services"]["prefill"]
    assert prefill["componentType"] == "worker"
    assert prefill["subComponentType"] == "prefill"
    assert prefill["resources"] == {"limits": {"gpu": "1"}}
    assert prefill["sharedMemory"] == {"size": "16Gi"}
    assert prefill["envFromSecret"] == "hf-token-secret"
    assert obj["spec"]["services"]["Frontend"]["componentType"] == "frontend"


def test_the_golden_v1beta1_workers_use_the_v1beta1_spelling_of_roles_gpus_shm_and_secret():
    obj = load(golden_path("vllm-disagg", "1.6.1", V1BETA1))
    prefill = next(c for c in obj["spec"]["components"] if c["name"] == "prefill")
    assert prefill["type"] == "prefill"
    assert prefill["sharedMemorySize"] == "16Gi"
    main = prefill["podTemplate"]["spec"]["containers"][0]
    assert main["name"] == "main"
    assert main["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert main["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]


def test_the_golden_mocker_asks_for_no_gpu_and_aggregated_vllm_has_one_worker_pool():
    mocker = load(golden_path("mocker-disagg", "1.6.1", V1BETA1))
    assert len(mocker["spec"]["components"]) == 3  # frontend, prefill, decode
    for component in mocker["spec"]["components"]:
        assert "resources" not in component["podTemplate"]["spec"]["containers"][0]
    assert golden_container("mocker-disagg", "1.6.1", V1BETA1, "prefill")["args"][-2:] == [
        "--disaggregation-mode", "prefill"]
    agg = load(golden_path("vllm-agg", "1.6.1", V1BETA1))
    assert [(c["name"], c["type"]) for c in agg["spec"]["components"]] == [("Frontend", "frontend"),
                                                                          ("worker", "worker")]
    assert golden_container("vllm-agg", "1.6.1", V1BETA1, "worker")["args"] == ["--model", "Qwen/Qwen3-0.6B"]


@pytest.mark.parametrize("template", ["sglang-disagg", "trtllm-disagg"])
def test_the_golden_sglang_and_trtllm_workers_use_their_engines_flags(template):
    prefill = golden_container(template, "1.6.1", V1BETA1, "prefill")
    module = "dynamo." + TEMPLATES[template].backend
    assert prefill["command"] == ["python3", "-m", module]
    assert prefill["args"] == ["--model-path", "Qwen/Qwen3-0.6B", "--served-model-name", "Qwen/Qwen3-0.6B",
                               "--disaggregation-mode", "prefill"]
