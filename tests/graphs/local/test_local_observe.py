"""What a local worker really has: /dev/shm from the worker process's own mount namespace,
GPUs through NVML (and "no GPU" where there is none, as on this host), and each GPU worker's
own GPUs, refused when the host has too few. The NVML readings and the assignment were also
run on an H200 against a PyTorch process: bench/gpu_probe.py checks what that run saw
(bench/results/gpu-nvml-h200.json; `python3 bench/gpu_probe.py --check FILE` re-checks a file)."""

from __future__ import annotations

import os
import subprocess

import pytest

from core.catalog import PoolFields, build_spec
from graphs import services
from graphs.diagnosis import diagnose
from graphs.engines import Host
from graphs.models import Deployment, Pod
from graphs.runtimes.local.gpus import GpuHost, GpuShortage, assign_gpus, gpu_env, probe, usage_of
from graphs.runtimes.local.observe import process_shm
from graphs.runtimes.local.operator import LocalOperator
from graphs.runtimes.local.tinymodel import ensure_model_dir
from graphs.runtimes.processes import wait_until

MI, GI = 2**20, 2**30


@pytest.fixture
def own_shm():
    """A process in a mount namespace of its own, with a 64 MiB tmpfs at /dev/shm: what a
    container without a memory-backed /dev/shm volume gets."""
    proc = subprocess.Popen(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                             "mount -t tmpfs -o size=64m tmpfs /dev/shm && exec sleep 60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    yield proc
    proc.kill()
    proc.wait()


def _host_shm() -> int:
    st = os.statvfs("/dev/shm")
    return st.f_frsize * st.f_blocks


def test_dev_shm_is_read_from_the_workers_own_mount_namespace(own_shm):
    reading = wait_until(lambda: (r := process_shm(own_shm.pid)).bytes == 64 * MI and r, timeout=10,
                         what=f"the tmpfs in pid {own_shm.pid}'s namespace ({own_shm.stderr})")
    assert reading.source == "process mount namespace"
    assert _host_shm() != 64 * MI  # not this host's /dev/shm
    assert process_shm(os.getpid()).bytes == _host_shm()


def test_a_process_that_is_gone_has_no_reading():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert process_shm(proc.pid).bytes is None


@pytest.mark.django_db
def test_a_local_worker_below_its_specs_dev_shm_is_diagnosed_with_the_local_fix(own_shm):
    reading = wait_until(lambda: (r := process_shm(own_shm.pid)).bytes == 64 * MI and r, timeout=10,
                         what="the tmpfs")
    spec = build_spec(template="mocker-disagg", name="shm", prefill=PoolFields(gpus=0, shared_memory="16Gi"),
                      decode=PoolFields(gpus=0, shared_memory="16Gi"))
    graph = services.graph_create(spec=spec)
    dep = Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready")
    Pod.objects.create(deployment=dep, name="shm-decode-0", service="decode", role="decode", phase="Running",
                       ready=True, shm_bytes=reading.bytes, shm_source=reading.source)
    [trap] = [d for d in diagnose(dep, list(Pod.objects.filter(deployment=dep))) if "/dev/shm" in d.title]
    assert trap.severity == "error" and trap.title == "shm-decode-0 runs on the 64 MB default /dev/shm"
    assert "asks for 16Gi of /dev/shm; the worker sees 64Mi (process mount namespace)" in trap.detail
    assert "--shm-size" in trap.fix


# ------------------------------------------------------------------ GPUs


def test_without_the_nvidia_driver_the_probe_says_no_gpu():
    host = probe()  # this host has no NVIDIA driver: libnvidia-ml.so cannot be loaded
    assert host.count == 0 and host.names == []
    assert host.reason.startswith("no GPU: ") and "NVML" in host.reason
    usage = usage_of([os.getpid()])
    assert (usage.memory_bytes, usage.util_percent, usage.devices) == (None, None, [])


def test_each_gpu_worker_gets_gpus_of_its_own():
    assert assign_gpus([("a", 1), ("b", 2)], 4) == {"a": [0], "b": [1, 2]}
    # A running worker keeps its GPUs; a new one takes what is free around it.
    assert assign_gpus([("b", 2), ("c", 1)], 4, held={"b": [2, 3]}) == {"b": [2, 3], "c": [0]}
    # Other graphs' workers are never given away.
    assert assign_gpus([("x", 1)], 2, taken={"a": [0]}) == {"x": [1]}
    assert gpu_env([1, 2]) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,2"}


def test_more_gpu_workers_than_gpus_are_refused_all_or_nothing():
    with pytest.raises(GpuShortage, match=r"ask for 3 GPU\(s\), the host has 2: lower the replicas"):
        assign_gpus([("a", 1), ("b", 1), ("c", 1)], 2)
    with pytest.raises(GpuShortage, match="1 are used by other graphs"):
        assign_gpus([("x", 2)], 2, taken={"a": [0]})


@pytest.mark.django_db
def test_the_operator_refuses_a_graph_with_more_gpu_workers_than_the_host_has(tmp_path, settings):
    settings.LOCAL_RUNTIME_DIR = tmp_path
    op = LocalOperator(runtime_dir=tmp_path, port_min=26000, port_max=26999)
    # What NVML reported on the H200 host (bench/results/gpu-nvml-h200.json); vLLM workers there.
    op.gpu_host = GpuHost(1, ["NVIDIA H200"], [150754820096], "580.159.04")
    op.host = Host(gpu=True, vllm=True)
    model = ensure_model_dir(tmp_path / "models", "big-model")  # a local model folder: no hub needed
    spec = build_spec(template="vllm-agg", name="big", model=str(model), decode=PoolFields(replicas=2, gpus=1))
    graph = services.graph_create(spec=spec)
    dep = Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True,
                                    state="progressing")
    try:
        op.reconcile_once()
        dep.refresh_from_db()
        assert dep.state == "failed"
        assert dep.message.startswith("not enough GPUs on this host: this graph's GPU workers ask for 2 GPU(s), "
                                      "the host has 1")
        assert op.supervisor.names() == []  # nothing started, not even half the pool
        [finding] = [d for d in diagnose(dep, []) if d.title == "Not enough GPUs on this host"]
        assert finding.severity == "error" and "lower the replicas" in finding.detail
    finally:
        op.shutdown()


def test_the_kv_transfer_backend_is_read_from_the_workers_log():
    """The seed's check (`Backend UCX was instantiated` in a worker's log), which
    tests/graphs/local/test_kv_routing_live.py sees on running workers; here without Dynamo."""
    from graphs.runtimes.base import nixl_backend

    ucx = "2026-01-01 INFO nixl_connector: Backend UCX was instantiated\n"
    assert nixl_backend("vllm", "loading weights\n" + ucx) == "UCX"
    assert nixl_backend("vllm", ucx + ucx + "Backend GDS was instantiated\n") == "UCX+GDS"  # each once, in order
    assert nixl_backend("vllm", "NIXL agent created\n") == "NIXL (backend not logged)"
    assert nixl_backend("vllm", "loading weights\n") == ""  # not up yet: nothing claimed
    assert nixl_backend("mocker", "") == nixl_backend("mocker", ucx) == "simulated"  # the mocker only models it
