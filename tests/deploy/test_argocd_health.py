"""deploy/argocd's Lua health checks, run in a real Lua 5.1 interpreter (lupa; Argo CD runs
gopher-lua, a Lua 5.1) against every case of their Argo CD-style health_test.yaml, whose inputs
have the status the Dynamo operator writes (deploy/argocd/README.md cites its source)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lupa import lua51

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "argocd"
CUSTOM = ROOT / "resource_customizations" / "nvidia.com"
KINDS = ("DynamoGraphDeployment", "DynamoGraphDeploymentScalingAdapter")


def health(kind: str, obj: dict) -> dict:
    lua = lua51.LuaRuntime(register_eval=False, unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute((CUSTOM / kind / "health.lua").read_text())
    return {"status": result["status"], "message": result["message"]}


def _cases():
    for kind in KINDS:
        spec = yaml.safe_load((CUSTOM / kind / "health_test.yaml").read_text())
        for case in spec["tests"]:
            yield pytest.param(kind, case, id=f"{kind}-{Path(case['inputPath']).stem}")


@pytest.mark.parametrize(("kind", "case"), list(_cases()))
def test_each_health_case_gives_its_status_and_message(kind, case):
    obj = yaml.safe_load((CUSTOM / kind / case["inputPath"]).read_text())
    assert obj["kind"] == kind
    assert health(kind, obj) == case["healthStatus"]


def test_every_testdata_file_is_a_case():
    for kind in KINDS:
        listed = {c["inputPath"] for c in yaml.safe_load((CUSTOM / kind / "health_test.yaml").read_text())["tests"]}
        assert listed == {f"testdata/{p.name}" for p in (CUSTOM / kind / "testdata").glob("*.yaml")}


def test_a_dgd_goes_healthy_only_once_the_operator_observed_the_generation():
    obj = yaml.safe_load((CUSTOM / "DynamoGraphDeployment" / "testdata" / "healthy.yaml").read_text())
    assert health("DynamoGraphDeployment", obj)["status"] == "Healthy"
    obj["metadata"]["generation"] += 1  # a new spec the operator has not reconciled yet
    assert health("DynamoGraphDeployment", obj)["status"] == "Progressing"
    obj["status"]["observedGeneration"] = obj["metadata"]["generation"]
    obj["status"]["conditions"][0]["status"] = "False"  # successful but not Ready: not healthy
    assert health("DynamoGraphDeployment", obj)["status"] == "Progressing"


def test_the_configmap_carries_the_scripts_verbatim():
    cm = yaml.safe_load((ROOT / "argocd-cm.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    for kind in KINDS:
        script = (CUSTOM / kind / "health.lua").read_text()
        assert cm["data"][f"resource.customizations.health.nvidia.com_{kind}"] == script


def test_the_application_ignores_replicas_of_the_components_list():
    app = yaml.safe_load((ROOT / "application.yaml").read_text())
    assert app["kind"] == "Application"
    [ignore] = app["spec"]["ignoreDifferences"]
    assert ignore["group"] == "nvidia.com" and ignore["kind"] == "DynamoGraphDeployment"
    assert ignore["jqPathExpressions"] == [".spec.components[].replicas"]
    assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"]
