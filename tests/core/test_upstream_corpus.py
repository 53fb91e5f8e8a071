"""Upstream is the judge: every manifest ai-dynamo/dynamo ships at 2a6da14c (the commit core/crds/
comes from), verbatim in tests/fixtures/upstream-2a6da14c/ (SOURCE.txt there says how they were
collected), and DGDs that AIConfigurator writes here and now for models, systems and backends the
collection does not hold.

* every complete manifest that ``kubectl`` would send imports as shipped; the only refusals are
  the placeholders and templates that are not objects an API server takes (REFUSED, each with
  what makes it so);
* every imported graph comes back equal in its own API version (as the API server stores it:
  nulls pruned, status dropped, core/documents.py);
* every finding that fires is listed, with its upstream evidence, in docs/upstream-findings.md:
  a finding that fires on a manifest upstream ships is a false alarm until upstream's code says
  otherwise.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from core.dgd.render import render
from core.documents import load_bundle
from core.errors import ManifestError
from core.findings import Severity
from core.validation import validate_manifest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parents[1] / "fixtures" / "upstream-2a6da14c"
TABLE = ROOT / "docs" / "upstream-findings.md"
STRUCTURAL = ("schema_", "invalid_", "kind", "api_version", "not_a_mapping", "name_required")

# The files that are not objects an API server takes as they stand, and the words that say why.
REFUSED = {
    # ${VAR} templates that benchmarks/frontend renders before use: not YAML until then.
    "benchmarks__frontend__dgd__templates__mocker.yaml": "malformed YAML",
    "benchmarks__frontend__dgd__templates__vllm.yaml": "malformed YAML",
    "benchmarks__frontend__dgd__templates__vllm-gpt-oss-20b.yaml": "malformed YAML",
    # The operator's controller test outputs: object names are glob patterns ($glob:...).
    "deploy__operator__internal__controller__testdata__dgdr__deployment__output.yaml": "$glob:",
    "deploy__operator__internal__controller__testdata__dgdr__lws__output.yaml": "$glob:",
    # A ClusterRoleBinding named ${K8S_NAMESPACE}-planner, substituted by the example's script.
    "examples__global_planner__global-planner-gpu-budget.yaml": "${K8S_NAMESPACE}",
    "examples__global_planner__global-planner-vllm-test.yaml": "${K8S_NAMESPACE}",
    "examples__global_planner__global-planner-vllm-test-xpu-dra.yaml": "${K8S_NAMESPACE}",
    # metadata.namespace: <your-namespace>, to be filled in.
    "recipes__deepseek-v4__deepseek-v4-pro__sglang__agg-gb200__deploy.yaml": "<your-namespace>",
    "recipes__deepseek-v4__deepseek-v4-pro__sglang__disagg-b200__deploy.yaml": "<your-namespace>",
    "recipes__deepseek-v4__deepseek-v4-pro__sglang__disagg-gb200__deploy.yaml": "<your-namespace>",
    "recipes__glm-5-nvfp4__sglang__disagg__deploy.yaml": "<your-namespace>",
    "recipes__glm-5-nvfp4__sglang__disagg__efa__deploy.yaml": "<your-namespace>",
    # nodeSelector: ${HW_NODE_SELECTOR}, a string where the schema wants a map until substituted.
    "recipes__qwen3.6-35b__deploy__dynamo-fd.yaml": "nodeSelector must be of type object",
    "recipes__qwen3.6-35b__deploy__dynamo-fd-ec.yaml": "nodeSelector must be of type object",
    # The operator's sample, "TODO(user): Add fields here": spec holds only comments.
    "deploy__operator__config__samples__nvidia.com_v1alpha1_dynamographdeployment.yaml": "spec",
}


def corpus_files() -> list[str]:
    return sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.yaml"))


def _graphs(name: str, folder: Path = CORPUS):
    return load_bundle((folder / name).read_bytes(), max_bytes=1 << 22).graphs


def _is_dgdr_only(name: str) -> bool:
    try:
        kinds = {d.get("kind") for d in yaml.safe_load_all((CORPUS / name).read_text()) if isinstance(d, dict)}
    except yaml.YAMLError:
        return False  # the ${VAR} templates: REFUSED says so
    return kinds == {"DynamoGraphDeploymentRequest"}


def test_the_corpus_is_the_whole_collection():
    # 265 verbatim upstream files, 24 derived from them (SOURCE.txt), 1 newer recipe from the index.
    files = corpus_files()
    assert sum(1 for n in files if "/" not in n) == 265
    assert sum(1 for n in files if n.startswith("derived/")) == 24
    assert sum(1 for n in files if n.startswith("index/")) == 1
    assert sum(1 for n in corpus_files() if _is_dgdr_only(n)) == 13


def _refusal(name: str, folder: Path = CORPUS) -> str | None:
    try:
        for graph in _graphs(name, folder):
            report = validate_manifest(graph)
            structural = [f for f in report.findings if f.severity == Severity.ERROR and f.code.startswith(STRUCTURAL)]
            if structural or report.spec is None:
                return "; ".join(f"{f.path}: {f.message}" for f in structural) or "not a graph"
    except ManifestError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("name", [n for n in corpus_files() if not _is_dgdr_only(n)])
def test_every_complete_upstream_manifest_imports_as_shipped(name):
    refusal = _refusal(name)
    if name in REFUSED:
        assert refusal is not None and REFUSED[name] in refusal, refusal
    else:
        assert refusal is None, refusal


@pytest.mark.parametrize("name", [n for n in corpus_files() if _is_dgdr_only(n)])
def test_a_graph_request_is_refused_as_a_request_not_a_graph(name):
    with pytest.raises(ManifestError, match="holds a DynamoGraphDeploymentRequest, not a graph"):
        _graphs(name)


@pytest.mark.parametrize("name", [n for n in corpus_files() if n not in REFUSED and not _is_dgdr_only(n)])
def test_every_upstream_graph_comes_back_equal_in_its_own_api_version(name):
    for graph in _graphs(name):
        spec = validate_manifest(graph).spec
        assert render(spec, graph["apiVersion"]) == graph


def _table_codes() -> dict[str, str]:
    """code -> every row of the committed table that gives its evidence (a code may have a row
    per severity), joined; each row must cite an upstream file and line."""
    rows = {}
    for line in TABLE.read_text().splitlines():
        match = re.match(r"^\|\s*`([a-z0-9_]+)`\s*\|", line)
        if match:
            if not re.search(r"[\w./-]+(\.(go|py|rs|md|mdx|yaml)|Dockerfile):[\d,-]+", line):
                raise AssertionError(f"{TABLE.name}: the row for {match.group(1)} names no upstream file and line")
            rows[match.group(1)] = rows.get(match.group(1), "") + line
    return rows


def corpus_findings() -> Counter:
    fired: Counter = Counter()
    for name in corpus_files():
        if name in REFUSED or _is_dgdr_only(name):
            continue
        for graph in _graphs(name):
            for finding in validate_manifest(graph).findings:
                fired[(finding.severity.value, finding.code)] += 1
    return fired


def test_every_finding_upstream_draws_is_listed_with_its_upstream_evidence():
    listed = _table_codes()
    fired = corpus_findings()
    counted = {(m.group(3), m.group(1)): int(m.group(2)) for m in re.finditer(
        r"^\| `(\w+)` \| (\d+) \| (error|warning|info) \|", TABLE.read_text(), re.M)}
    assert counted == dict(fired), "the table's counts are not what fires on the corpus"
    unlisted = sorted({code for _sev, code in fired} - set(listed))
    assert not unlisted, f"findings that fire on upstream's manifests without evidence in {TABLE.name}: {unlisted}"
    for (_severity, code), _count in fired.items():
        assert re.search(r"[\w./-]+\.(go|py|rs|md|yaml):\d+", listed[code]) or "@" in listed[code], (
            f"{code}: the row names no upstream file and line")


# ----------------------------------------------------------------------- manifests not seen before

# Models, systems, backends and releases the collection does not hold; AIConfigurator writes a
# DGD for each here and now (aggregated and disaggregated), with the version the venv installs.
AIC_RUNS = [
    ("Qwen/Qwen3-8B", "h100_sxm", "vllm", None),
    ("Qwen/Qwen3-8B", "h200_sxm", "sglang", None),
    ("Qwen/Qwen3-30B-A3B", "h200_sxm", "trtllm", None),
    ("Qwen/Qwen3-8B", "h100_sxm", "vllm", "1.0.0"),
    ("Qwen/Qwen3-8B", "b200_sxm", "trtllm", "1.2.0"),
]


@pytest.fixture(scope="module")
def aiconfigurator_graphs(tmp_path_factory) -> list[tuple[str, dict]]:
    out = []
    aic = str(Path(sys.executable).with_name("aiconfigurator"))
    for model, system, backend, release in AIC_RUNS:
        where = tmp_path_factory.mktemp("aic")
        argv = [aic, "cli", "default", "--model-path", model, "--system", system, "--total-gpus", "8",
                "--backend", backend, "--isl", "2000", "--osl", "300", "--ttft", "1000", "--tpot", "40",
                "--top-n", "1", "--save-dir", str(where), "--log-level", "ERROR"]
        if release:
            argv += ["--dynamo-version", release]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        files = sorted(where.rglob("k8s_deploy.yaml"))
        assert files, f"{model} {system} {backend}: AIConfigurator wrote no k8s_deploy.yaml"
        for path in files:
            label = f"{model} {system} {backend} {release or 'default'} {path.parent.parent.name}"
            out += [(label, graph) for graph in load_bundle(path.read_bytes(), max_bytes=1 << 22).graphs]
    return out


def test_aiconfigurator_graphs_never_seen_import_round_trip_and_draw_no_false_finding(aiconfigurator_graphs):
    listed = _table_codes()
    assert len(aiconfigurator_graphs) >= 2 * len(AIC_RUNS)
    for label, graph in aiconfigurator_graphs:
        report = validate_manifest(graph)
        assert report.spec is not None, (label, [f.as_dict() for f in report.findings])
        errors = [f.as_dict() for f in report.findings if f.severity == Severity.ERROR]
        assert not errors, (label, errors)
        assert render(report.spec, graph["apiVersion"]) == graph, label
        unlisted = {f.code for f in report.findings} - set(listed)
        assert not unlisted, (label, unlisted)


def test_conversion_of_upstream_graphs_refuses_only_what_the_other_schema_has_no_place_for():
    # The operator converts every field (deploy/operator/api/v1alpha1/shared_spec_conversion.go and
    # dynamographdeployment_conversion.go@2a6da14c), keeping what has no native place in its
    # nvidia.com/dgd-spec annotation. What it cannot carry is a value the other schema refuses:
    # a v1alpha1 componentType outside v1beta1's type enum (deploy/operator/api/v1beta1).
    from core.dgd.render import V1ALPHA1, V1BETA1, conversion_losses

    refused = Counter()
    converted = 0
    for name in corpus_files():
        if name in REFUSED or _is_dgdr_only(name):
            continue
        for graph in _graphs(name):
            spec = validate_manifest(graph).spec
            other = V1BETA1 if graph["apiVersion"] == V1ALPHA1 else V1ALPHA1
            losses = conversion_losses(spec, other)
            for path, why in losses:
                assert path.endswith(".componentType") and "is not a nvidia.com/v1beta1 type" in why, (name, path, why)
                refused[name] += 1
            if not losses:
                converted += 1
                back = render(validate_manifest(render(spec, other)).spec, graph["apiVersion"])
                assert back == graph, name
    assert converted >= 250
    assert sum(refused.values()) <= 10, refused


# ------------------------------------------------------- recipes upstream added after 2a6da14c

# DGD manifests upstream shipped after 2a6da14c, verbatim from the public-code index
# (tests/fixtures/upstream-newer/SOURCE.txt): models, layouts and fields the collection above
# does not hold. The same three promises hold for them.
NEWER = Path(__file__).parents[1] / "fixtures" / "upstream-newer"

# The files that are not objects an API server takes as they stand, and the words that say why.
NEWER_REFUSED = {
    # nodeSelector: ${HW_NODE_SELECTOR} and image: ${VLLM_IMAGE}, filled by the recipe's run.sh
    # through envsubst: a string where the schema wants a map until substituted.
    "recipes__custom-encoder__deploy.yaml": "nodeSelector must be of type object",
}


def newer_files() -> list[str]:
    return sorted(p.name for p in NEWER.glob("*.yaml"))


def _newer_graphs(name: str):
    return _graphs(name, NEWER)


def test_the_newer_collection_is_what_source_lists():
    listed = {line.split()[0].replace("/", "__") for line in (NEWER / "SOURCE.txt").read_text().splitlines()
              if line.startswith("recipes/")}
    assert set(newer_files()) == listed
    assert len(listed) >= 12
    assert set(NEWER_REFUSED) <= listed


@pytest.mark.parametrize("name", newer_files())
def test_every_newer_upstream_manifest_imports_as_shipped(name):
    refusal = _refusal(name, NEWER)
    if name in NEWER_REFUSED:
        assert refusal is not None and NEWER_REFUSED[name] in refusal, refusal
    else:
        assert refusal is None, refusal


@pytest.mark.parametrize("name", [n for n in newer_files() if n not in NEWER_REFUSED])
def test_every_newer_upstream_graph_comes_back_equal_in_its_own_api_version(name):
    graphs = _newer_graphs(name)
    assert graphs
    for graph in graphs:
        spec = validate_manifest(graph).spec
        assert render(spec, graph["apiVersion"]) == graph


@pytest.mark.parametrize("name", [n for n in newer_files() if n not in NEWER_REFUSED])
def test_every_finding_a_newer_upstream_manifest_draws_is_listed_with_its_upstream_evidence(name):
    listed = _table_codes()
    for graph in _newer_graphs(name):
        codes = {f.code for f in validate_manifest(graph).findings}
        unlisted = sorted(codes - set(listed))
        assert not unlisted, f"{name}: findings without evidence in {TABLE.name}: {unlisted}"
        for code in codes:
            assert re.search(r"[\w./-]+\.(go|py|rs|md|yaml):\d+", listed[code]) or "@" in listed[code], (
                f"{code}: the row names no upstream file and line")


def test_a_worker_at_zero_replicas_that_makes_its_own_checkpoint_draws_no_warning():
    # recipes/gpt-oss-120b/vllm/agg-snapshot-gms: the worker starts at 0 replicas while the
    # operator makes its checkpoint, and is scaled up once the checkpoint is Ready (its README).
    graph = _newer_graphs("recipes__gpt-oss-120b__vllm__agg-snapshot-gms__deploy.yaml")[0]
    assert "replicas_zero" not in {f.code for f in validate_manifest(graph).findings}
    # The same worker restoring a named checkpoint has no checkpoint to wait for: 0 replicas
    # leaves the frontend without its model.
    referenced = yaml.safe_load(yaml.safe_dump(graph))
    referenced["spec"]["components"][1]["experimental"]["checkpoint"] = {"enabled": True, "checkpointRef": "ckpt"}
    assert "replicas_zero" in {f.code for f in validate_manifest(referenced).findings}


def test_a_v1alpha1_worker_that_makes_its_own_checkpoint_at_zero_replicas_draws_no_warning():
    # v1alpha1 spells the same setting services.<name>.checkpoint (api/v1alpha1/
    # dynamocomponentdeployment_types.go:187@2a6da14c).
    main = {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0"}
    worker = {"componentType": "worker", "replicas": 0, "resources": {"limits": {"gpu": "1"}},
              "checkpoint": {"enabled": True, "startupPolicy": "WaitForCheckpoint"},
              "extraPodSpec": {"mainContainer": {**main, "command": ["python3", "-m", "dynamo.vllm"],
                                                 "args": ["--model", "Qwen/Qwen3-0.6B"]}}}
    graph = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": "ckpt"},
             "spec": {"services": {"Frontend": {"componentType": "frontend", "replicas": 1,
                                                "extraPodSpec": {"mainContainer": main}},
                                   "Worker": worker}}}
    assert "replicas_zero" not in {f.code for f in validate_manifest(graph).findings}
    del worker["checkpoint"]
    assert "replicas_zero" in {f.code for f in validate_manifest(graph).findings}


SHARED = ROOT.parent / "shared" / "reference" / "upstream-manifests-2a6da14c"


@pytest.mark.skipif(not SHARED.is_dir(), reason="the team's ../shared/reference/upstream-manifests-2a6da14c is not "
                                                "beside this checkout (a clone elsewhere holds only the copy)")
def test_the_corpus_here_is_the_shared_reference_byte_for_byte():
    """tests/fixtures/upstream-2a6da14c is a copy of the team's reference collection, so that a
    clone anywhere runs these tests: where the reference is at hand, the copy must be the same."""
    ours = {p.name: p.read_bytes() for p in CORPUS.iterdir() if p.is_file()}
    theirs = {p.name: p.read_bytes() for p in SHARED.iterdir() if p.is_file()}
    assert sorted(ours) == sorted(theirs)
    assert [name for name in ours if ours[name] != theirs[name]] == []
