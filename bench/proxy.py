"""The token stream's paths side by side, as `make up` starts the product: the graph's frontend
directly, through the control plane's relay, through nginx asking the control plane with
auth_request, and through LiteLLM when it is installed. Added TTFT, inter-chunk gaps, CPU.

    python bench/proxy.py                       # ~2-3 min on a 2-core machine
    python bench/proxy.py --rounds 5            # longer, steadier

LiteLLM runs from a virtualenv of its own, never the project's (its pins clash); without it the
arm is left out:

    python3 -m venv var/bench-litellm && var/bench-litellm/bin/pip install 'litellm[proxy]==1.108.7'
    python bench/proxy.py --litellm var/bench-litellm/bin/litellm    # the default path; '' skips it

Starts the product with ``manage.py up`` (what ``make up`` runs: ``manage.py web``, Celery
worker, operator, the example graph "demo" on the local runtime: a real frontend with mocker
prefill and decode workers) in a temporary var folder with the embedded defaults, makes an API
token for the admin with benchmark-sized limits, starts Debian's nginx (scripts/services.sh
nginx) with deploy/gateway/nginx.conf and LiteLLM in front of the same frontend. Then, in every
round and at every concurrency, runs the arms one after the other in a shuffled order, the same
client code for all:

  direct   client -> the graph's frontend (keep-alive)
  relay    client -> /api/playground/demo/v1/chat/completions (the product's web processes)
  nginx    client -> nginx (auth_request -> the product's /api/gateway/authorize/demo) -> the frontend
  litellm  client -> LiteLLM 1.x (one worker, master key) -> the frontend

Each simulated user waits a random 0..--think-ms (20) ms before each request, the same waits
in every arm of a round (see bench/sse_client.run_batch: without them TTFT moves in whole steps
of the engine's clock). Reported per arm and concurrency: TTFT and chunk-gap percentiles over
all requests; per round the TTFT p50 and chunk-gap p50, and the paired Δ against the direct arm
of the same round (median and min-max over rounds: the spread); CPU per streamed SSE event of
the arm's processes and of the frontend. Writes everything, with the machine, versions, date
and commit, to bench/results/proxy.json (--out)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import record, sse_client  # noqa: E402
from bench.sse_client import cmdline, cpu_seconds, pct, tree  # noqa: E402
from tests.gateway_fixtures import NginxGateway, nginx_binary  # noqa: E402

LITELLM_DEFAULT = str(ROOT / "var" / "bench-litellm" / "bin" / "litellm")
MASTER_KEY = "sk-bench-only-master-key"
# Settings that `make up` on a fresh checkout does not have: the bench uses the embedded defaults.
DROPPED_ENV = ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "PROMETHEUS_MULTIPROC_DIR", "DJANGO_SETTINGS_MODULE",
               "CONTROLPLANE_VAR_DIR")
SETUP = """
from django.contrib.auth.models import User
from accounts.tokens import token_create
from graphs.models import Deployment
from endpoint.services import api_limit_set
admin = User.objects.get(username="admin")
api_limit_set(user=admin, requests_per_minute=1000000, concurrent_streams=1000, via="cli")
d = Deployment.objects.get(graph__name="demo")
admin.auth_token_set.filter(name="bench-proxy").delete()
print("SETUP", token_create(user=admin, name="bench-proxy", via="cli")[1], d.endpoint)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_line(proc: subprocess.Popen, needle: str, timeout: float, log: list[str]) -> str:
    found: dict[str, str] = {}
    done = threading.Event()

    def pump() -> None:
        for line in proc.stdout:
            log.append(line)
            if (needle in line or "is not ready after" in line or "not applied" in line) and "line" not in found:
                found["line"] = line
                done.set()
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    if not done.wait(timeout) or needle not in found.get("line", ""):
        raise RuntimeError(f"no {needle!r} within {timeout:g} s:\n{''.join(log[-40:])}")
    return found["line"]


def wait_http(url: str, timeout: float, headers: dict | None = None) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=1):  # noqa: S310
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout:g} s")


def start_litellm(binary: str, model: str, endpoint: str, tmp: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = tmp / "litellm.yaml"
    config.write_text(json.dumps({
        "model_list": [{"model_name": model, "litellm_params": {"model": f"openai/{model}",
                                                                 "api_base": f"{endpoint}/v1", "api_key": "none"}}],
        "general_settings": {"master_key": MASTER_KEY},
        "litellm_settings": {"drop_params": False, "telemetry": False}}))
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_LOG": "ERROR", "NO_PROXY": "*", "no_proxy": "*"}
    proc = subprocess.Popen([binary, "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", "1"], env=env, cwd=tmp, stdout=(tmp / "litellm.log").open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/health/liveliness", 120)
    return proc, port


def scrape_added(port: int) -> dict[str, float]:
    """The product's own histogram of the time it adds (GET /metrics, loopback: no token)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("controlplane_playground_added_latency_seconds"):
            name, _, number = line.rpartition(" ")
            out[name] = float(number)
    return out


def added_time(before: dict[str, float], after: dict[str, float]) -> dict:
    """Mean and bucket-bounded p50/p99 of the proxy's own time over the measured requests."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    count = delta.get("controlplane_playground_added_latency_seconds_count", 0.0)
    if not count:
        return {}
    buckets = sorted((float(k.split('le="')[1].split('"')[0]), v) for k, v in delta.items() if 'le="' in k)

    def upper_bound(q: float) -> float:
        return next(le for le, n in buckets if n >= q * count)

    return {"requests": int(count),
            "mean_ms": round(delta["controlplane_playground_added_latency_seconds_sum"] / count * 1000, 3),
            "p50_at_most_ms": upper_bound(0.5) * 1000, "p99_at_most_ms": upper_bound(0.99) * 1000}


def versions(litellm: str | None) -> dict:
    from importlib.metadata import version

    out = {"python": sys.version.split()[0]}
    for name in ("django", "aiohttp", "uvicorn", "uvloop", "httptools", "ai-dynamo", "prometheus-client"):
        with contextlib.suppress(Exception):
            out[name] = version(name)
    if nginx_binary():
        out["nginx"] = subprocess.run([nginx_binary(), "-v"], capture_output=True, text=True).stderr.strip()
    if litellm:
        result = subprocess.run([str(Path(litellm).parent / "python"), "-c",
                                 "from importlib.metadata import version; print(version('litellm'))"],
                                capture_output=True, text=True, timeout=60)
        out["litellm"] = result.stdout.strip()
    return out


def summarise(replies_by_round: dict[int, list], direct_by_round: dict[int, list] | None) -> dict:
    replies = [r for rs in replies_by_round.values() for r in rs]
    ttft = [r.ttft_ms for r in replies]
    gaps = [g for r in replies for g in r.gaps_ms]
    out = {"n": len(replies), "events_per_reply": statistics.mode([r.events for r in replies]),
           "ttft_ms": {q: round(pct(ttft, v), 2) for q, v in (("p50", .5), ("p95", .95), ("p99", .99))},
           "gap_ms": {q: round(pct(gaps, v), 3) for q, v in (("p50", .5), ("p95", .95), ("p99", .99))},
           "rounds": []}
    for rnd, rs in sorted(replies_by_round.items()):
        row = {"round": rnd, "ttft_p50": round(pct([r.ttft_ms for r in rs], .5), 2),
               "gap_p50": round(pct([g for r in rs for g in r.gaps_ms], .5), 3)}
        if direct_by_round is not None:
            base = direct_by_round[rnd]
            base_ttft = pct([r.ttft_ms for r in base], .5)
            row["d_ttft_p50"] = round(row["ttft_p50"] - base_ttft, 2)
            row["ratio_ttft_p50"] = round(row["ttft_p50"] / base_ttft, 3)
            row["d_gap_p50"] = round(row["gap_p50"] - pct([g for r in base for g in r.gaps_ms], .5), 3)
        out["rounds"].append(row)
    if direct_by_round is not None:
        for key in ("d_ttft_p50", "ratio_ttft_p50", "d_gap_p50"):
            values = [row[key] for row in out["rounds"]]
            out[key] = {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}
    return out


def _out_of_time(*_args) -> None:
    raise TimeoutError("the benchmark ran past --time-limit")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--c1-requests", type=int, default=16, help="requests per arm and round at concurrency 1")
    parser.add_argument("--c16-requests", type=int, default=64, help="requests per arm and round at concurrency 16")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=120)
    parser.add_argument("--think-ms", type=float, default=20.0,
                        help="each user waits a random 0..N ms before a request (bench/sse_client.run_batch says why)")
    parser.add_argument("--litellm", default=LITELLM_DEFAULT, help="LiteLLM's CLI in its own virtualenv ('' skips)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "proxy.json"))
    parser.add_argument("--time-limit", type=float, default=900, help="seconds; the run is abandoned after it")
    args = parser.parse_args()
    began = time.monotonic()
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.alarm(int(args.time_limit))

    tmp = Path(tempfile.mkdtemp(prefix="cp-bench-proxy-"))
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update({"CONTROLPLANE_VAR_DIR": str(tmp / "var"), "PYTHONPATH": str(ROOT)})
    # Dynamo's system ports must stay below 32768 (the local runtime caps the range there).
    if int(env.get("LOCAL_RUNTIME_PORT_MIN", "0")) > 32000:
        env["LOCAL_RUNTIME_PORT_MIN"], env["LOCAL_RUNTIME_PORT_MAX"] = "31860", "31899"
    port = free_port()
    py = sys.executable
    up = subprocess.Popen([py, "manage.py", "up", "--port", str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log: list[str] = []
    started_pids: list[int] = []
    litellm_proc = None
    gateways: list[NginxGateway] = []
    ok = False
    try:
        wait_line(up, "example graph 'demo' is serving at", 300, log)
        setup = subprocess.run([py, "manage.py", "shell", "-c", SETUP], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=120, check=True)
        _, token, endpoint = next(line for line in setup.stdout.splitlines() if line.startswith("SETUP")).split()
        started_pids = tree(up.pid)
        web = next(p for p in started_pids  # uvicorn's supervisor: its workers are its children
                   if "uvicorn" in cmdline(p) and "controlplane.asgi:application" in cmdline(p))
        frontend = next(p for p in started_pids if "dynamo.frontend" in cmdline(p))
        model = json.loads(subprocess.run(["curl", "-s", f"{endpoint}/v1/models"], capture_output=True, text=True,
                                          timeout=10).stdout)["data"][0]["id"]
        frontend_port = int(endpoint.rsplit(":", 1)[1].split("/")[0])
        key = {"Authorization": f"Bearer {token}"}
        arms = {"direct": (frontend_port, "/v1/chat/completions", {}, None),
                "relay": (port, "/api/playground/demo/v1/chat/completions", key, tree(web))}
        if nginx_binary() is None:
            print("no nginx (scripts/services.sh nginx): its arm is left out", file=sys.stderr)
        else:
            nginx = NginxGateway(frontend=f"127.0.0.1:{frontend_port}", controlplane=f"127.0.0.1:{port}",
                                 graph="demo").start()
            gateways.append(nginx)
            arms["nginx"] = (nginx.port, "/v1/chat/completions", key, nginx.pids())
        if args.litellm and not Path(args.litellm).is_file():
            print(f"no LiteLLM at {args.litellm}: its arm is left out (see --help)", file=sys.stderr)
            args.litellm = ""
        if args.litellm:
            litellm_proc, litellm_port = start_litellm(args.litellm, model, endpoint, tmp)
            arms["litellm"] = (litellm_port, "/v1/chat/completions", {"Authorization": f"Bearer {MASTER_KEY}"},
                               tree(litellm_proc.pid))
        counter = [0]

        def make_body() -> bytes:
            return sse_client.request_body(model, counter, args.max_tokens, args.prompt_words)

        print(f"product up in {time.monotonic() - began:.0f} s (web pid {web}, frontend pid {frontend}); "
              f"{os.cpu_count()} cores; arms {', '.join(arms)}; {args.rounds} rounds", flush=True)
        plan = [(1, args.c1_requests), (16, args.c16_requests)]
        rng = random.Random(1)
        replies: dict = {}
        cpu: dict = {}

        async def run_all() -> None:
            for rnd in range(args.rounds):
                for conc, requests in plan:
                    order = list(arms)
                    rng.shuffle(order)
                    for name in order:
                        arm_port, path, headers, pids = arms[name]
                        before = (cpu_seconds(pids or []), cpu_seconds([frontend]))
                        got = await sse_client.run_batch(arm_port, path, headers, conc, requests, make_body,
                                                     args.think_ms, seed=rnd)
                        after = (cpu_seconds(pids or []), cpu_seconds([frontend]))
                        replies.setdefault((name, conc), {})[rnd] = got
                        # The warm-up requests (one per connection) are in the CPU time too.
                        events = sum(r.events for r in got) * (requests + conc) / requests
                        acc = cpu.setdefault((name, conc), {"proxy_s": 0.0, "frontend_s": 0.0, "events": 0.0})
                        acc["proxy_s"] += after[0] - before[0]
                        acc["frontend_s"] += after[1] - before[1]
                        acc["events"] += events
                    print(f"round {rnd + 1} c={conc} done at {time.monotonic() - began:.0f} s", flush=True)

        metrics_before = scrape_added(port)
        asyncio.run(run_all())
        results = build_results(args, arms, replies, cpu, began)
        time.sleep(1)  # the web workers write their observations within telemetry.instruments.FLUSH_SECONDS
        results["proxy_own_time"] = added_time(metrics_before, scrape_added(port))
        print_report(results)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwritten to {os.path.relpath(args.out, ROOT)}; total {time.monotonic() - began:.0f} s")
        ok = True
    finally:
        signal.alarm(0)
        if litellm_proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(litellm_proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                litellm_proc.wait(timeout=15)
        for nginx in gateways:
            nginx.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.wait(timeout=40)
        for pid in started_pids:  # anything of ours that outlived `up` (by pid, never by name)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if str(tmp) in cmdline(pid) or "manage.py" in cmdline(pid) or "dynamo" in cmdline(pid):
                    os.kill(pid, signal.SIGKILL)
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"logs kept in {tmp}:\n{''.join(log[-30:])}", file=sys.stderr)
    return 0


def build_results(args, arms, replies, cpu, began) -> dict:
    out = {"benchmark": "bench/proxy.py", "date": datetime.now(UTC).isoformat(timespec="seconds"),
           "command": "python bench/proxy.py " + " ".join(sys.argv[1:]), **record.provenance(),
           "machine": sse_client.machine(), "versions": versions(args.litellm or None),
           "params": {"rounds": args.rounds, "c1_requests": args.c1_requests, "c16_requests": args.c16_requests,
                      "max_tokens": args.max_tokens, "prompt_words": args.prompt_words, "think_ms": args.think_ms},
           "seconds": round(time.monotonic() - began), "arms": {}}
    for (name, conc), by_round in sorted(replies.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        direct = replies[("direct", conc)] if name != "direct" else None
        row = summarise(by_round, direct)
        acc = cpu[(name, conc)]
        if arms[name][3] is not None:
            row["cpu_ms_per_event"] = round(acc["proxy_s"] * 1000 / acc["events"], 4)
        row["frontend_cpu_ms_per_event"] = round(acc["frontend_s"] * 1000 / acc["events"], 4)
        out["arms"][f"{name}@c{conc}"] = row
    goals = {}
    for conc in (1, 16):
        direct = out["arms"].get(f"direct@c{conc}")
        for name in ("relay", "nginx", "litellm"):
            row = out["arms"].get(f"{name}@c{conc}")
            if not row:
                continue
            if conc == 1:
                goals[f"c1_added_ttft_p50_ms_{name}"] = {"measured": row["d_ttft_p50"], "goal": "<= 2 ms"}
            else:
                goals[f"c16_added_ttft_p50_ratio_{name}"] = {"measured": row["ratio_ttft_p50"], "goal": "<= 1.10"}
            goals[f"c{conc}_added_gap_p50_ms_{name}"] = {"measured": row["d_gap_p50"], "goal": "unchanged (~0)"}
            if "cpu_ms_per_event" in row:
                goals[f"c{conc}_cpu_per_event_vs_frontend_{name}"] = {
                    "measured": round(row["cpu_ms_per_event"] / direct["frontend_cpu_ms_per_event"], 3),
                    "goal": "reported"}
    out["goals"] = goals
    return out


def print_report(results: dict) -> None:
    head = (f"{'arm':<12} {'n':>4} {'TTFT p50':>9} {'p95':>7} {'p99':>7} {'ΔTTFT p50 (min..max)':>22} "
            f"{'ratio':>6} {'gap p50':>8} {'p99':>6} {'Δgap p50':>9} {'events':>6} {'CPU ms/ev':>9} {'FE ms/ev':>8}")
    print(head + "\n" + "-" * len(head))
    for name, row in results["arms"].items():
        d = row.get("d_ttft_p50")
        spread = f"{d['median']:+.2f} ({d['min']:+.1f}..{d['max']:+.1f})" if d else ""
        ratio = f"{row['ratio_ttft_p50']['median']:.3f}" if d else ""
        dgap = f"{row['d_gap_p50']['median']:+.3f}" if d else ""
        cpu = f"{row['cpu_ms_per_event']:.3f}" if "cpu_ms_per_event" in row else ""
        print(f"{name:<12} {row['n']:>4} {row['ttft_ms']['p50']:>9.1f} {row['ttft_ms']['p95']:>7.1f} "
              f"{row['ttft_ms']['p99']:>7.1f} {spread:>22} {ratio:>6} {row['gap_ms']['p50']:>8.2f} "
              f"{row['gap_ms']['p99']:>6.2f} {dgap:>9} {row['events_per_reply']:>6} {cpu:>9} "
              f"{row['frontend_cpu_ms_per_event']:>8.3f}")
    print("\nms; Δ and ratio: paired with the direct arm of the same round (median over rounds, min..max);\n"
          "CPU ms/ev: the arm's proxy process tree per SSE event; FE ms/ev: the frontend's, during that arm.")
    print("the product's own time per request (its /metrics histogram):", results.get("proxy_own_time"))
    print(json.dumps(results["goals"], indent=1))


if __name__ == "__main__":
    sys.exit(main())
