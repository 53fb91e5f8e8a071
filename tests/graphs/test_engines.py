"""Engines that say what they are: which engine each worker really runs, the spec's model for
dynamo.vllm on a GPU host (and a clear reason when it cannot be had), and the label
"simulated with Dynamo's mocker" on the graph page, the pod table, the status API, the
playground and every benchmark number measured on the mocker."""

from __future__ import annotations

import html
import json
import re

import pytest

from benchmarks import reports
from benchmarks.models import BenchmarkRun
from benchmarks.schema import RunConfig, RunResults, Step
from benchmarks.services import _snapshot
from core.catalog import PoolFields, build_spec
from graphs.engines import (
    ENGINES,
    MOCKER_LABEL,
    Host,
    ModelUnavailable,
    cluster_engine,
    graph_simulation,
    local_engine,
    resolve_model,
    spec_model,
)
from graphs.models import Deployment
from graphs.runtimes.base import PodStatus
from graphs.runtimes.local.argv import build_process_env
from graphs.runtimes.local.operator import LocalOperator
from graphs.services import graph_create
from tests.metrics_fixtures import free_port, fresh_cache  # noqa: F401

GPU_HOST = Host(gpu=True, vllm=True)
CPU_HOST = Host(gpu=False, vllm=False)


def vllm_spec(name="real", model="Qwen/Qwen3-0.6B"):
    return build_spec(template="vllm-disagg", name=name, model=model, backend="vllm",
                      prefill=PoolFields(gpus=1, shared_memory="1Gi", hf_token_secret=""),
                      decode=PoolFields(gpus=1, shared_memory="1Gi", hf_token_secret=""))


def mocker_spec(name="sim"):
    return build_spec(template="mocker-disagg", name=name, model=f"{name}-model", backend="mocker",
                      prefill=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""),
                      decode=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""))


def workers(spec):
    return [s for s in spec.services if s.is_worker]


# ----------------------------------------------------------------- which engine runs


def test_a_vllm_graph_runs_dynamo_vllm_on_a_host_with_a_gpu_and_vllm():
    spec = vllm_spec()
    assert {local_engine(spec, s, GPU_HOST).engine for s in workers(spec)} == {"vllm"}
    assert graph_simulation(spec, "local", GPU_HOST) is None


@pytest.mark.parametrize(("host", "why"), [
    (CPU_HOST, "this host has no NVIDIA GPU, so vLLM is simulated"),
    (Host(gpu=True, vllm=False), "vLLM is not installed on this host, so vLLM is simulated"),
])
def test_a_vllm_graph_without_a_gpu_or_vllm_runs_the_mocker_and_says_why(host, why):
    spec = vllm_spec()
    choices = [local_engine(spec, s, host) for s in workers(spec)]
    assert {(c.engine, c.declared, c.simulated, c.reason) for c in choices} == {("mocker", "vllm", True, why)}
    simulation = graph_simulation(spec, "local", host)
    assert simulation.label == MOCKER_LABEL == "simulated with Dynamo's mocker"
    assert simulation.reason == why
    assert sorted(simulation.services) == sorted(s.name for s in workers(spec))


@pytest.mark.parametrize(("template", "backend", "name"), [("sglang-disagg", "sglang", "SGLang"),
                                                            ("trtllm-disagg", "trtllm", "TensorRT-LLM")])
def test_sglang_and_trtllm_graphs_are_simulated_locally_even_on_a_gpu_host(template, backend, name):
    spec = build_spec(template=template, name="g", model="Qwen/Qwen3-0.6B", backend=backend)
    simulation = graph_simulation(spec, "local", GPU_HOST)
    assert simulation is not None
    assert f"{name} is not run here" in simulation.reason


def test_the_frontend_is_never_labelled_simulated():
    spec = mocker_spec()
    frontend = spec.pools("frontend")[0]
    assert local_engine(spec, frontend, CPU_HOST).simulated is False
    assert frontend.name not in graph_simulation(spec, "local", CPU_HOST).services


def test_on_a_cluster_a_worker_runs_what_its_command_line_says():
    assert graph_simulation(vllm_spec(), "kubernetes") is None
    spec = mocker_spec()
    assert {cluster_engine(spec, s).engine for s in workers(spec)} == {"mocker"}
    assert graph_simulation(spec, "kubernetes").reason == "the graph's workers are Dynamo's mocker"


# ----------------------------------------------------------------- the real model


def test_the_model_is_the_workers_own_model_flag():
    spec = vllm_spec(model="Qwen/Qwen3-0.6B")
    assert {spec_model(spec, s) for s in workers(spec)} == {"Qwen/Qwen3-0.6B"}


def test_a_local_model_directory_is_used_as_it_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)).model == str(tmp_path)
    assert resolve_model(str(tmp_path)).offline is True


def test_a_missing_model_directory_is_explained(tmp_path):
    missing = f"the model directory {tmp_path}/nope does not exist on this host"
    with pytest.raises(ModelUnavailable, match=re.escape(missing)):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(ModelUnavailable, match=re.escape("has no config.json")):
        resolve_model(str(tmp_path))


def test_a_hub_id_in_the_hugging_face_cache_loads_offline(tmp_path):
    snapshot = tmp_path / "models--Qwen--Qwen3-0.6B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    source = resolve_model("Qwen/Qwen3-0.6B", hf_cache=tmp_path)
    assert (source.model, source.offline) == ("Qwen/Qwen3-0.6B", True)


def test_a_hub_id_not_in_the_cache_is_downloaded_only_when_allowed(tmp_path):
    with pytest.raises(ModelUnavailable) as refused:
        resolve_model("Qwen/Qwen3-0.6B", hf_cache=tmp_path)
    message = str(refused.value)
    assert f"not in this host's Hugging Face cache ({tmp_path})" in message
    assert "huggingface-cli download Qwen/Qwen3-0.6B" in message and "LOCAL_RUNTIME_MODEL_DOWNLOADS=1" in message
    source = resolve_model("Qwen/Qwen3-0.6B", hf_cache=tmp_path, downloads=True)
    assert (source.model, source.offline) == ("Qwen/Qwen3-0.6B", False)


def test_an_engine_allowed_to_download_loses_only_the_hub_offline_switches(tmp_path):
    offline = build_process_env(discovery_dir=tmp_path, base_env={})
    online = build_process_env(discovery_dir=tmp_path, base_env={}, hub_offline=False)
    gone = {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"}
    assert gone <= set(offline) and not gone & set(online)
    assert {k: v for k, v in offline.items() if k not in gone} == online


# ------------------------------------------------------- the local operator on a GPU host


@pytest.fixture
def gpu_operator(tmp_path, settings):
    settings.LOCAL_RUNTIME_DIR = tmp_path
    operator = LocalOperator(runtime_dir=tmp_path, port_min=25000, port_max=25999)
    operator.host = GPU_HOST  # what this host would be with a GPU and vLLM: the plan only, nothing starts
    yield operator
    operator.shutdown()


def deploy(spec, *, state="ready", endpoint=""):
    graph = graph_create(spec=spec)
    return Deployment.objects.create(graph=graph, revision=graph.head, runtime="local", active=True, state=state,
                                     endpoint=endpoint)


@pytest.mark.django_db
def test_on_a_gpu_host_dynamo_vllm_gets_the_specs_model_not_the_tokenizer_directory(gpu_operator, tmp_path):
    model_dir = tmp_path / "weights" / "qwen"
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text("{}")
    dep = deploy(vllm_spec(model=str(model_dir)))
    planned = [p for p in gpu_operator.plan(dep) if p.role != "frontend"]
    assert planned and all(p.argv[2] == "dynamo.vllm" for p in planned)
    for p in planned:
        assert p.argv[p.argv.index("--model") + 1] == str(model_dir)
        assert p.env["HF_HUB_OFFLINE"] == "1"


@pytest.mark.django_db
def test_on_a_gpu_host_a_model_that_cannot_be_had_fails_the_graph_with_the_reason(gpu_operator):
    dep = deploy(vllm_spec(model="/models/not-here"), state="progressing")
    gpu_operator.reconcile_once()
    dep.refresh_from_db()
    assert dep.state == "failed"
    assert "cannot start dynamo.vllm: the model directory /models/not-here does not exist on this host" in dep.message
    assert gpu_operator.supervisor.names() == []


# ------------------------------------------------------------------ what screens say


def write_pods(dep, tmp_path, settings):
    settings.LOCAL_RUNTIME_DIR = tmp_path
    operator = LocalOperator(runtime_dir=tmp_path, port_min=25000, port_max=25999)
    spec = dep.revision.graph_spec
    pods = [PodStatus(name=f"{dep.graph.name}-{s.name.lower()}-0", service=s.name, role=s.role, phase="Running",
                      ready=True, port=25000 + i) for i, s in enumerate(spec.services)]
    operator.write_status(dep, pods, "", [])


@pytest.mark.django_db
def test_the_graph_page_and_pod_table_say_the_workers_are_simulated(client_for, tmp_path, settings):
    dep = deploy(mocker_spec("simpage"))
    write_pods(dep, tmp_path, settings)
    page = html.unescape(client_for("viewer").get("/graphs/simpage/").content.decode())
    assert "Workers simulated with Dynamo's mocker</strong>: the graph's workers are Dynamo's mocker" in page
    rows = [line for line in page.splitlines() if 'class="sim-tag"' in line]
    assert len(rows) == len(workers(dep.revision.graph_spec))  # one per worker pod, none for the frontend


@pytest.mark.django_db
def test_a_vllm_graph_on_a_host_without_a_gpu_says_so_on_its_page(client_for, tmp_path, settings, monkeypatch):
    monkeypatch.setattr(Host, "detect", classmethod(lambda cls: CPU_HOST))
    dep = deploy(vllm_spec("nogpu"))
    write_pods(dep, tmp_path, settings)
    page = html.unescape(client_for("viewer").get("/graphs/nogpu/").content.decode())
    assert "Workers simulated with Dynamo's mocker</strong>: this host has no NVIDIA GPU, so vLLM is simulated" in page


@pytest.mark.django_db
def test_a_real_engine_gets_no_label(client_for, tmp_path, settings, monkeypatch):
    monkeypatch.setattr(Host, "detect", classmethod(lambda cls: GPU_HOST))
    dep = deploy(vllm_spec("realgpu"))
    write_pods(dep, tmp_path, settings)
    page = html.unescape(client_for("viewer").get("/graphs/realgpu/").content.decode())
    assert "simulated with Dynamo's mocker" not in page
    assert client_for("viewer").get("/api/graphs/realgpu/status/").json()["simulation"] is None


@pytest.mark.django_db
def test_the_status_api_names_the_simulated_services_and_why(api_for, tmp_path, settings):
    dep = deploy(mocker_spec("simapi"))
    write_pods(dep, tmp_path, settings)
    body = api_for("viewer").get("/api/graphs/simapi/status/").json()
    assert body["simulation"] == {"label": MOCKER_LABEL, "reason": "the graph's workers are Dynamo's mocker",
                                  "services": [s.name for s in workers(dep.revision.graph_spec)],
                                  "note": ENGINES["mocker"].note}
    assert "mocker's timing model" in body["simulation"]["note"]


@pytest.mark.django_db
def test_the_playground_lists_a_simulated_graph_with_its_label(client_for):
    deploy(mocker_spec("simchat"), endpoint="http://127.0.0.1:25001")
    page = html.unescape(client_for("operator").get("/playground/").content.decode())
    assert "simchat — simchat-model (simulated with Dynamo's mocker)</option>" in page
    assert '''data-simulated="simulated with Dynamo's mocker: the graph's workers are Dynamo's mocker"''' in page


# ------------------------------------------------------------------- benchmark numbers


@pytest.mark.django_db
def test_a_benchmark_of_a_simulated_graph_records_the_label_with_its_config():
    config, _model = _snapshot(deploy(mocker_spec("simbench")))
    assert config.simulated == f"{MOCKER_LABEL}: the graph's workers are Dynamo's mocker"


def _run(simulated: str, pk: int) -> BenchmarkRun:
    from graphs.models import Graph

    step = Step(index=0, concurrency=4, artifact="c4", ttft=dict(p90=120.0), output_token_throughput=900.0)
    return BenchmarkRun(pk=pk, graph=Graph(name="g"), profile="streaming-chat",
                        config=RunConfig(shape="p1d1", gpus=2, simulated=simulated).model_dump(),
                        results=RunResults(steps=[step]).model_dump())


def test_every_derived_number_of_a_simulated_run_carries_the_label_in_tables_csv_and_charts():
    runs = [_run(f"{MOCKER_LABEL}: the graph's workers are Dynamo's mocker", 1), _run("", 2)]
    assert [r["engine"] for r in reports.rows(runs)] == [MOCKER_LABEL, "real engine"]
    csv_lines = reports.to_csv(runs).splitlines()
    header = csv_lines[0].split(",")
    assert header[3] == "Engine"
    assert [line.split(",")[3] for line in csv_lines[1:]] == [MOCKER_LABEL, "real engine"]
    assert [s["label"].endswith("· simulated") for s in reports.series(runs)] == [True, False]
    assert json.dumps(reports.series(runs))  # chart data stays JSON


# ------------------------------------------------------------------- latency charts


@pytest.fixture
def no_prometheus(settings, fresh_cache):  # noqa: F811
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"


@pytest.mark.django_db
def test_the_metrics_panel_says_its_numbers_come_from_the_mocker(client_for):
    deploy(mocker_spec("simpanel"))
    page = html.unescape(client_for("viewer").get("/metrics/graphs/simpanel/panel/").content.decode())
    assert ("Every number in this panel comes from workers simulated with Dynamo's mocker "
            "(the graph's workers are Dynamo's mocker)") in page


@pytest.mark.django_db
def test_chart_data_and_summaries_carry_the_simulation_even_without_prometheus(api_for, no_prometheus):
    deploy(mocker_spec("simchart"))
    api = api_for("viewer")
    chart = api.get("/api/metrics/graphs/simchart/chart/").json()
    assert chart["state"] == "unreachable"
    assert chart["simulation"]["label"] == MOCKER_LABEL
    assert api.get("/api/metrics/graphs/simchart/").json()["simulation"]["label"] == MOCKER_LABEL


def finished_run(dep) -> BenchmarkRun:
    """A succeeded run of ``dep``'s graph, its config snapshotted as a real run's is."""
    from django.utils import timezone

    from benchmarks.models import RunState
    from benchmarks.profiles import resolve

    config, _model = _snapshot(dep)
    stats = {"unit": "ms", "p50": 80.0, "p90": 100.0, "p99": 120.0}
    return BenchmarkRun.objects.create(
        graph=dep.graph, revision=dep.revision, profile="custom", state=RunState.SUCCEEDED, progress=100,
        params=resolve("custom", {"concurrency": 4, "request_count": 40}).model_dump(mode="json"),
        config=config.model_dump(), finished_at=timezone.now(),
        results={"steps": [{"index": 0, "concurrency": 4, "artifact": "01-c4", "ttft": stats, "itl": stats,
                            "output_token_throughput": 900.0, "completed": 40}]})


@pytest.mark.django_db
def test_a_recommendation_from_simulated_runs_says_so_first():
    from benchmarks.recommendations import recommendation_create

    dep = deploy(mocker_spec("simrec"))
    run = finished_run(dep)
    rec = recommendation_create(graph=dep.graph, ttft_ms=500.0)
    assert rec.reasons[0].startswith(f"Evidence #{run.pk} was {MOCKER_LABEL}, not a real engine")


@pytest.mark.django_db
def test_every_benchmark_page_and_export_of_a_simulated_run_carries_the_label(client_for):
    run = finished_run(deploy(mocker_spec("simruns")))
    viewer = client_for("viewer")
    for url in ("/benchmarks/", f"/benchmarks/runs/{run.pk}/", f"/benchmarks/compare/?runs={run.pk}",
                f"/benchmarks/runs/{run.pk}/report/?type=html", "/benchmarks/graphs/simruns/sizing/"):
        page = html.unescape(viewer.get(url).content.decode())
        assert "simulated with Dynamo's mocker" in page, url
    assert "Every number of this run was measured on workers simulated with Dynamo's mocker" in html.unescape(
        viewer.get(f"/benchmarks/runs/{run.pk}/").content.decode())
    csv_text = viewer.get(f"/benchmarks/runs/{run.pk}/report/?type=csv").content.decode()
    assert csv_text.splitlines()[1].split(",")[3] == MOCKER_LABEL
