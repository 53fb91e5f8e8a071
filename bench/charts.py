"""Chart data endpoint latency, one-hour window, against a real Prometheus holding an hour of data.

    python bench/charts.py               # about 30 s on a 2-core machine
    python bench/charts.py --n 300       # more samples

Backfills 70 minutes of Dynamo-shaped series (frontend histograms with the 1.6.1 bucket
layout, counters, gauges, `up` for three pods) for four local graphs into a fresh TSDB with
`promtool tsdb create-blocks-from openmetrics`, starts `prometheus` on it (loopback, free
port), and requests GET /metrics/graphs/<graph>/chart/?window=1h through Django's test client
(the whole view: database, the Prometheus calls, JSON), its own SQLite database in a temporary
folder. Arms are interleaved in every round: cold (Django cache cleared first, so every
Prometheus call is made: label values for the SLO shares, one range query, two instant
queries) then cached (the same request again). Also the overview page of the four graphs
(one Prometheus query) and the chart with Prometheus stopped. Goal (perf-reliability.md
P4.2): chart endpoint on a cache miss, 1 h window, p95 <= 250 ms."""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GRAPHS = ("bench-a", "bench-b", "bench-c", "bench-d")
SCRAPE = 5
# The 1.6.1 frontend's default bucket bounds (dynamo-facts.md section 4; seen on its /metrics).
TTFT_LE = ["0", "0.0022", "0.0047", "0.01", "0.022", "0.047", "0.1", "0.22", "0.47", "1", "2.2", "4.7", "10", "22",
           "48", "100", "220", "480", "+Inf"]
ITL_LE = ["0", "0.0018", "0.0033", "0.0059", "0.011", "0.02", "0.035", "0.064", "0.12", "0.21", "0.38", "0.69", "1.2",
          "2.3", "4.1", "7.4", "13", "24", "44", "80", "+Inf"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cumulative(bounds: list[str], median: float, spread: float, n: float) -> list[float]:
    """Counts per cumulative bucket for n log-normal observations (the shape of real latency)."""
    out = []
    for le in bounds:
        if le == "+Inf":
            out.append(n)
        elif float(le) <= 0:
            out.append(0.0)
        else:
            z = (math.log(float(le)) - math.log(median)) / spread
            out.append(n * 0.5 * (1 + math.erf(z / math.sqrt(2))))
    return out


def openmetrics(path: Path, end: int, minutes: int = 70) -> int:
    """Write the backfill: per graph, traffic that swings between 2 and 14 requests/s."""
    times = list(range(end - minutes * 60, end + 1, SCRAPE))
    rnd = random.Random(7)
    families: dict[str, list[str]] = {}

    def add(family: str, name: str, labels: str, values: list[float]) -> None:
        lines = families.setdefault(family, [])
        lines += [f"{name}{{{labels}}} {v:.6g} {t}" for t, v in zip(times, values, strict=True)]

    for g, graph in enumerate(GRAPHS):
        base = f'job="dynamo-local",graph="{graph}",pool="frontend",pod="{graph}-frontend-0",' \
               f'instance="127.0.0.1:{18000 + g}",model="m"'
        requests, total = [], 0.0
        for i, _ in enumerate(times):
            total += SCRAPE * (8 + 6 * math.sin(i / 60 + g)) * rnd.uniform(0.9, 1.1)
            requests.append(total)
        for family, bounds, median, spread, per_request in (
                ("dynamo_frontend_time_to_first_token_seconds", TTFT_LE, 0.08 + 0.02 * g, 0.5, 1),
                ("dynamo_frontend_inter_token_latency_seconds", ITL_LE, 0.006, 0.3, 120)):
            rows = [cumulative(bounds, median, spread, n * per_request) for n in requests]
            for b, le in enumerate(bounds):
                add(family, f"{family}_bucket", f'{base},le="{le}"', [row[b] for row in rows])
            add(family, f"{family}_sum", base, [n * per_request * median for n in requests])
            add(family, f"{family}_count", base, [n * per_request for n in requests])
        add("dynamo_frontend_input_sequence_tokens", "dynamo_frontend_input_sequence_tokens_sum", base,
            [n * 900 for n in requests])
        add("dynamo_frontend_input_sequence_tokens", "dynamo_frontend_input_sequence_tokens_count", base, requests)
        add("dynamo_frontend_requests", "dynamo_frontend_requests_total",
            base + ',endpoint="chat_completions",request_type="stream",status="success",error_type=""', requests)
        add("dynamo_frontend_output_tokens", "dynamo_frontend_output_tokens_total", base,
            [n * 120 for n in requests])
        add("dynamo_frontend_active_requests", "dynamo_frontend_active_requests", base,
            [float(rnd.randint(2, 30)) for _ in times])
        for k, pool in enumerate(("frontend", "prefill", "decode")):
            add("up", "up", f'job="dynamo-local",graph="{graph}",pool="{pool}",pod="{graph}-{pool}-0",'
                f'instance="127.0.0.1:{18100 + 3 * g + k}"', [1.0] * len(times))
    types = {"dynamo_frontend_time_to_first_token_seconds": "histogram",
             "dynamo_frontend_inter_token_latency_seconds": "histogram",
             "dynamo_frontend_input_sequence_tokens": "histogram", "dynamo_frontend_requests": "counter",
             "dynamo_frontend_output_tokens": "counter", "dynamo_frontend_active_requests": "gauge", "up": "gauge"}
    samples = 0
    with open(path, "w") as out:
        for family, lines in families.items():
            out.write(f"# TYPE {family} {types[family]}\n")
            out.write("\n".join(lines) + "\n")
            samples += len(lines)
        out.write("# EOF\n")
    return samples


def start_prometheus(tmp: Path, port: int) -> subprocess.Popen:
    from metrics import localprom

    binary = localprom.find_binary()
    promtool = localprom.find_tool("promtool")
    if binary is None or promtool is None:
        sys.exit("needs prometheus and promtool (Debian: apt-get install prometheus)")
    end = int(time.time()) // SCRAPE * SCRAPE
    started = time.perf_counter()
    samples = openmetrics(tmp / "backfill.om", end)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "backfill.om"),
                    str(tmp / "prom" / "data")], check=True, capture_output=True)
    print(f"backfilled {samples:,} samples ({len(GRAPHS)} graphs, 70 min at {SCRAPE} s) "
          f"in {time.perf_counter() - started:.1f} s")
    config = localprom.write_config(tmp / "prom", scrape_interval=SCRAPE)
    proc = subprocess.Popen(localprom.server_argv(binary, config=config, port=port, storage=tmp / "prom" / "data",
                                                  retention="8d"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as resp:  # noqa: S310 - our loopback server
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("prometheus did not become ready")


def setup_django(tmp: Path, prometheus_url: str) -> None:
    os.environ["CONTROLPLANE_VAR_DIR"] = str(tmp / "var")
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp}/bench.sqlite3"
    os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ["DJANGO_SECRET_KEY"] = "bench-only"
    os.environ["DJANGO_SECURE_TLS"] = "0"  # plain HTTP on loopback: no redirect to https
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["PROMETHEUS_URL"] = prometheus_url
    os.environ["PROMETHEUS_SCRAPE_INTERVAL"] = str(SCRAPE)
    os.environ.pop("CACHE_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed() -> None:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from core.catalog import PoolFields, build_spec
    from graphs import services
    from graphs.models import Deployment, Operation
    from metrics.services import objectives_set

    User.objects.create_superuser("bench", "bench@example.test", "bench-pass-1")
    for name in GRAPHS:
        graph = services.graph_create(spec=build_spec(template="vllm-disagg", name=name,
                                                      prefill=PoolFields(replicas=2), decode=PoolFields(replicas=4)))
        Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready")
        objectives_set(graph=graph, ttft_ms=150, itl_ms=10, gpu_hour_price="2.50")
        for minutes in (50, 30, 10):
            op = Operation.objects.create(graph=graph, kind="scale", state="succeeded", params={"service": "decode"},
                                          before={"replicas": 2}, after={"replicas": 4})
            Operation.objects.filter(pk=op.pk).update(created_at=timezone.now() - timezone.timedelta(minutes=minutes))


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return statistics.median(ordered), q[94], q[98]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=150, help="rounds per arm")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cp-bench-charts-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    setup_django(tmp, url)
    proc = start_prometheus(tmp, port)
    try:
        seed()
        run(args.n, url)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def run(n: int, url: str) -> None:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.test import Client

    client = Client()
    client.force_login(User.objects.get(username="bench"))
    chart = f"/metrics/graphs/{GRAPHS[0]}/chart/?window=1h"
    first = client.get(chart).json()
    assert first["state"] == "ok", first["message"]
    points = len(first["timestamps"])
    arms: dict[str, list[float]] = {"chart 1h, cold (cache cleared)": [], "chart 1h, cached": [],
                                    "overview, 4 graphs, cold": [], "overview, 4 graphs, cached": []}

    def timed(path: str) -> float:
        started = time.perf_counter()
        response = client.get(path)
        elapsed = (time.perf_counter() - started) * 1000
        assert response.status_code == 200, response.status_code
        return elapsed

    for _ in range(5):  # warm-up, discarded
        cache.clear()
        timed(chart)
        timed("/metrics/")
    for _ in range(n):
        cache.clear()
        arms["chart 1h, cold (cache cleared)"].append(timed(chart))
        arms["chart 1h, cached"].append(timed(chart))
        cache.clear()
        arms["overview, 4 graphs, cold"].append(timed("/metrics/"))
        arms["overview, 4 graphs, cached"].append(timed("/metrics/"))
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    cache.clear()
    down = [timed(chart) for _ in range(n)]
    arms["chart 1h, Prometheus stopped"] = down

    print(f"\nGET {chart}: {points} points per series, step {first['step']} s, "
          f"rate window {first['rate_window']} s; Prometheus {url}")
    width = max(len(k) for k in arms) + 2
    print(f"{'arm':<{width}} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, samples in arms.items():
        p50, p95, p99 = percentiles(samples)
        print(f"{name:<{width}} {len(samples):>5} {p50:>8.1f} {p95:>8.1f} {p99:>8.1f} {max(samples):>8.1f}")
    cold95 = percentiles(arms["chart 1h, cold (cache cleared)"])[1]
    print(f"\ngoal P4.2: cold chart 1 h p95 <= 250 ms: measured {cold95:.1f} ms "
          f"({'meets' if cold95 <= 250 else 'misses'} it, ratio {cold95 / 250:.2f})")


if __name__ == "__main__":
    main()
