"""The operational checks against upstream Dynamo's own manifests (ai-dynamo/dynamo 2a6da14c,
tests/fixtures/upstream-2a6da14c/, verbatim). Each rule is held to what upstream's code does:
the operator's /dev/shm and GPU handling, the engines' role flags and their environment
variables, the Global Planner's pool graphs, and the release each fact arrived in. A finding
that fires on a manifest upstream ships must be one upstream's code proves."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import pytest
import yaml

from core.checks import operational_findings
from core.dgd.commandline import UNKNOWN_ROLE, declared_role, tokens, translate_role_flag
from core.dgd.parse import import_manifest
from core.dgd.pod_checks import expected_shm_bytes, gpu_count
from core.dgd.render import V1BETA1, render
from core.facts import DynamoVersion
from core.findings import Severity
from core.validation import validate_manifest

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "upstream-2a6da14c"
ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def _prune(value):
    """What the API server stores: keys whose value is null are dropped."""
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def dgd(name: str, index: int = 0) -> dict:
    """Document ``index`` of an upstream file (counting every document, as the file holds them)."""
    with (CORPUS / name).open() as fh:
        doc = _prune(list(yaml.safe_load_all(fh))[index])
    assert doc.get("kind") == "DynamoGraphDeployment", (name, index)
    return doc


def findings(manifest: dict, version: str | None = None, code: str | None = None) -> list:
    out = validate_manifest(manifest, dynamo_version=version).findings
    return [f for f in out if code is None or f.code == code]


def component(manifest: dict, name: str) -> dict:
    spec = manifest["spec"]
    if "components" in spec:
        return next(c for c in spec["components"] if c["name"] == name)
    return spec["services"][name]


def main_container(manifest: dict, name: str) -> dict:
    comp = component(manifest, name)
    if "podTemplate" in comp:
        return next(c for c in comp["podTemplate"]["spec"]["containers"] if c["name"] == "main")
    return comp["extraPodSpec"]["mainContainer"]


# ------------------------------------------------------------------- the corpus as a whole

# Codes whose every firing on the corpus was read against upstream's code (docs/upstream-findings.md).
PROVEN = {"kv_transfer_config_missing", "decode_role_missing", "shm_mount_replaced", "v1beta1_unserved"}
# Structural codes come from the CRD schema (core/schema.py), judged separately.
STRUCTURAL = ("schema_", "invalid_value_error")
# The operator's admission webhook rules are core/dgd/webhook's, checked by tests/core/test_webhook_rules.py.
WEBHOOK = ("webhook_",)


def _corpus_counts() -> Counter:
    counts: Counter = Counter()
    for path in sorted(CORPUS.rglob("*.yaml")):
        try:
            docs = [_prune(d) for d in yaml.safe_load_all(path.read_text())]
        except yaml.YAMLError:
            continue  # the ${VAR} templates, which are not YAML until rendered
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "DynamoGraphDeployment":
                for f in validate_manifest(doc).findings:
                    counts[(f.code, f.severity)] += 1
    return counts


@pytest.fixture(scope="module")
def corpus_counts() -> Counter:
    assert CORPUS.is_dir(), CORPUS
    return _corpus_counts()


def test_upstreams_manifests_draw_only_errors_and_warnings_that_upstreams_code_proves(corpus_counts):
    loud = {code for (code, severity) in corpus_counts if severity in (ERROR, WARNING)
            and not code.startswith(STRUCTURAL + WEBHOOK)}
    assert loud <= PROVEN, sorted(loud - PROVEN)


@pytest.mark.parametrize("code", ["shm_unset", "shm_emptydir_workaround", "shm_manual_mount", "no_gpu",
                                  "prefill_role_missing", "flag_too_new", "prefill_without_decode",
                                  "decode_without_prefill", "no_frontend"])
def test_the_false_alarm_classes_are_gone_from_the_corpus(corpus_counts, code):
    assert not [key for key in corpus_counts if key[0] == code]


# -------------------------------------------------------------------------------- /dev/shm


def test_an_unset_shared_memory_size_is_the_operators_8gi_and_draws_nothing():
    # deploy/operator/internal/dynamo/shared_memory.go:28 + consts.go:205@2a6da14c.
    manifest = dgd("examples__backends__vllm__deploy__disagg.yaml")
    assert all("sharedMemorySize" not in c for c in manifest["spec"]["components"])
    assert not [f for f in findings(manifest) if f.code.startswith("shm_")]
    spec = import_manifest(manifest)
    assert expected_shm_bytes(spec.service("VllmPrefillWorker"), spec.version) == 8 * 2**30


def test_before_0_5_0_an_unset_size_is_a_warning_because_the_operator_sized_it_from_the_memory_limit():
    manifest = dgd("recipes__qwen3-32b__vllm__disagg-kv-router__deploy.yaml")  # v1alpha1, no sharedMemory
    old = findings(manifest, version="0.4.1", code="shm_unset")
    assert {f.severity for f in old} == {WARNING}
    assert {f.path for f in old} >= {"spec.services.VllmPrefillWorker.sharedMemory.size"}
    assert findings(manifest, version="0.5.1", code="shm_unset") == []
    spec = import_manifest(manifest, dynamo_version="0.4.1")
    assert expected_shm_bytes(spec.service("VllmPrefillWorker"), spec.version) is None


def test_a_volume_of_ones_own_at_dev_shm_is_replaced_by_the_operators_8gi_so_200gi_is_lost():
    # shared_memory.go:59-73@2a6da14c drops the container's own /dev/shm mount (and a volume named
    # shared-memory) and mounts the operator's sized volume instead.
    manifest = dgd("recipes__deepseek-v4__deepseek-v4-flash__vllm__disagg-b200-agentic__deploy.yaml")
    mounts = findings(manifest, code="shm_mount_replaced")
    prefill = next(f for f in mounts if "components[1]" in f.path)
    assert prefill.severity == WARNING
    assert prefill.path == "spec.components[1].podTemplate.spec.containers[main].volumeMounts[0]"
    assert "8Gi" in prefill.message and "200Gi" in prefill.message
    assert prefill.fix.startswith("set sharedMemorySize: 200Gi")


def test_a_volume_as_large_as_the_operators_is_only_a_note():
    manifest = dgd("recipes__nemotron-3.5-lightning__vllm__agg-h200-mtp__deploy.yaml", 1)
    [note] = findings(manifest, code="shm_mount_replaced")
    assert note.severity == INFO and "unused" in note.message


def test_shared_memory_size_0_keeps_ones_own_dev_shm_volume():
    # shared_memory.go:30-31,55-57@2a6da14c: size 0 mounts nothing and leaves the user's mount alone.
    manifest = dgd("recipes__deepseek-v4__deepseek-v4-flash__vllm__disagg-b200-agentic__deploy.yaml")
    for name in ("VllmPrefillWorker", "VllmDecodeWorker"):
        component(manifest, name)["sharedMemorySize"] = "0"
    assert not [f for f in findings(manifest) if f.code.startswith("shm_")]


def test_before_1_1_0_a_dev_shm_mount_beside_the_operators_is_refused_by_kubernetes():
    manifest = dgd("recipes__qwen3-32b__vllm__cloud-providers__deploy-nebius-ib.yaml")  # v1alpha1, 64Gi dshm
    old = findings(manifest, version="1.0.2", code="shm_mount_conflict")
    assert old and {f.severity for f in old} == {ERROR}
    assert findings(manifest, version="1.1.1", code="shm_mount_conflict") == []


def test_a_memory_emptydir_for_something_other_than_dev_shm_draws_nothing():
    manifest = dgd("recipes__nemotron-3-ultra__vllm__agg-b200-agentic-mtp__deploy.yaml")
    volumes = [v for c in manifest["spec"]["components"] for v in
               (c.get("podTemplate", {}).get("spec", {}).get("volumes") or [])]
    assert any((v.get("emptyDir") or {}).get("medium") == "Memory" for v in volumes)
    assert not [f for f in findings(manifest) if f.code.startswith("shm_")]


# ------------------------------------------------------------------------------ role flags


@pytest.mark.parametrize(("name", "index", "component_name"), [
    ("recipes__kimi-k3__vllm__disagg-gb200-agentic__deploy.yaml", 2, "Prefill"),  # /bin/bash -lc
    ("recipes__qwen3-32b__vllm__cloud-providers__deploy-aks-ib.yaml", 0, "PrefillWorker"),  # /bin/sh -lc
    ("derived/aiconfigurator-0.12.0/aic-sglang-disagg.yaml", 0, "SGLangPrefillWorker"),  # bash array
    ("derived/aiconfigurator-0.12.0/aic-trtllm-disagg.yaml", 0, "TRTLLMPrefillWorker"),  # args+=(...)
])
def test_the_prefill_flag_is_read_inside_shell_scripts_and_bash_arrays(name, index, component_name):
    manifest = dgd(name, index)
    container = main_container(manifest, component_name)
    assert declared_role(container.get("command"), container.get("args")) == "prefill"
    assert findings(manifest, code="prefill_role_missing") == []


def test_the_role_environment_variable_counts_like_the_flag():
    # components/src/dynamo/vllm/backend_args.py:80-89@2a6da14c: env_var DYN_VLLM_DISAGGREGATION_MODE.
    manifest = dgd("examples__backends__vllm__deploy__disagg.yaml")
    container = main_container(manifest, "VllmPrefillWorker")
    container["args"] = [a for a in container["args"] if a not in ("--disaggregation-mode", "prefill")]
    assert [f.path for f in findings(manifest, code="prefill_role_missing")] == [
        "spec.components[2].podTemplate.spec.containers[main].args"]
    container.setdefault("env", []).append({"name": "DYN_VLLM_DISAGGREGATION_MODE", "value": "prefill"})
    assert findings(manifest, code="prefill_role_missing") == []


def test_a_role_in_a_shell_variable_resolves_from_the_containers_env_or_stays_unknown():
    assert declared_role(["/bin/sh", "-c"], ["python3 -m dynamo.vllm --disaggregation-mode $ROLE"],
                         [{"name": "ROLE", "value": "decode"}]) == "decode"
    assert declared_role(["/bin/sh", "-c"], ["python3 -m dynamo.vllm --disaggregation-mode ${ROLE}"]) == UNKNOWN_ROLE


def test_an_sglang_config_file_may_hold_the_role():
    manifest = dgd("recipes__glm-5.2__sglang__disagg-b200-agentic__deploy.yaml", 1)
    container = main_container(manifest, "prefill")
    assert "--config" in tokens(container["command"], container["args"])
    assert findings(manifest, code="prefill_role_missing") == []


def test_disaggregation_mode_on_1_3_is_not_too_new():
    # --disaggregation-mode arrived in dynamo.vllm 1.0.0 (#6483); this recipe runs the 1.3.0 image.
    manifest = dgd("recipes__llama-3-70b__vllm__disagg-single-node__deploy.yaml")
    assert import_manifest(manifest).dynamo_version == "1.3.0"
    assert findings(manifest, code="flag_too_new") == []
    assert [f.severity for f in findings(manifest, version="0.9.1", code="flag_too_new")] == [ERROR]


def test_rendering_a_disaggregated_graph_for_1_3_keeps_both_role_flags():
    spec = import_manifest(dgd("recipes__qwen3-32b__vllm__disagg-kv-router__deploy.yaml"))
    manifest = render(spec, V1BETA1, "1.3.1")
    argv = {c["name"]: tokens(main_container(manifest, c["name"]).get("command"),
                              main_container(manifest, c["name"]).get("args"))
            for c in manifest["spec"]["components"] if c.get("type") in ("prefill", "decode")}
    assert len(argv) == 2
    assert all("--disaggregation-mode" in words for words in argv.values())
    _, args = translate_role_flag(["python3", "-m", "dynamo.vllm"], ["--model", "M"], role="decode",
                                        engine="vllm", version=DynamoVersion.parse("1.3.1"),
                                        source_version=DynamoVersion.parse("0.9.1"))
    assert args == ["--model", "M", "--disaggregation-mode", "decode"]


def test_a_vllm_prefill_worker_without_kv_transfer_config_is_an_error_from_1_0():
    # components/src/dynamo/vllm/args.py:230-246@2a6da14c raises ValueError at start.
    manifest = dgd("examples__deployments__GKE__vllm__disagg.yaml")
    [error] = findings(manifest, code="kv_transfer_config_missing")
    assert error.severity == ERROR
    assert error.path == "spec.components[2].podTemplate.spec.containers[main].args"
    assert "--kv-transfer-config" in error.fix
    assert findings(manifest, version="0.9.1", code="kv_transfer_config_missing") == []


def test_the_prefill_workers_that_pass_a_connector_draw_no_kv_error():
    manifest = dgd("examples__backends__vllm__deploy__disagg.yaml")
    assert findings(manifest, code="kv_transfer_config_missing") == []


# ------------------------------------------------------------------------------------ GPUs


def test_dra_resource_claims_count_as_gpus_the_operator_resolves():
    # deploy/operator/internal/dra/dra.go:116-170@2a6da14c resolves claims from the template.
    manifest = dgd("examples__backends__vllm__deploy__xpu__agg_xpu_dra.yaml", 1)
    assert findings(manifest, code="no_gpu") == []
    main_container(manifest, "VllmDecodeWorker")["resources"].pop("claims")
    assert [f.severity for f in findings(manifest, code="no_gpu")] == [ERROR]


def test_an_engine_sidecar_holding_the_gpu_is_not_a_gpu_less_worker():
    manifest = dgd("lib__sidecar__vllm__deploy__disagg.yaml")
    assert findings(manifest, code="no_gpu") == []


def test_v1alpha1_main_container_gpu_limits_count():
    manifest = dgd("derived/benchmarks__frontend__dgd__templates__vllm.yaml--rendered.yaml")
    spec = import_manifest(manifest)
    assert gpu_count(spec.service("VllmWorker"), alpha=True) == 1
    assert findings(manifest, code="no_gpu") == []


def test_a_worker_without_a_command_is_not_judged_as_dynamo_vllm():
    manifest = dgd("deploy__operator__internal__controller__testdata__dgd__components__input.yaml")
    assert findings(manifest, code="no_gpu") == []


# -------------------------------------------------------------------------------- topology


@pytest.mark.parametrize("index", [4, 5, 6])
def test_global_planner_pool_graphs_are_legitimate_single_pool_graphs(index):
    # A pool DGD's Planner runs with environment "global-planner" and mode prefill|decode
    # (components/src/dynamo/planner/config/planner_config.py:387-395@2a6da14c).
    manifest = dgd("examples__global_planner__global-planner-vllm-test.yaml", index)
    codes = {f.code for f in findings(manifest)}
    assert not codes & {"prefill_without_decode", "decode_without_prefill", "no_frontend"}


def test_a_prefill_only_graph_without_a_global_planner_is_still_an_error():
    manifest = dgd("examples__global_planner__global-planner-vllm-test.yaml", 4)
    manifest["spec"]["components"] = [c for c in manifest["spec"]["components"] if c.get("type") != "planner"]
    assert [f.severity for f in findings(manifest, code="prefill_without_decode")] == [ERROR]


def test_a_frontend_sidecar_serves_the_api():
    manifest = dgd("examples__backends__vllm__deploy__gaie__agg.yaml")
    assert findings(manifest, code="no_frontend") == []
    component(manifest, "VllmDecodeWorker").pop("frontendSidecar")
    component(manifest, "VllmDecodeWorker")["podTemplate"]["spec"]["containers"] = [
        main_container(manifest, "VllmDecodeWorker")]
    assert [f.severity for f in findings(manifest, code="no_frontend")] == [WARNING]


def test_aggregated_workers_typed_decode_for_the_planner_are_not_a_broken_disaggregation():
    # The Planner's agg mode scales the decode-typed component
    # (components/src/dynamo/planner/monitoring/dgd_services.py:296-331@2a6da14c).
    manifest = dgd("recipes__qwen3-32b__vllm__agg-round-robin__deploy.yaml")
    codes = {f.code for f in findings(manifest)}
    assert not codes & {"decode_without_prefill", "decode_role_missing"}
    decode = copy.deepcopy(manifest)
    container = main_container(decode, "VllmDecodeWorker")
    if container.get("command", [])[-1:] == ["-c"] or "-c" in "".join(container.get("command", [])):
        container["args"] = [container["args"][0] + " --disaggregation-mode decode"]
    else:
        container["args"] = [*container.get("args", []), "--disaggregation-mode", "decode"]
    assert [f.severity for f in findings(decode, code="decode_without_prefill")] == [ERROR]


# ------------------------------------------------------------------------- API versions


def test_v1beta1_is_served_from_1_2_0():
    manifest = dgd("examples__backends__vllm__deploy__disagg.yaml")
    assert findings(manifest, version="1.2.1", code="v1beta1_unserved") == []
    assert [f.severity for f in findings(manifest, version="1.1.1", code="v1beta1_unserved")] == [ERROR]


def test_v1alpha1_is_a_deprecation_note_not_a_warning():
    manifest = dgd("recipes__qwen3-32b-fp8__vllm__disagg__deploy.yaml")
    [note] = findings(manifest, version="1.6.1", code="v1alpha1_deprecated")
    assert note.severity == INFO and "1.2.0" in note.message and "1.5.0" in note.message
    assert findings(manifest, version="1.1.1", code="v1alpha1_deprecated") == []


def test_operational_findings_on_upstream_manifests_keep_the_manifests_own_api_version_in_paths():
    alpha = dgd("recipes__qwen3-32b__vllm__cloud-providers__deploy-nebius-ib.yaml")
    assert all(f.path.startswith(("spec.services", "apiVersion")) for f in operational_findings(alpha))


def test_a_pod_grace_period_shorter_than_the_workers_shutdown_budget_is_named_before_a_rollout():
    # component_common.go:82@2a6da14c gives every pod terminationGracePeriodSeconds 60; the runtime
    # waits DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT (30 in release builds, config.rs:36-60) for its
    # in-flight requests on SIGTERM. Upstream's recipes keep 60 > 30: nothing to say.
    name = "recipes__deepseek-v4__deepseek-v4-flash__vllm__disagg-b200-agentic__deploy.yaml"
    assert not findings(dgd(name), code="drain_cut")
    manifest = dgd(name)
    component(manifest, "VllmDecodeWorker")["podTemplate"]["spec"]["terminationGracePeriodSeconds"] = 20
    [cut] = findings(manifest, code="drain_cut")
    assert cut.severity == WARNING and cut.path.endswith("podTemplate.spec.terminationGracePeriodSeconds")
    assert "killed 20 s after SIGTERM" in cut.message
    # a vLLM worker first waits its grace period (graceful_shutdown.py:15-18@2a6da14c), then 30 s
    assert "5 s (DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS) and then up to 30 s" in cut.message
    assert "above 35" in cut.fix
    # 33 s covers the 30 s wait but not the 5 s before it
    manifest = dgd(name)
    component(manifest, "VllmDecodeWorker")["podTemplate"]["spec"]["terminationGracePeriodSeconds"] = 33
    assert [c.path for c in findings(manifest, code="drain_cut")] == [cut.path]
    main_container(manifest, "VllmDecodeWorker").setdefault("env", []).append(
        {"name": "DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS", "value": "0"})
    assert not findings(manifest, code="drain_cut")
    # a longer shutdown budget than the operator's default grace period is cut too
    manifest = dgd(name)
    main_container(manifest, "VllmPrefillWorker").setdefault("env", []).append(
        {"name": "DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT", "value": "300"})
    [cut] = findings(manifest, code="drain_cut")
    assert "killed 60 s after SIGTERM (terminationGracePeriodSeconds (the operator's default, 60))" in cut.message
    assert "and then up to 300 s" in cut.message
