"""Planner settings: every config the product writes is one Dynamo 1.6.1's real PlannerConfig
accepts, and every config it refuses is one PlannerConfig refuses too (checked against the class
in the installed wheel, tests/planner_config_check.py). Refusals reach users as 4xx with the
setting named; the rendered --config is the same on both runtimes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.catalog import PoolFields, build_spec
from core.dgd.render import render
from core.errors import ManifestError
from core.planner_config import (
    PlannerSettings,
    PlannerSettingsError,
    local_config,
    planner_args,
    planner_settings,
    settings_from_config,
)
from graphs import services

CHECK = (Path(__file__).parents[1] / "planner_config_check.py")

# (config, accepted by 1.6.1?)
CASES = [
    ({}, True),
    ({"optimization_target": "sla", "ttft_ms": 200, "itl_ms": 20, "throughput_adjustment_interval_seconds": 60}, True),
    ({"optimization_target": "throughput", "load_adjustment_interval_seconds": 10, "min_endpoint": 0}, True),
    ({"optimization_target": "latency", "max_gpu_budget": -1}, True),
    ({"optimization_target": "sla", "ttft_ms": 0}, False),
    ({"optimization_target": "sla", "ttft": -5}, False),
    ({"optimization_target": "load"}, False),
    ({"optimization_target": "load", "prefill_scale_up_queue_tokens": 100, "prefill_scale_down_queue_tokens": 200,
      "decode_scale_up_kv_rate": 0.9, "decode_scale_down_kv_rate": 0.5}, False),
    ({"optimization_target": "load", "prefill_scale_up_queue_tokens": 2000, "prefill_scale_down_queue_tokens": 200,
      "decode_scale_up_kv_rate": 0.9, "decode_scale_down_kv_rate": 0.5}, True),
    ({"min_endpoint": -1}, False),
    ({"optimization_target": "fastest"}, False),
    ({"optimization_target": "sla", "throughput_adjustment_interval_seconds": 0}, False),
    ({"optimization_target": "sla", "enable_load_scaling": True, "load_adjustment_interval_seconds": 60,
      "throughput_adjustment_interval_seconds": 60}, False),
    ({"optimization_target": "sla", "enable_load_scaling": True, "load_adjustment_interval_seconds": 5,
      "throughput_adjustment_interval_seconds": 60}, True),
    ({"load_adjustment_interval_seconds": 0}, False),
]


def _real_verdicts(configs: list[dict]) -> list[str]:
    done = subprocess.run([sys.executable, str(CHECK)], input=json.dumps(configs), capture_output=True, text=True,
                          timeout=120, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def _ours(config: dict) -> bool:
    try:
        settings_from_config(config)
    except PlannerSettingsError:
        return False
    return True


def test_the_rules_match_what_the_real_planner_config_of_1_6_1_accepts():
    real = _real_verdicts([c for c, _ in CASES])
    for (config, expected), verdict in zip(CASES, real, strict=True):
        assert (verdict == "ok") is expected, (config, verdict)
        assert _ours(config) is expected, (config, verdict)


def test_what_the_product_renders_is_accepted_by_the_real_planner_config():
    settings = [PlannerSettings(), PlannerSettings(optimization_target="sla", ttft_ms=150, itl_ms=12,
                                                   adjustment_interval_seconds=90, min_replicas=2, max_gpu_budget=16),
                PlannerSettings(optimization_target="load", prefill_scale_up_queue_tokens=4000,
                                prefill_scale_down_queue_tokens=500, decode_scale_up_kv_rate=0.8,
                                decode_scale_down_kv_rate=0.3, adjustment_interval_seconds=10)]
    configs = []
    for s in settings:
        configs.append(json.loads(planner_args(s, mode="disagg")[1]))
        configs.append(json.loads(planner_args(s, mode="agg")[1]))
        configs.append(local_config({}, s, mode="disagg", backend="mocker", model_name="m",
                                    prometheus_url="http://127.0.0.1:9090", metrics_port=24001))
    assert _real_verdicts(configs) == ["ok"] * len(configs)
    # And reading a rendered config back gives the same settings.
    for s in settings:
        assert settings_from_config(json.loads(planner_args(s, mode="disagg")[1])) == s


def _spec(**planner):
    return build_spec(template="mocker-disagg", name="p", backend="mocker", prefill=PoolFields(gpus=0),
                      decode=PoolFields(gpus=0), planner=PlannerSettings(**planner))


def test_the_planner_config_renders_identically_for_kubernetes_in_both_api_versions():
    spec = _spec(optimization_target="sla", ttft_ms=300, itl_ms=25, adjustment_interval_seconds=60)
    beta = next(c for c in render(spec, "nvidia.com/v1beta1")["spec"]["components"] if c["type"] == "planner")
    alpha = render(spec, "nvidia.com/v1alpha1")["spec"]["services"]["Planner"]
    args = beta["podTemplate"]["spec"]["containers"][0]["args"]
    assert args[0] == "--config"
    assert json.loads(args[1]) == {"optimization_target": "sla", "ttft_ms": 300.0, "itl_ms": 25.0, "mode": "disagg",
                                   "throughput_adjustment_interval_seconds": 60, "min_endpoint": 1,
                                   "max_gpu_budget": 8}
    assert alpha["extraPodSpec"]["mainContainer"]["args"] == args
    service = spec.service("Planner")
    assert planner_settings(service.command, service.args).ttft_ms == 300


@pytest.mark.django_db
def test_a_config_the_planner_would_refuse_is_not_saved_and_names_the_setting():
    spec = _spec()
    planner = spec.service("Planner")
    planner.args = ["--config", json.dumps({"optimization_target": "sla", "ttft_ms": 0})]
    with pytest.raises(ManifestError) as err:
        services.graph_create(spec=spec)
    finding = err.value.findings[0]
    assert finding.code == "planner_config_invalid"
    assert finding.path == "spec.components[3].podTemplate.spec.containers[main].args"
    assert "ttft_ms" in finding.message


@pytest.mark.django_db
def test_the_api_takes_planner_settings_and_refuses_bad_ones(api_for):
    api = api_for("operator")
    bad = api.post("/api/graphs/from-template/", {
        "template": "mocker-disagg", "name": "pl", "backend": "mocker",
        "planner": {"optimization_target": "load", "prefill_scale_up_queue_tokens": 10,
                    "prefill_scale_down_queue_tokens": 20, "decode_scale_up_kv_rate": 0.9,
                    "decode_scale_down_kv_rate": 0.1}}, format="json")
    assert bad.status_code == 422  # thresholds that cross: a rule across fields
    assert "prefill_scale_up_queue_tokens" in json.dumps(bad.json())
    missing = api.post("/api/graphs/from-template/", {"template": "mocker-disagg", "name": "pl",
                                                      "planner": {"ttft_ms": -1}}, format="json")
    assert missing.status_code == 400 and "ttft_ms" in missing.json()["planner"]
    ok = api.post("/api/graphs/from-template/", {
        "template": "mocker-disagg", "name": "pl", "backend": "mocker",
        "planner": {"optimization_target": "sla", "ttft_ms": 250, "itl_ms": 30}}, format="json")
    assert ok.status_code == 201, ok.json()
    body = api.get("/api/graphs/pl/render/").json()
    planner = next(c for c in body["manifest"]["spec"]["components"] if c["type"] == "planner")
    assert json.loads(planner["podTemplate"]["spec"]["containers"][0]["args"][1])["ttft_ms"] == 250


@pytest.mark.django_db
def test_the_graph_form_adds_the_planner_with_its_settings(client_for):
    client = client_for("operator")
    form = {"template": "mocker-disagg", "name": "formed", "backend": "mocker", "dynamo_version": "1.6.1",
            "model": "m", "action": "create", "planner_enabled": "on", "planner_optimization_target": "sla",
            "planner_ttft_ms": "180", "planner_itl_ms": "15", "planner_adjustment_interval_seconds": "45",
            "planner_min_replicas": "1", "planner_max_gpu_budget": "-1"}
    for pool in ("prefill", "decode"):
        form.update({f"{pool}_replicas": "1", f"{pool}_gpus": "0", f"{pool}_shared_memory": "1Gi",
                     f"{pool}_hf_token_secret": ""})
    response = client.post("/graphs/new/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    from graphs.models import Graph

    spec = Graph.objects.get(name="formed").head.graph_spec
    planner = spec.service("Planner")
    got = planner_settings(planner.command, planner.args)
    assert (got.optimization_target, got.ttft_ms, got.itl_ms, got.adjustment_interval_seconds,
            got.max_gpu_budget) == ("sla", 180, 15, 45, -1)
    page = client.get("/graphs/new/?template=mocker-disagg").content.decode()
    assert "Optimization target" in page and "GPU budget" in page


@pytest.mark.django_db
def test_the_local_runtime_starts_the_real_planner_with_a_config_it_accepts(tmp_path):
    from graphs.models import Deployment
    from graphs.runtimes.local.planner_executor import PlannerExecutor

    graph = services.graph_create(spec=_spec(optimization_target="sla", ttft_ms=120, itl_ms=9,
                                             adjustment_interval_seconds=20))
    dep = Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True)
    ports = iter(range(24500, 24600))
    executor = PlannerExecutor(root=tmp_path, python=sys.executable, port=lambda key: next(ports),
                               release=lambda key: None)
    argv = executor.planner_argv(dep, graph.head.graph_spec.service("Planner"), model_name="m", metrics_port=24999)
    assert argv[1:4] == ["-m", "dynamo.planner", "--config"]
    config = json.loads(argv[4])
    assert (config["environment"], config["backend"], config["mode"], config["ttft_ms"],
            config["metric_reporting_prometheus_port"]) == ("virtual", "mocker", "disagg", 120.0, 24999)
    assert _real_verdicts([config]) == ["ok"]
