"""vLLM on CPU, what is decided before anything starts and what a failing engine is called: a
graph this host cannot hold is refused naming the numbers (cores, memory), each worker gets a
core of its own, what the runtime adds to run on a CPU is shown, the family of the random model
follows the graph's model, and an engine's own log lines become named findings with their fix
(one of them from a real dynamo.vllm that refuses to start)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from core.catalog import build_spec
from core.dgd.parse import import_manifest
from core.errors import OperationRefused
from core.specio import load_yaml
from graphs import operations, services
from graphs.diagnosis import diagnose
from graphs.engines import ENGINES, Host, graph_simulation, local_engine
from graphs.models import Deployment
from graphs.runtimes.base import PodStatus
from graphs.runtimes.local import vllm_cpu
from graphs.runtimes.local.argv import build_process_argv, extra_engine_args
from graphs.runtimes.local.engine_env import engine_python, process_env
from graphs.runtimes.local.observe import engine_facts, log_signature, nixl_transfers
from graphs.runtimes.local.tinymodel import family_of

EXAMPLES = Path(__file__).resolve().parents[3] / "graphs" / "examples"
CPU_HOST = Host(gpu=False, vllm=False, wants_vllm_cpu=True, vllm_cpu="/engine/bin/python")


def test_a_vllm_graph_on_a_cpu_host_with_the_engine_runs_vllm_cpu_and_is_labelled():
    spec = build_spec(template="vllm-disagg", name="lab", model="Qwen/Qwen3-0.6B", backend="vllm")
    choices = [local_engine(spec, s, CPU_HOST) for s in spec.services if s.is_worker]
    assert {(c.engine, c.label) for c in choices} == {("vllm-cpu", "vLLM on CPU, random weights")}
    assert ENGINES["vllm-cpu"].kind == "vllm" and ENGINES["vllm-cpu"].on_cpu
    simulation = graph_simulation(spec, "local", CPU_HOST)
    assert simulation.label == "vLLM on CPU, random weights"
    assert "Qwen/Qwen3-0.6B is not on this host" in simulation.reason
    assert "busy-polls" in simulation.note  # a disaggregated pair idles at about 1.5 cores
    # Asked for but not built: the mocker, and the reason says how to build it.
    unbuilt = Host(gpu=False, vllm=False, wants_vllm_cpu=True)
    assert "make engine-vllm-cpu" in local_engine(spec, spec.services[1], unbuilt).reason
    # Not asked for: today's behaviour, the mocker.
    assert local_engine(spec, spec.services[1], Host(gpu=False, vllm=False)).engine == "mocker"


@pytest.mark.parametrize(("model", "architecture"), [
    ("Qwen/Qwen3-0.6B", "Qwen3ForCausalLM"), ("Qwen/Qwen2.5-7B-Instruct", "Qwen2ForCausalLM"),
    ("mistralai/Mistral-7B-v0.3", "MistralForCausalLM"), ("meta-llama/Llama-3.1-8B", "LlamaForCausalLM"),
    ("my-own-model", "LlamaForCausalLM"),
])
def test_the_random_model_is_of_the_graphs_architecture_family(model, architecture):
    assert family_of(model)["architectures"] == [architecture]


def test_each_worker_gets_a_core_of_its_own_and_keeps_it():
    first = vllm_cpu.assign_cores(["a", "b"], held={}, taken={}, cores=[0, 1])
    assert sorted(first.values()) == [0, 1]
    again = vllm_cpu.assign_cores(["b", "a"], held=first, taken={}, cores=[0, 1])
    assert again == first
    with pytest.raises(vllm_cpu.CpuShortage, match=r"this host has 2 \(0, 1\); big needs 2 and other graphs' "
                                                   r"vLLM workers hold 1"):
        vllm_cpu.assign_cores(["x", "y"], held={}, taken={"other": 0}, cores=[0, 1], graph="big")


def test_memory_is_checked_before_workers_start_naming_the_numbers():
    assert vllm_cpu.memory_problem(2, available=8 * 10**9) == ""
    problem = vllm_cpu.memory_problem(3, available=5 * 10**9, graph="big")
    assert problem.startswith("not enough memory for vLLM on CPU: big starts 3 vLLM workers of about 3.4 GB each "
                              "(10.2 GB) and this host has 5.0 GB available (MemAvailable)")


def test_what_a_decode_worker_gets_to_run_on_a_cpu_is_added_and_shown(tmp_path):
    added = vllm_cpu.worker_additions(mode="decode", core=1, extra=["--max-model-len", "1024"], side_channel_port=27001,
                                      kv_events=tmp_path / "kv.sock", cache_root=tmp_path)
    assert added.args[:1] == ["--enforce-eager"] and "--max-model-len" not in added.args  # the spec's own stays
    assert '"kv_role":"kv_consumer"' in added.args[added.args.index("--kv-transfer-config") + 1]
    assert f'"endpoint":"ipc://{tmp_path}/kv.sock"' in added.args[added.args.index("--kv-events-config") + 1]
    assert added.env["VLLM_CPU_OMP_THREADS_BIND"] == "1" and added.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "27001"
    assert added.env["UCX_NET_DEVICES"] == "lo" and added.env["VLLM_HOST_IP"] == "127.0.0.1"
    assert added.shown().startswith("added to run on this CPU: --enforce-eager --kv-transfer-config")
    aggregated = vllm_cpu.worker_additions(mode="agg", core=0, extra=[], side_channel_port=None, kv_events=None,
                                           cache_root=tmp_path)
    assert "--kv-transfer-config" not in aggregated.args and "VLLM_NIXL_SIDE_CHANNEL_PORT" not in aggregated.env


@pytest.mark.django_db
def test_a_graph_this_host_cannot_hold_is_refused_before_anything_starts(settings):
    """Dynamo's disaggregated recipe (2 prefill + 2 decode) needs 4 cores of its own on a 2-core host."""
    settings.LOCAL_RUNTIME_ENGINE = "vllm-cpu"
    if engine_python("vllm-cpu") is None:
        pytest.fail("the vLLM-on-CPU engine environment is not built: run `make engine-vllm-cpu`")
    text = (EXAMPLES / "vllm-disagg.yaml").read_text()
    graph, _rev, _report = services.graph_import(obj=load_yaml(text, max_bytes=1 << 20), text=text, message="t")
    cores = len(vllm_cpu.host_cores())
    with pytest.raises(OperationRefused, match=rf"not enough CPU cores for vLLM on CPU: each vLLM worker runs on a "
                                               rf"core of its own and this host has {cores}; vllm-disagg needs 4"):
        operations.graph_apply(graph=graph, via="api")
    assert not Deployment.objects.filter(graph=graph, active=True).exists()


@pytest.mark.parametrize(("line", "reason", "title"), [
    ("WARNING 12-04 [core.py:512] Got kv_transfer_params, but no KVConnector found. Disabling KVTransfer for this "
     "request.", "NoKVConnector", "never receives a KV transfer"),
    ("ValueError: Available memory on node 0 (1.2/23.4 GiB) on kv cache allocation is less than requested memory "
     "for kv (2.0 GiB).", "NotEnoughMemory", "cannot get its memory"),
    ("WARNING [ompmultiprocessing.py:275] Selected CPU core number (2) should be greater than reserved CPU core "
     "number (2)", "NoCoreOfItsOwn", "cannot get a CPU core of its own"),
])
def test_an_engines_own_words_become_a_named_finding_with_its_fix(line, reason, title):
    pod = PodStatus(name="g-decode-0", service="decode", role="decode", phase="Running", ready=True,
                    nixl_backend="UCX")
    log = f"--- old life\n{line}\n--- 2026 supervisor: starting g-decode-0\nfine\n{line}\n"
    engine_facts(pod, log_tail=log, metrics_text="", shm_in_use=0, added="added to run on this CPU: x",
                 progress_shown=False)
    assert pod.reason == reason
    findings = [d for d in diagnose(_Deployment(), [pod]) if title in d.title]
    assert findings and findings[0].fix
    # A line from a previous life of the process is not held against this one.
    clean = PodStatus(name="g-decode-0", service="decode", role="decode", phase="Running", ready=True)
    engine_facts(clean, log_tail=f"{line}\n--- 2026 supervisor: starting g-decode-0\nfine\n", metrics_text="",
                 shm_in_use=None, added="", progress_shown=False)
    assert clean.reason == ""


def test_nixl_transfers_are_read_from_the_workers_own_counter():
    text = ('vllm:nixl_xfer_time_seconds_count{dynamo_component="backend",engine="0"} 3.0\n'
            'vllm:nixl_xfer_time_seconds_sum{dynamo_component="backend",engine="0"} 0.012\n')
    assert nixl_transfers(text) == (3, pytest.approx(4.0))
    assert nixl_transfers("vllm:num_requests_running 0\n") is None


@pytest.mark.dynamo
@pytest.mark.vllm_cpu
def test_a_prefill_worker_without_its_kv_transfer_configuration_is_named_as_such(tmp_path):
    """The real dynamo.vllm 1.6.1 refuses it; its log line is what the runtime reads."""
    python = engine_python("vllm-cpu")
    if python is None:
        pytest.fail("the vLLM-on-CPU engine environment is not built: run `make engine-vllm-cpu`")
    started = time.monotonic()
    result = subprocess.run([str(python), "-m", "dynamo.vllm", "--model", str(tmp_path), "--disaggregation-mode",
                             "prefill", "--discovery-backend", "file", "--request-plane", "tcp"],
                            capture_output=True, text=True, timeout=180,
                            env=process_env({"PATH": "/usr/bin:/bin", "DYN_FILE_KV": str(tmp_path / "kv"),
                                             "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)}))
    assert result.returncode != 0
    assert log_signature(result.stdout + result.stderr) == "NoKVTransferConfig", result.stderr[-2000:]
    pod = PodStatus(name="p-0", service="prefill", role="prefill", phase="CrashLoopBackOff", ready=False,
                    reason="CrashLoopBackOff", restarts=3)
    engine_facts(pod, log_tail=result.stderr, metrics_text="", shm_in_use=None, added="", progress_shown=False)
    finding = next(d for d in diagnose(_Deployment(), [pod]) if "without its KV-transfer configuration" in d.title)
    assert "kv_producer" in finding.fix
    assert time.monotonic() - started < 120


class _Deployment:
    """What diagnose() reads of a deployment that is running."""

    runtime = "local"
    state = "ready"
    message = "2/2 pods ready"
    revision = None
    cluster_name = ""


def test_a_graph_the_operator_cannot_place_is_diagnosed_with_the_numbers():
    deployment = _Deployment()
    deployment.state = "failed"
    deployment.message = vllm_cpu.memory_problem(2, available=3 * 10**9, graph="big")
    finding = next(d for d in diagnose(deployment, []) if d.title == "Not enough memory on this host for vLLM on CPU")
    assert "6.8 GB" in finding.detail and "3.0 GB available" in finding.detail and "3.4 GB" in finding.fix


def test_the_engine_environment_is_built_aside_renamed_into_place_and_then_reused(tmp_path, monkeypatch):
    """The build machinery itself, on a lock of no packages (no network): a temporary folder renamed
    into place with its stamp; a second build is a no-op; a failing build leaves nothing behind."""
    from graphs.runtimes.local import engine_env as ee

    lock = tmp_path / "tiny.txt"
    lock.write_text("# nothing to install\n")
    monkeypatch.setenv("DYNAMO_CP_ENGINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(ee.LOCK_FILES, "vllm-cpu", lock)
    # The check runs with the workers' PYTHONPATH: our sitecustomize is the one Python imports.
    monkeypatch.setattr(ee, "IMPORT_CHECK", "import sitecustomize; assert 'vllm_cpu_site' in sitecustomize.__file__")
    log = tmp_path / "build.log"
    with open(log, "w") as out:
        built = ee.build("vllm-cpu", log=out)
        assert built.complete and ee.engine_python("vllm-cpu") == built.python
        assert sorted(p.name for p in built.path.parent.iterdir()) == [built.path.name, built.path.name + ".lock"]
        stamp = (built.path / ".complete").stat().st_mtime_ns
        assert ee.build("vllm-cpu", log=out) == built
        assert (built.path / ".complete").stat().st_mtime_ns == stamp  # reused, not rebuilt
        # Another lock is another environment; a failing one raises and leaves no folder.
        lock.write_text("./no-such-wheel-1.0-py3-none-any.whl\n")
        with pytest.raises(ee.EngineEnvError, match="failed with status"):
            ee.build("vllm-cpu", log=out)
    assert "(cached)" in log.read_text()
    assert ee.engine_python("vllm-cpu") is None
    assert sorted(p.name for p in built.path.parent.iterdir() if not p.name.endswith(".lock")) == [built.path.name]


def test_a_prefill_worker_written_for_an_older_release_runs_with_the_flag_of_this_one():
    """Dynamo's recipe file says --is-prefill-worker (removed in 1.4.0); the local runtime runs 1.6.1's
    --disaggregation-mode prefill, from the worker's role, with the NIXL producer config."""
    text = (EXAMPLES / "vllm-disagg.yaml").read_text()
    spec = import_manifest(load_yaml(text, max_bytes=1 << 20))
    prefill = next(s for s in spec.services if s.role == "prefill")
    extra, ignored = extra_engine_args(prefill, "vllm")
    argv = build_process_argv(kind="vllm", python="py", model_path="/m", model_name="m", mode="prefill",
                              extra_args=extra)
    assert "--is-prefill-worker" not in argv and ignored == []
    assert argv[argv.index("--disaggregation-mode") + 1] == "prefill"
    assert '"kv_role":"kv_producer"' in argv[argv.index("--kv-transfer-config") + 1]


@pytest.mark.django_db
def test_up_with_the_vllm_cpu_engine_unbuilt_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNAMO_CP_ENGINE_CACHE", str(tmp_path / "empty"))
    with pytest.raises(CommandError, match=r"engine environment is not built .*run `make engine-vllm-cpu`"):
        call_command("up", engine="vllm-cpu", no_example=True)
