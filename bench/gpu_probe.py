"""The local runtime's GPU code on a real NVIDIA host, against a stand-in GPU worker.

    python3 bench/gpu_probe.py OUT.json

Runs what the local operator runs, minus Django: the NVML probe of the host
(graphs/runtimes/local/gpus.py), the assignment of GPUs to GPU workers with the refusal when
they do not fit, the env a worker gets (CUDA_VISIBLE_DEVICES), the supervisor that starts it
in its own process group (local/supervisor.py), and the per-pod readings (NVML memory and
utilisation of the group's processes, /dev/shm from its mount namespace). The stand-in worker
is a PyTorch process that holds ALLOC_GIB of GPU memory and runs matrix products; it reports
which GPU it sees, so the assignment is checked from inside the process too. Writes one JSON
file; bench/results/gpu-nvml-h200.json is its output on an H200."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from graphs.runtimes.local.gpus import (  # noqa: E402
    GpuShortage,
    assign_gpus,
    gpu_env,
    probe,
    usage_of,
)
from graphs.runtimes.local.observe import process_shm  # noqa: E402
from graphs.runtimes.local.supervisor import Supervisor  # noqa: E402
from graphs.runtimes.processes import group_members  # noqa: E402

ALLOC_GIB = 4
STAND_IN = f"""
import json, os, sys, time, torch
x = torch.empty({ALLOC_GIB} * 2**30, dtype=torch.uint8, device="cuda")  # the weights and KV cache of a worker
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
props = torch.cuda.get_device_properties(0)
print(json.dumps({{"pid": os.getpid(), "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "device_count": torch.cuda.device_count(), "name": props.name,
                  "uuid": str(getattr(props, "uuid", ""))}}), flush=True)
end = time.time() + 40
while time.time() < end:
    for _ in range(50):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def nvml_uuids() -> list[str]:
    import pynvml

    pynvml.nvmlInit()
    try:
        return [str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def problems(result: dict) -> list[str]:
    """What the run must show on a host with one GPU (the H200 of bench/results/gpu-nvml-h200.json):
    NVML saw the stand-in worker's own process on the GPU it was given, holding its memory."""
    out = []
    if result["probe"]["count"] != 1:
        out.append(f"expected one GPU, NVML saw {result['probe']['count']}")
    if result.get("worker_env", {}).get("CUDA_VISIBLE_DEVICES") != "0":
        out.append(f"the worker's CUDA_VISIBLE_DEVICES: {result.get('worker_env')}")
    worker = result.get("worker_reported") or {}
    if worker.get("device_count") != 1 or f"GPU-{worker.get('uuid')}" != (result.get("nvml_uuids") or [None])[0]:
        out.append(f"the worker saw {worker.get('device_count')} GPU(s), uuid {worker.get('uuid')}")
    samples = result.get("usage_samples") or []
    if not samples:
        out.append("no usage samples")
    for s in samples:
        if s["pids"] != [worker.get("pid")] or s["devices"] != [0]:
            out.append(f"a sample saw pids {s['pids']} on devices {s['devices']}, not the worker alone on GPU 0")
        if s["memory_bytes"] < ALLOC_GIB * 2**30:  # what it holds, plus its CUDA context
            out.append(f"a sample saw {s['memory_bytes']} bytes, less than the {ALLOC_GIB} GiB it holds")
    if samples and max(s["util_percent"] for s in samples) <= 50:
        out.append("the matrix products never showed above 50 % utilisation")
    if "the host has 1" not in (result.get("assign_refused") or ""):
        out.append(f"a second GPU worker was not refused: {result.get('assign_refused')}")
    return out


def main(out_path: str) -> int:
    from bench.record import machine, provenance

    result: dict = {"benchmark": "gpu-probe", "command": f"python3 bench/gpu_probe.py {out_path}",
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **provenance(),
                    "machine": machine()}
    host = probe()
    result["probe"] = host.as_dict()
    print("NVML probe:", host)
    if host.count == 0:
        Path(out_path).write_text(json.dumps(result, indent=2))
        return 1
    result["nvml_uuids"] = nvml_uuids()
    # One GPU worker per GPU fits; one more is refused, all or nothing, with the reason.
    fits = [(f"g-decode-{i}", 1) for i in range(host.count)]
    result["assign_fits"] = assign_gpus(fits, host.count)
    try:
        assign_gpus([*fits, ("g-decode-extra", 1)], host.count)
        result["assign_refused"] = None
    except GpuShortage as exc:
        result["assign_refused"] = str(exc)
    # A running worker keeps its GPUs when another graph asks for more.
    result["assign_keeps_held"] = assign_gpus([("g-decode-0", 1)], host.count, held={"g-decode-0": [0]})

    root = Path("/tmp/gpu-probe")
    sup = Supervisor(root / "pids")
    devices = result["assign_fits"]["g-decode-0"]
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LD_LIBRARY_PATH") if k in os.environ}
    env.update(gpu_env(devices), PYTHONUNBUFFERED="1")
    result["worker_env"] = gpu_env(devices)
    log = root / "g-decode-0.log"
    sup.ensure("g-decode-0", [sys.executable, "-c", STAND_IN], env, root, log, {"role": "decode"})
    try:
        reported = None
        deadline = time.time() + 60
        while time.time() < deadline and reported is None:
            for line in log.read_text().splitlines() if log.exists() else []:
                if line.startswith("{"):
                    reported = json.loads(line)
            time.sleep(0.5)
        result["worker_reported"] = reported
        pid = sup.status("g-decode-0").pid
        samples = []
        for _ in range(6):
            time.sleep(2)
            pids = group_members(pid)
            usage = usage_of(pids)
            samples.append({"pids": pids, "memory_bytes": usage.memory_bytes, "util_percent": usage.util_percent,
                            "devices": usage.devices})
        result["usage_samples"] = samples
        result["shm"] = vars(process_shm(pid))
        result["usage_of_other_pids"] = vars(usage_of([os.getpid()]))  # this probe holds no GPU memory
    finally:
        sup.stop_all(grace=3)
        result["worker_log_tail"] = log.read_text()[-1500:] if log.exists() else ""
    found = problems(result)
    result["problems"] = found
    Path(out_path).write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))
    print("\n".join(found) or "ok: NVML saw the stand-in worker on its own GPU", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default="gpu-nvml.json", help="the JSON file to write")
    parser.add_argument("--check", metavar="FILE", help="re-check a committed result instead of probing")
    args = parser.parse_args()
    if args.check:
        found = problems(json.loads(Path(args.check).read_text()))
        print("\n".join(found) or "ok")
        sys.exit(1 if found else 0)
    sys.exit(main(args.out))
