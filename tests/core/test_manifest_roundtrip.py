"""Import is lossless: for any manifest the CRD accepts, import then render in the same API
version gives the same object back, also after the spec is stored as JSON.

Three kinds of evidence, none of them golden files: a property test that generates
DynamoGraphDeployments from the real CRD schema (tests/dgd_strategies.py), a corpus of
manifests written the way operators write them (tests/fixtures/operator-manifests/), and one
test per rule, written from the CRD or from how Kubernetes and Dynamo read the field.

The property test is deterministic (derandomized, a fixed number of examples) so that CI
sees the same inputs on every run; ``FUZZ_RANDOM=1`` explores new ones and
``ROUNDTRIP_EXAMPLES`` sets how many."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from core.checks import operational_findings
from core.dgd.parse import import_manifest
from core.dgd.render import V1ALPHA1, V1BETA1, conversion_losses, render
from core.schema import structural_findings
from core.spec import GraphSpec
from core.specio import dump_yaml, load_yaml
from tests.dgd_strategies import manifests

CORPUS = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "operator-manifests").glob("*.yaml"))

PROPERTY = settings(
    max_examples=int(os.environ.get("ROUNDTRIP_EXAMPLES", "120")),
    derandomize=os.environ.get("FUZZ_RANDOM") != "1",
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def stored(spec: GraphSpec) -> GraphSpec:
    """What a revision keeps in PostgreSQL (JSON) and reads back."""
    return GraphSpec.model_validate_json(spec.model_dump_json())


def round_trip(manifest: dict) -> dict:
    before = copy.deepcopy(manifest)
    spec = import_manifest(manifest)
    assert manifest == before, "import modified the object it read"
    return render(stored(spec), manifest["apiVersion"])


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


# ------------------------------------------------------------------------ property


@pytest.mark.parametrize("api_version", [V1ALPHA1, V1BETA1])
def test_any_manifest_the_crd_accepts_comes_back_equal_after_import_and_render(api_version):
    @PROPERTY
    @given(manifests(api_version))
    def check(manifest):
        # The generator's own promise first: the CRD accepts what it makes.
        assert structural_findings(manifest) == []
        assert round_trip(manifest) == manifest
        # As users paste it: YAML text in, YAML text out (the export), the same object.
        text = dump_yaml(manifest)
        assert load_yaml(dump_yaml(round_trip(load_yaml(text, max_bytes=1 << 20))), max_bytes=1 << 20) == manifest

    check()


# -------------------------------------------------------------------------- corpus


def test_the_corpus_holds_manifests_of_both_api_versions():
    versions = {load(path)["apiVersion"] for path in CORPUS}
    assert versions == {V1ALPHA1, V1BETA1}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_each_operator_manifest_is_valid_and_comes_back_equal(path):
    manifest = load(path)
    assert structural_findings(manifest) == []
    assert round_trip(manifest) == manifest


# ---------------------------------------------------------------------------- rules


def beta_corpus() -> dict:
    return load(next(p for p in CORPUS if p.stem == "beta-qwen-disagg-kv"))


def alpha_corpus() -> dict:
    return load(next(p for p in CORPUS if p.stem == "alpha-llama70b-disagg"))


def main_of(manifest: dict, name: str) -> dict:
    component = next(c for c in manifest["spec"]["components"] if c["name"] == name)
    return next(c for c in component["podTemplate"]["spec"]["containers"] if c["name"] == "main")


def test_a_configmap_listed_before_the_token_secret_stays_before_it():
    # Kubernetes applies envFrom sources in order and a later source wins for a key both
    # define: moving the Secret to the front would let the ConfigMap override the token.
    manifest = beta_corpus()
    spec = import_manifest(copy.deepcopy(manifest))
    assert spec.service("prefill").hf_token_secret == "hf-token-secret"
    env_from = main_of(render(spec, V1BETA1), "prefill")["envFrom"]
    assert env_from == [{"configMapRef": {"name": "vllm-tuning"}}, {"secretRef": {"name": "hf-token-secret"}}]


def test_changing_the_token_secret_keeps_its_place_in_env_from():
    spec = import_manifest(beta_corpus())
    spec.service("prefill").hf_token_secret = "other-token"
    env_from = main_of(render(spec, V1BETA1), "prefill")["envFrom"]
    assert env_from == [{"configMapRef": {"name": "vllm-tuning"}}, {"secretRef": {"name": "other-token"}}]


def test_the_v1alpha1_main_container_keeps_its_name_and_v1beta1_calls_it_main():
    # v1alpha1 lets extraPodSpec.mainContainer carry any name; v1beta1 finds the main
    # container by the name "main" (CEL rule on podTemplate.spec.containers).
    spec = import_manifest(alpha_corpus())
    alpha = render(spec, V1ALPHA1)
    assert alpha["spec"]["services"]["VllmPrefillWorker"]["extraPodSpec"]["mainContainer"]["name"] == "vllm-prefill"
    beta = render(spec, V1BETA1)
    assert structural_findings(beta) == []
    names = [c["name"] for c in next(c for c in beta["spec"]["components"]
                                     if c["name"] == "VllmPrefillWorker")["podTemplate"]["spec"]["containers"]]
    assert names == ["main"]


def test_sidecars_in_a_v1alpha1_extra_pod_spec_are_kept():
    # extraPodSpec is a whole PodSpec: its containers list runs beside mainContainer.
    manifest = alpha_corpus()
    pod = manifest["spec"]["services"]["Frontend"]["extraPodSpec"]
    pod["containers"] = [{"name": "envoy", "image": "envoyproxy/envoy:v1.30.0"}]
    assert structural_findings(manifest) == []
    out = render(import_manifest(copy.deepcopy(manifest)), V1ALPHA1)
    assert out["spec"]["services"]["Frontend"]["extraPodSpec"]["containers"] == pod["containers"]


def test_a_gpu_count_keeps_its_spelling_until_it_is_edited():
    manifest = alpha_corpus()
    manifest["spec"]["services"]["VllmDecodeWorker"]["resources"]["limits"]["gpu"] = "04"
    spec = import_manifest(copy.deepcopy(manifest))
    assert spec.service("VllmDecodeWorker").gpus == 4
    assert render(spec, V1ALPHA1)["spec"]["services"]["VllmDecodeWorker"]["resources"]["limits"]["gpu"] == "04"
    spec.service("VllmDecodeWorker").gpus = 2  # an explicit edit writes the canonical form
    assert render(spec, V1ALPHA1)["spec"]["services"]["VllmDecodeWorker"]["resources"]["limits"]["gpu"] == "2"


def test_disabled_shared_memory_with_a_size_stays_disabled_with_its_size():
    # CEL: sharedMemory is valid when disabled, whatever size it also names; the operator
    # then mounts no /dev/shm volume.
    manifest = alpha_corpus()
    manifest["spec"]["services"]["VllmDecodeWorker"]["sharedMemory"] = {"disabled": True, "size": "32Gi"}
    spec = import_manifest(copy.deepcopy(manifest))
    assert spec.service("VllmDecodeWorker").shared_memory == "0"
    assert render(spec, V1ALPHA1) == manifest


def test_enabling_shared_memory_again_drops_disabled_and_sets_the_size():
    manifest = alpha_corpus()
    manifest["spec"]["services"]["VllmDecodeWorker"]["sharedMemory"] = {"disabled": True, "size": "32Gi"}
    spec = import_manifest(manifest)
    spec.service("VllmDecodeWorker").shared_memory = "8Gi"
    shm = render(spec, V1ALPHA1)["spec"]["services"]["VllmDecodeWorker"]["sharedMemory"]
    assert shm == {"size": "8Gi"}


def test_a_prefill_component_type_keeps_its_sub_component_type():
    # Newer operators accept componentType prefill directly; a subComponentType beside it
    # is still the user's field.
    manifest = alpha_corpus()
    service = manifest["spec"]["services"]["VllmPrefillWorker"]
    service["componentType"] = "prefill"
    assert render(import_manifest(copy.deepcopy(manifest)), V1ALPHA1) == manifest


def test_a_command_line_is_not_rewritten_when_the_release_stays_the_same():
    # A 1.6.1 image with the pre-1.4 flag is the user's mistake to fix: import keeps it, and
    # the validator names it (dynamo.vllm 1.6.1 no longer accepts --is-prefill-worker).
    manifest = beta_corpus()
    args = main_of(manifest, "prefill")["args"]
    args[args.index("--disaggregation-mode"):args.index("--disaggregation-mode") + 2] = ["--is-prefill-worker"]
    spec = import_manifest(copy.deepcopy(manifest))
    assert render(spec, V1BETA1) == manifest
    removed = [f for f in operational_findings(manifest, spec=spec) if f.code == "flag_removed"]
    assert [f.path for f in removed] == ["spec.components[1].podTemplate.spec.containers[main].args"], removed


def test_empty_lists_and_maps_the_manifest_wrote_stay_empty():
    manifest = load(next(p for p in CORPUS if p.stem == "beta-sglang-multinode"))
    manifest["spec"]["env"] = []
    main = main_of(manifest, "worker")
    main["envFrom"] = []
    main["resources"]["requests"] = {}
    manifest["spec"]["components"][1]["podTemplate"]["metadata"] = {}
    assert structural_findings(manifest) == []
    assert round_trip(manifest) == manifest


def test_a_component_without_a_pod_template_gets_none_added():
    manifest = load(next(p for p in CORPUS if p.stem == "beta-sglang-multinode"))
    manifest["spec"]["components"].append({"name": "spare", "type": "worker", "replicas": 0})
    assert structural_findings(manifest) == []
    assert "podTemplate" not in round_trip(manifest)["spec"]["components"][-1]


# ----------------------------------------------------------------- across versions

CROSS = settings(PROPERTY, max_examples=int(os.environ.get("CONVERSION_EXAMPLES", "60")))
# A pointer-typed struct keeps its {} through the webhook's JSON (v1beta1/marshal.go:52-66 at 2a6da14c):
# there an empty object means something (scalingAdapter: {} opts in), so it is compared as written.
POINTER_OBJECTS = {"scalingAdapter", "multinode", "podTemplate", "experimental", "frontendSidecar",
                   "compilationCache", "eppConfig", "ingress", "autoscaling", "sharedMemory", "providerOverride",
                   "worker", "leader", "value", "extraPodSpec", "mainContainer"}


def as_the_operator_writes(value, key=None):
    """A manifest as the operator's conversion webhook writes it back, github.com/ai-dynamo/dynamo
    at 2a6da14c, deploy/operator/api/: the only differences a round trip through the other
    version may show.

    * Go's encoding/json omits an empty slice, map, string or zero bool of an ``omitempty`` field
      (a container's image and workingDir; mainContainer's name is saved only when set,
      shared_spec_conversion.go:450-452; compilationCache's mountPath, v1beta1/common.go:69), and
      v1beta1/marshal.go:131-160 strips an empty value-typed struct: [] and {} (other than a
      pointer's) are absent; ``sharedMemory.disabled: false`` likewise (v1alpha1/common.go).
    * ``nodeCount`` defaults to 2 (``+kubebuilder:default=2``, v1beta1/common.go:116-123): the API
      server stores it before any conversion.
    * ``sharedMemorySize`` and resource limits and requests are resource.Quantity values, which
      marshal as strings (v1alpha1/shared_spec_conversion.go:961-990, resourcesToNative :2489-2545).
    * A v1alpha1 ``componentType: prefill|decode`` comes back as ``worker`` with that
      subComponentType (sharedComponentTypeFromHub, shared_spec_conversion.go:406-413)."""
    if isinstance(value, list):
        return [as_the_operator_writes(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        v = as_the_operator_writes(v, k)
        if v == [] or (v == {} and k not in POINTER_OBJECTS) \
                or (key == "sharedMemory" and k == "disabled" and v is False) \
                or (v == "" and (k in ("image", "workingDir") or (key in ("mainContainer", "metadata")
                                                                  and k in ("name", "namespace"))
                                 or (key == "compilationCache" and k == "mountPath"))):
            continue
        out[k] = v
    if key in ("limits", "requests") and all(not isinstance(v, (dict, list)) for v in out.values()):
        out = {k: str(v) for k, v in out.items()}
    if key == "multinode":
        out.setdefault("nodeCount", 2)
    if "sharedMemorySize" in out:
        out["sharedMemorySize"] = str(out["sharedMemorySize"])
    if out.get("componentType") in ("prefill", "decode") and out.get("subComponentType", out["componentType"]) == \
            out["componentType"]:
        out["subComponentType"], out["componentType"] = out["componentType"], "worker"
    return out


def has_path(manifest: dict, path: str) -> bool:
    """Whether ``path`` (spec.services.<name>.<field> or spec.components[<i>].<field>, as losses name
    them) is in ``manifest``."""
    node = manifest
    for part in re.findall(r"services\.[^.]+|components\[\d+\]|[^.]+", path):
        if part.startswith("services."):
            node = node.get("services", {}).get(part[len("services."):]) if isinstance(node, dict) else None
        elif part.startswith("components["):
            node = node["components"][int(part[len("components["):-1])]
        else:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return False
    return True


@pytest.mark.parametrize("api_version", [V1ALPHA1, V1BETA1])
def test_any_manifest_converts_to_the_other_version_and_back_or_names_what_it_would_lose(api_version):
    other = V1BETA1 if api_version == V1ALPHA1 else V1ALPHA1

    @CROSS
    @given(manifests(api_version))
    def check(manifest):
        spec = import_manifest(copy.deepcopy(manifest))
        losses = conversion_losses(spec, other)
        if losses:
            assert all(has_path(manifest, path) for path, _why in losses), losses
            return
        converted = render(stored(spec), other)
        assert structural_findings(converted) == []
        back = render(stored(import_manifest(copy.deepcopy(converted))), api_version)
        assert as_the_operator_writes(back) == as_the_operator_writes(manifest)

    check()
