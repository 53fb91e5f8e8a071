"""What the web server costs when nobody calls it: CPU per second of the whole process tree
(supervisor and workers), `python -m controlplane.serve` (what `make up` and deploy/ run)
against `uvicorn --workers` with the same application and worker count, side by side in one run.

    python bench/web_idle.py                      # ~2 min
    python bench/web_idle.py --rounds 5 --seconds 20

Writes bench/results/web-idle.json."""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402
from bench.proxy import free_port, wait_http  # noqa: E402
from bench.sse_client import cpu_seconds, tree  # noqa: E402

SERVERS = {
    "controlplane.serve": ["-m", "controlplane.serve"],
    "uvicorn --workers": ["-m", "uvicorn", "controlplane.asgi:application"],
}


def idle_cpu(argv: list[str], workers: int, seconds: float) -> tuple[float, int]:
    """(CPU ms per second of the tree, processes) of a started, idle server."""
    port = free_port()
    env = {**os.environ, "DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "bench-only-secret-key"}
    proc = subprocess.Popen([sys.executable, *argv, "--port", str(port), "--workers", str(workers),
                             "--no-access-log", "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", 60, {"Host": "localhost"})
        time.sleep(3)  # start-up work done
        pids = tree(proc.pid)
        before = cpu_seconds(pids)
        time.sleep(seconds)
        return (cpu_seconds(pids) - before) * 1000 / seconds, len(pids)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {name: [] for name in SERVERS}
    processes: dict[str, int] = {}
    for _ in range(args.rounds):  # alternating, round for round
        for name, argv in SERVERS.items():
            ms, processes[name] = idle_cpu(argv, args.workers, args.seconds)
            runs[name].append(round(ms, 2))
    result = {name: {"cpu_ms_per_s": statistics.median(values), "spread": [min(values), max(values)],
                     "rounds": values, "processes": processes[name]} for name, values in runs.items()}
    ratio = result["controlplane.serve"]["cpu_ms_per_s"] / result["uvicorn --workers"]["cpu_ms_per_s"]
    print(f"idle web server, {args.workers} workers, {args.rounds} rounds x {args.seconds:g} s")
    for name, row in result.items():
        print(f"  {name:<20} {row['cpu_ms_per_s']:6.2f} ms of CPU per second ({row['spread'][0]}..{row['spread'][1]}),"
              f" {row['processes']} processes")
    print(f"  ratio serve / uvicorn: {ratio:.2f}")
    path = record.write("web-idle", {"setup": {"workers": args.workers, "rounds": args.rounds,
                                               "seconds": args.seconds}, "idle": result,
                                     "ratio_serve_to_uvicorn": round(ratio, 3)})
    print(f"written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
