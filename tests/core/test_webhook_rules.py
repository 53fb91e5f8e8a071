"""The Dynamo operator's validating webhook and the DGD CRD's CEL rules, held to upstream's own tests.

Each case is a row of upstream's envtest table, ai-dynamo/dynamo
``deploy/operator/internal/webhook/validation/dynamographdeployment_validation_envtest_test.go`` at
commit 2a6da14c (cited ``envtest:<line>``): the same object (``newBetaDGDForValidation``,
``newAlphaDGDForCompatibilityValidation``, envtest:2640-2700, written out here) and the same expected
errors, compared as upstream's suite compares them (``assertAdmissionErrors``,
suite_envtest_test.go@2a6da14c:482-517: ``Invalid value: "object": `` read as ``Invalid value: ``).
The corpus check runs the create rules on verbatim upstream manifests (tests/fixtures/upstream/).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from core.dgd import immutable
from core.dgd.webhook import Cluster, create_errors, update_errors
from core.validation import validate_manifest

IMAGE = "registry.example/runtime:1.1.0"
OPERATOR = "system:serviceaccount:dynamo-system:dynamo-platform-dynamo-operator-controller-manager"
RECREATE = ("is immutable and cannot be added, removed, or changed after creation; delete and recreate the "
            "DynamoGraphDeployment to change topology constraints")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "upstream"


def _main(image=IMAGE, **extra):
    return {"podTemplate": {"spec": {"containers": [{"name": "main", "image": image, **extra}]}}}


def beta(**spec):
    """``newBetaDGDForValidation`` (envtest:2640)."""
    return {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": "test-graph", "namespace": "default"},
            "spec": {"backendFramework": "vllm", "components": [
                {"name": "frontend", "type": "frontend", "runtimeVersionOverride": "1.1.0", "replicas": 1, **_main()},
                {"name": "worker", "type": "worker", "runtimeVersionOverride": "1.1.0", "replicas": 2, **_main()}],
                **spec}}


def worker(dgd, **fields):
    dgd["spec"]["components"][1].update(fields)
    return dgd


def alpha(**service):
    """``newAlphaDGDForCompatibilityValidation`` (envtest:2668)."""
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": "test-graph", "namespace": "default"},
            "spec": {"backendFramework": "vllm", "services": {"worker": {
                "componentType": "worker", "runtimeVersionOverride": "1.1.0", "replicas": 1,
                "extraPodSpec": {"mainContainer": {"image": IMAGE}}, **service}}}}


def _beta_of_alpha(manifest):
    """The v1beta1 object upstream's conversion makes of ``alpha()`` (one component per service)."""
    return {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment", "metadata": manifest["metadata"],
            "spec": {"backendFramework": "vllm", "components": [
                {"name": "worker", "type": "worker", "runtimeVersionOverride": "1.1.0", "replicas": 1, **_main()}]}}


def shown(errors) -> list[str]:
    return [re.sub(r'Invalid value: "(object|array)": ', "Invalid value: ", str(e), count=1) for e in errors]


CREATE = [
    ("envtest:76 valid deployment", beta(), []),
    ("envtest:94 custom image requires runtime version override",
     worker(beta(), runtimeVersionOverride="", **_main("registry.example/runtime:custom")),
     ["spec.components[1].runtimeVersionOverride: Required value: is required when the specified main container "
      "image has no parseable semantic-version tag"]),
    ("envtest:80 main image is required", beta(components=[beta()["spec"]["components"][0], {
        k: v for k, v in beta()["spec"]["components"][1].items() if k != "podTemplate"}]),
     ["spec.components[1].podTemplate.spec.containers: Required value: is required"]),
    ("envtest:172 no components", beta(components=[]),
     ["spec.components: Required value: must have at least one component"]),
    ("envtest:197 restart on create is rejected by CEL", beta(restart={"id": "roll", "strategy": {
        "type": "Parallel", "order": ["frontend", "worker"]}}),
     ["spec: Invalid value: spec.restart must be unset on create; set spec.restart.id after creation to request a "
      "restart"]),
    ("envtest:210 component topology constraint requires deployment topology",
     worker(beta(), topologyConstraint={"packDomain": "rack"}),
     ["spec.topologyConstraint: Required value: is required when any component topology constraint is set"]),
    ("envtest:225 inter-pod GMS requires vLLM", worker(beta(backendFramework="sglang"), experimental={
        "gpuMemoryService": {"mode": "InterPod"}}, **_main(resources={"limits": {"nvidia.com/gpu": "1"}})),
     ['spec.components[1].experimental.gpuMemoryService.mode: Invalid value: "InterPod": the inter-pod GMS layout is '
      "currently supported only for vLLM (detected backend: sglang)"]),
    ("envtest:233 KV transfer policy selector is rejected by CEL",
     beta(experimental={"kvTransferPolicy": {"domain": "rack"}}),
     ["spec.experimental.kvTransferPolicy: Invalid value: exactly one of labelKey or clusterTopologyName is required"]),
    ("envtest:244 intra-pod failover requires container discovery", worker(beta(), experimental={
        "gpuMemoryService": {"mode": "IntraPod"}, "failover": {"mode": "IntraPod"}},
        **_main(resources={"limits": {"nvidia.com/gpu": "1"}})),
     ['metadata.annotations[nvidia.com/dynamo-kube-discovery-mode]: Invalid value: "": must be "container" when '
      "intra-pod failover is configured"]),
    ("envtest:255 checkpoint job with checkpointRef is rejected by CEL", worker(beta(), experimental={
        "checkpoint": {"enabled": True, "checkpointRef": "existing-checkpoint", "job": {}}}),
     ["spec.components[1].experimental.checkpoint: Invalid value: checkpoint.job cannot be set when checkpointRef is "
      "specified"]),
    ("envtest:269 GMS requires GPU resources", worker(beta(), experimental={"gpuMemoryService": {"mode": "IntraPod"}}),
     ["spec.components[1].experimental.gpuMemoryService: Forbidden: GPU memory service requires podTemplate.spec."
      "containers[main].resources.limits.nvidia.com/gpu >= 1"]),
    ("envtest:294 component names are unique case-insensitively", beta(components=[
        {**beta()["spec"]["components"][0], "name": "worker"}, {**beta()["spec"]["components"][1], "name": "WORKER"}]),
     ["spec.components: Invalid value: component names must be unique case-insensitively"]),
    ("envtest:342 sidecars must provide an image in CEL", worker(beta(), podTemplate={"spec": {"containers": [
        {"name": "main", "image": IMAGE}, {"name": "metrics"}]}}),
     ["spec.components[1].podTemplate.spec.containers[1]: Invalid value: sidecar containers must specify a "
      "non-empty image"]),
    ("envtest:386 pod template backend annotation is validated by CEL", worker(beta(), podTemplate={
        "metadata": {"annotations": {"nvidia.com/vllm-distributed-executor-backend": "invalid"}},
        "spec": {"containers": [{"name": "main", "image": IMAGE}]}}),
     ["spec.components[1].podTemplate.metadata.annotations: Invalid value: podTemplate backend annotation must be mp "
      "or ray, case-insensitively"]),
    ("envtest:432 frontend sidecar must reference an existing container", worker(beta(), frontendSidecar="missing"),
     ['spec.components[1].frontendSidecar: Invalid value: "missing": must match a podTemplate.spec.containers name']),
    ("envtest:473 replicas below minAvailable are rejected by CEL", worker(beta(), replicas=1, minAvailable=2),
     ["spec.components[1]: Invalid value: minAvailable must be less than or equal to replicas unless replicas is 0"]),
    ("envtest:577 power annotation zero", worker(beta(), podTemplate={
        "metadata": {"annotations": {"dynamo.nvidia.com/gpu-power-limit": "0"}},
        "spec": {"containers": [{"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        multinode={"nodeCount": 2}),
     ['spec.components[1].podTemplate.metadata.annotations[dynamo.nvidia.com/gpu-power-limit]: Invalid value: "0": '
      "must be greater than zero"]),
    ("envtest:1403 EPP config without a source is rejected by CEL",
     worker(beta(), type="epp", replicas=1, eppConfig={}),
     ["spec.components[1].eppConfig: Invalid value: exactly one of configMapRef or config must be specified"]),
    ("envtest:1528 deployment topology without pack domain requires a component topology",
     beta(topologyConstraint={"clusterTopologyName": "grove-topology"}),
     ["spec.topologyConstraint.packDomain: Required value: is required when no component topologyConstraint is set"]),
    ("envtest:1973 independent root errors aggregate", {**beta(components=[]), "metadata": {
        "name": "test-graph", "annotations": {"nvidia.com/dynamo-operator-origin-version": "not-semver",
                                              "nvidia.com/vllm-distributed-executor-backend": "invalid",
                                              "nvidia.com/dynamo-kube-discovery-mode": "invalid"}}},
     ['metadata.annotations[nvidia.com/dynamo-operator-origin-version]: Invalid value: "not-semver": must be valid '
      "semver",
      'metadata.annotations[nvidia.com/vllm-distributed-executor-backend]: Invalid value: "invalid": must be "mp" or '
      '"ray"',
      'metadata.annotations[nvidia.com/dynamo-kube-discovery-mode]: Unsupported value: "invalid": supported values: '
      '"pod", "container"',
      "spec.components: Required value: must have at least one component"]),
    ("envtest:1933 Grove update strategy rejects lowercase", {**beta(), "metadata": {
        "name": "test-graph", "annotations": {"nvidia.com/grove-update-strategy": "ondelete"}}},
     ['metadata.annotations[nvidia.com/grove-update-strategy]: Unsupported value: "ondelete": supported values: '
      '"RollingRecreate", "OnDelete"']),
]


@pytest.mark.parametrize(("case", "manifest", "want"), CREATE, ids=[c[0] for c in CREATE])
def test_create_rules_answer_as_upstreams_envtest(case, manifest, want):
    assert shown(create_errors(manifest)) == want


def test_the_grove_name_length_rule_refuses_what_upstream_refuses():
    """envtest:1476-1488: DGD "test-graph-" + 50 x, component "w" + 37 x: 46 > 45 characters."""
    long_name = "test-graph-" + "x" * 50
    component = "w" + "x" * 37
    dgd = beta()
    dgd["metadata"]["name"] = long_name
    dgd["spec"]["components"][1]["name"] = component
    assert shown(create_errors(dgd)) == [
        f'spec.components[1].name: Invalid value: "{component}": combined resource name length 46 exceeds the '
        f'45-character pod-name limit (PCS name + component name); shorten DynamoGraphDeployment name "{long_name}" '
        f'or component name "{component}"']
    dgd["spec"]["components"][1]["name"] = component[:-1]  # envtest:1469 the boundary is accepted
    assert create_errors(dgd) == []
    assert create_errors(dgd | {"metadata": {**dgd["metadata"], "annotations": {"nvidia.com/enable-grove": "false"}}},
                         ) == []  # envtest:1489 skipped outside Grove


def test_grove_only_fields_are_refused_without_grove():
    """envtest:189, 217, 1440: with the Grove gate off the DGD takes the component provider."""
    off = Cluster(grove=False)
    assert shown(create_errors(worker(beta(), minAvailable=1), cluster=off)) == [
        "spec.components[1].minAvailable: Forbidden: is currently supported only for Grove-backed "
        "DynamoGraphDeployment components"]
    assert shown(create_errors(beta(priorityClassName="high-priority"), cluster=off)) == [
        'spec.priorityClassName: Forbidden: requires the Grove pathway, but workload provider "component" is selected']


ALPHA = [
    ("envtest:105 alpha custom image uses source-version path",
     alpha(runtimeVersionOverride="", extraPodSpec={"mainContainer": {"image": "registry.example/runtime:custom"}}),
     ["spec.services[worker].runtimeVersionOverride: Required value: is required when the specified main container "
      "image has no parseable semantic-version tag"]),
    ("envtest:1231 alpha volume mounts require mount point", alpha(volumeMounts=[{"name": "cache"}]),
     ["spec.services[worker].volumeMounts[0].mountPoint: Required value: is required when useAsCompilationCache is "
      "false"]),
    ("envtest:423 alpha invalid service annotation",
     alpha(annotations={"nvidia.com/vllm-distributed-executor-backend": "invalid"}),
     ['spec.services[worker].annotations[nvidia.com/vllm-distributed-executor-backend]: Invalid value: "invalid": '
      'must be "mp" or "ray"']),
    ("envtest:1238 alpha EPP config sources are mutually exclusive",
     alpha(componentType="epp", eppConfig={"configMapRef": {"name": "epp"}, "config": {"plugins": []}}),
     ["spec.services[worker].eppConfig: Forbidden: exactly one of configMapRef or config is required"]),
    ("envtest:1379 alpha shared memory without a positive size is rejected by source CEL",
     alpha(sharedMemory={"disabled": False}),
     ["spec.services[worker].sharedMemory: Invalid value: size is required when disabled is false"]),
]


@pytest.mark.parametrize(("case", "manifest", "want"), ALPHA, ids=[c[0] for c in ALPHA])
def test_v1alpha1_requests_answer_at_their_own_paths(case, manifest, want):
    assert shown(create_errors(manifest, to_beta=_beta_of_alpha)) == want


UPDATE = [
    ("envtest:1992 component added", beta(), beta(components=[*beta()["spec"]["components"], {
        "name": "extra", "replicas": 1, "runtimeVersionOverride": "1.1.0", **_main()}]), "",
     ["spec.components: Forbidden: component topology is immutable and cannot be modified after creation: components "
      "added: [extra]"]),
    ("envtest:2018 added and removed", beta(), beta(components=[beta()["spec"]["components"][1], {
        "name": "extra", "replicas": 1, "runtimeVersionOverride": "1.1.0", **_main()}]), "",
     ["spec.components: Forbidden: component topology is immutable and cannot be modified after creation: components "
      "added: [extra], components removed: [frontend]"]),
    ("envtest:2034 reorder is allowed", beta(), beta(components=beta()["spec"]["components"][::-1]), "", []),
    ("envtest:2043 single-node to multinode", beta(), worker(beta(), multinode={"nodeCount": 2}), "",
     ['spec.components[1].multinode: Invalid value: {"nodeCount":2}: cannot change node topology between single-node '
      "and multi-node after creation"]),
    ("envtest:2051 node count-only update is allowed", worker(beta(), multinode={"nodeCount": 2}),
     worker(beta(), multinode={"nodeCount": 3}), "", []),
    ("envtest:2460 backend framework", beta(), beta(backendFramework="sglang"), "",
     ['spec.backendFramework: Invalid value: "sglang": is immutable and cannot be changed after creation']),
    ("envtest:2062 spec topology constraint added", beta(), beta(topologyConstraint={
        "clusterTopologyName": "grove-topology", "packDomain": "rack"}), "",
     [f'spec.topologyConstraint: Invalid value: {{"clusterTopologyName":"grove-topology","packDomain":"rack"}}: '
      f"{RECREATE}"]),
    ("envtest:2089 spec topology constraint removed", beta(topologyConstraint={
        "clusterTopologyName": "grove-topology", "packDomain": "rack"}), beta(), "",
     [f"spec.topologyConstraint: Invalid value: null: {RECREATE}"]),
    ("envtest:2168 kv transfer policy removed", beta(experimental={"kvTransferPolicy": {
        "labelKey": "topology.kubernetes.io/zone", "domain": "zone"}}), beta(), "",
     ["spec.experimental.kvTransferPolicy: Invalid value: null: is immutable and cannot be added, removed, or changed "
      "after creation; delete and recreate the DynamoGraphDeployment to change the KV transfer policy"]),
    ("envtest:2240 grove.forceScalingGroup removed",
     worker(beta(), experimental={"grove": {"forceScalingGroup": True}}),
     worker(beta(), experimental={"grove": {"forceScalingGroup": False}}), "",
     ["spec.components[1].experimental.grove.forceScalingGroup: Invalid value: false: cannot be toggled after "
      "creation; delete and recreate the DynamoGraphDeployment to change it"]),
    ("envtest:2298 scaling adapter blocks direct replica changes", worker(beta(), scalingAdapter={}, replicas=2),
     worker(beta(), scalingAdapter={}, replicas=3), "system:serviceaccount:default:regular-user",
     ["spec.components[1].replicas: Forbidden: cannot be modified directly when scaling adapter is enabled; scale or "
      "update the related DynamoGraphDeploymentScalingAdapter instead"]),
    ("envtest:2323 adapter removal cannot bypass", worker(beta(), scalingAdapter={}, replicas=2),
     worker(beta(), replicas=3), "system:serviceaccount:default:regular-user",
     ["spec.components[1].replicas: Forbidden: cannot be modified directly when scaling adapter is enabled; scale or "
      "update the related DynamoGraphDeploymentScalingAdapter instead"]),
    ("envtest:2336 operator may change adapter replicas", worker(beta(), scalingAdapter={}, replicas=2),
     worker(beta(), scalingAdapter={}, replicas=3), OPERATOR, []),
    ("envtest:2350 restart id during an active rolling update", {**beta(restart={"id": "old"}), "status": {
        "rollingUpdate": {"phase": "InProgress"}}}, beta(restart={"id": "new"}), "",
     ['spec.restart.id: Invalid value: "new": cannot be changed while a rolling update is InProgress']),
    ("envtest:2452 parallel restart rejects order on update", beta(), beta(restart={"id": "roll", "strategy": {
        "type": "Parallel", "order": ["frontend", "worker"]}}), "",
     ["spec.restart.strategy.order: Forbidden: cannot be specified when strategy is parallel"]),
    ("envtest:2415 unknown restart order component", beta(), beta(restart={"id": "roll", "strategy": {
        "type": "Sequential", "order": ["frontend", "ghost"]}}), "",
     ['spec.restart.strategy.order[1]: Unsupported value: "ghost": supported values: "frontend", "worker"']),
    ("envtest:499 changed minAvailable is rejected by CEL", worker(beta(), minAvailable=1),
     worker(beta(), minAvailable=2), "",
     ["spec.components[1]: Invalid value: minAvailable is immutable after creation"]),
    ("envtest:645 power annotation change", worker(beta(), multinode={"nodeCount": 2}, podTemplate={
        "metadata": {"annotations": {"dynamo.nvidia.com/gpu-power-limit": "300"}}, "spec": {"containers": [
            {"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
     worker(beta(), multinode={"nodeCount": 3}, podTemplate={
         "metadata": {"annotations": {"dynamo.nvidia.com/gpu-power-limit": "300"}}, "spec": {"containers": [
             {"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}), "",
     ["spec.components[1].multinode.nodeCount: Invalid value: 3: field is immutable"]),
    ("envtest:144 image changed to a custom tag", worker(beta(), runtimeVersionOverride=""),
     worker(beta(), runtimeVersionOverride="", **_main("registry.example/runtime:custom")), "",
     ["spec.components[1].runtimeVersionOverride: Required value: is required when the specified main container "
      "image has no parseable semantic-version tag"]),
    ("envtest:114 an unchanged legacy image is ratcheted", worker(beta(), runtimeVersionOverride="",
                                                                  **_main("registry.example/runtime:custom")),
     {**worker(beta(), runtimeVersionOverride="", **_main("registry.example/runtime:custom")),
      "metadata": {"name": "test-graph", "labels": {"updated": "true"}}}, "", []),
    ("envtest:1845 workload provider cannot change",
     {**beta(), "metadata": {"name": "test-graph", "annotations": {"nvidia.com/workload-provider": "component"}}},
     {**beta(), "metadata": {"name": "test-graph", "annotations": {"nvidia.com/workload-provider": "grove"}}}, OPERATOR,
     ['metadata.annotations[nvidia.com/workload-provider]: Invalid value: "grove": field is immutable']),
]


@pytest.mark.parametrize(("case", "old", "new", "user", "want"), UPDATE, ids=[c[0] for c in UPDATE])
def test_update_rules_answer_as_upstreams_envtest(case, old, new, user, want):
    assert shown(update_errors(copy.deepcopy(old), copy.deepcopy(new), user)) == want


def test_only_update_rules_lead_to_the_recreate_offer():
    """immutable.changes keeps what recreating gets past: a node-count change within multi-node is no
    refusal (envtest:2051), a backend change is (envtest:2460), adapter replicas are held instead."""
    two = worker(beta(), multinode={"nodeCount": 2})
    assert immutable.changes(two, worker(beta(), multinode={"nodeCount": 4})) == []
    assert [f.describe() for f in immutable.changes(beta(), beta(backendFramework="sglang"))] == [
        'spec.backendFramework: Invalid value: "sglang": is immutable and cannot be changed after creation']
    assert immutable.changes(worker(beta(), scalingAdapter={}, replicas=2),
                             worker(beta(), scalingAdapter={}, replicas=3)) == []
    moved = immutable.changes(worker(beta(), minAvailable=1), worker(beta(), minAvailable=2))
    assert [f.describe() for f in moved] == [
        'spec.components[1]: Invalid value: "object": minAvailable is immutable after creation']


# -- the corpus: verbatim upstream manifests --------------------------------------------------------------
# runtimeversion.imageTagPattern, copied from internal/runtimeversion/runtimeversion.go@2a6da14c:17.
UPSTREAM_TAG = re.compile(r"^[vV]?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-((?:0|[1-9][0-9]*|"
                          r"[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
                          r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$")
CORPUS = {  # file -> the rule families upstream's code refuses it for (on create)
    "examples__backends__vllm__deploy__agg.yaml": {"runtime_version"},  # image ...:my-tag
    "examples__backends__vllm__deploy__disagg-multinode.yaml": {"runtime_version"},
    "examples__power-aware-budget__dgd.yaml": {"main_image"},  # main container with image ""
    "recipes__deepseek-v4__deepseek-v4-pro__vllm__disagg__gb200__deploy.yaml": {"grove_name_length"},
    "deploy__operator__internal__controller__testdata__dgd__grove__input.yaml": set(),
    "examples__deployments__EKS__manifests__vllm__agg.yaml": set(),
    "recipes__llama-3-70b__vllm__agg__deploy.yaml": set(),
}


def _docs(name):
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text())
            if isinstance(d, dict) and d.get("kind") == "DynamoGraphDeployment"]


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_upstream_manifests_are_refused_exactly_where_upstreams_code_refuses_them(name):
    refused = {getattr(e, "rule", "") for doc in _docs(name) for e in create_errors(doc)}
    assert refused == CORPUS[name]
    for doc in _docs(name):
        spec = doc["spec"]
        units = spec.get("services", {}).values() if "services" in spec else spec.get("components", [])
        for unit in units:
            image = (unit.get("extraPodSpec", {}).get("mainContainer", {}).get("image") if "services" in spec else
                     next((c.get("image") for c in unit.get("podTemplate", {}).get("spec", {}).get("containers", [])
                           if c.get("name") == "main"), None))
            tag = (image or "").split("@")[0].rpartition(":")[2] if ":" in (image or "").rpartition("/")[2] else ""
            # Independently of the product's code: a non-semver tag without override is what upstream refuses.
            bad = bool(image) and not unit.get("runtimeVersionOverride") and not UPSTREAM_TAG.match(tag.strip())
            assert not bad or "runtime_version" in refused, (name, image)
            assert bad or "runtime_version" not in CORPUS[name] or any(
                True for _ in units), (name, image)


def test_the_pre_check_reports_the_refusal_as_an_error_at_the_manifests_own_path():
    report = validate_manifest(_docs("examples__backends__vllm__deploy__agg.yaml")[0])
    found = [f for f in report.findings if f.code == "webhook_runtime_version"]
    assert found and not report.ok
    assert found[0].path.endswith(".runtimeVersionOverride") and "my-tag" not in found[0].message
    assert "no parseable semantic-version tag" in found[0].message and found[0].fix
    assert validate_manifest(_docs("examples__deployments__EKS__manifests__vllm__agg.yaml")[0]).ok
