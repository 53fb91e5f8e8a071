"""Pages as users meet them: the product served as `make up` serves it (uvicorn, DEBUG off),
on PostgreSQL, with 500 graphs and 5,000 pods in the status cache, 8 logged-in clients at once
over real HTTP.

    python bench/pages_http.py                     # ~1 min on a 2-core machine
    python bench/pages_http.py --clients 8 --requests 40 --workers 2

Measures p50/p95 (and the spread: p99 and max) per page: graph list, graph detail, status
fragment (polled every 2 s), API graph list, metrics overview, one-hour chart endpoint, and
the SQL queries per page at 50 and at 500 graphs (counted in-process through the test client on
the same database: they must not grow with the number of graphs).
Prometheus is pointed at a port where nothing listens (the overview must not depend on it)
and, in a second pass, at a server that answers after 2 s (a slow Prometheus).

Writes bench/results/pages-http.json (machine, versions, date, every figure)."""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import charts, record  # noqa: E402

GOALS_MS = {"chart": 250, "overview_data": 250}
DEFAULT_GOAL_MS = 50


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlowPrometheus(http.server.ThreadingHTTPServer):
    """A Prometheus that answers every query with an empty result after ``delay`` seconds."""

    def __init__(self, delay: float):
        self.delay = delay
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                time.sleep(server.delay)
                body = (b'{"status":"success","data":[]}' if "/label/" in self.path
                        else b'{"status":"success","data":{"resultType":"vector","result":[]}}')
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def recreate_database(url: str) -> None:
    import psycopg

    admin, name = url.rsplit("/", 1)
    with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def seed(n_graphs: int, pods_per_graph: int) -> None:
    """Graphs up to ``n_graphs``, each with a Kubernetes deployment row, ``pods_per_graph`` pods
    and five events in the status cache, as the watchers write them."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from graphs import services
    from graphs.catalog import build_spec
    from graphs.models import Deployment, Event, Graph, Pod

    if not User.objects.filter(username="bench").exists():
        User.objects.create_superuser("bench", "b@x", "bench-pass-1")
    now = timezone.now()
    for i in range(Graph.objects.count(), n_graphs):
        spec = build_spec(template="mocker-disagg", name=f"bench-{i:04d}", model="m", backend="mocker")
        graph = services.graph_create(spec=spec)
        dep = Deployment.objects.create(graph=graph, runtime="kubernetes", namespace="bench", revision=graph.head,
                                        active=True, state="ready", observed_at=now, endpoint="http://127.0.0.1:1")
        Pod.objects.bulk_create([
            Pod(deployment=dep, name=f"bench-{i:04d}-decode-{j}", service="decode", role="decode", phase="Running",
                ready=True, started_at=now, port=20000 + j) for j in range(pods_per_graph)])
        Event.objects.bulk_create([Event(graph=graph, at=now, reason="Started", object="x", message="m")
                                   for _ in range(5)])


def seed_local_graphs() -> None:
    """The graphs whose series bench/charts.py backfills, as applied local graphs."""
    from graphs import services
    from graphs.catalog import PoolFields, build_spec
    from graphs.models import Deployment
    from metrics.services import objectives_set

    for name in charts.GRAPHS:
        graph = services.graph_create(spec=build_spec(template="vllm-disagg", name=name,
                                                      prefill=PoolFields(replicas=2), decode=PoolFields(replicas=4)))
        Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready")
        objectives_set(graph=graph, ttft_ms=150, itl_ms=10, gpu_hour_price="2.50")


def setup(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def session_cookie() -> str:
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.get(username="bench"))
    return client.cookies["sessionid"].value


def count_queries(urls: dict[str, str]) -> dict[str, int]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(User.objects.get(username="bench"))
    out = {}
    for name, url in urls.items():
        headers = {"HX-Request": "true"} if name == "overview_data" else {}
        client.get(url, headers=headers)
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url, headers=headers)
        assert response.status_code == 200, (url, response.status_code)
        out[name] = len(ctx.captured_queries)
    return out


def start_web(env: dict[str, str], port: int, workers: int) -> subprocess.Popen:
    argv = [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1",
            "--port", str(port), "--no-access-log", "--log-level", "warning"]
    if workers > 1:
        argv += ["--workers", str(workers)]
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("the web server did not come up")


def load(base: str, url: str, cookie: str, clients: int, requests: int, headers: dict | None = None) -> list[float]:
    """``clients`` closed-loop clients, each with its own keep-alive connection, ``requests`` each."""

    def one_client(_: int) -> list[float]:
        samples = []
        with httpx.Client(base_url=base, cookies={"sessionid": cookie}, headers=headers, timeout=30) as http:
            for i in range(requests + 3):
                start = time.perf_counter()
                response = http.get(url)
                elapsed = (time.perf_counter() - start) * 1000
                if response.status_code != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status_code}")
                if i >= 3:  # warm-up: connection, caches
                    samples.append(elapsed)
        return samples

    with ThreadPoolExecutor(clients) as pool:
        return [s for chunk in pool.map(one_client, range(clients)) for s in chunk]


def summary(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    pick = lambda q: samples[min(len(samples) - 1, int(len(samples) * q))]  # noqa: E731
    return {"n": len(samples), "p50": round(statistics.median(samples), 1), "p95": round(pick(0.95), 1),
            "p99": round(pick(0.99), 1), "max": round(samples[-1], 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=40, help="requests per client per page")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="uvicorn web workers")
    parser.add_argument("--database", default=os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cp_bench_pages"))
    args = parser.parse_args()

    import tempfile

    var = Path(tempfile.mkdtemp(prefix="cp-bench-pages-"))
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"DATABASE_URL": args.database, "CONTROLPLANE_VAR_DIR": str(var), "DJANGO_DEBUG": "0",
           "DJANGO_SECURE_TLS": "0", "DJANGO_SECRET_KEY": "bench-only-secret-key", "PROMETHEUS_URL": dead,
           "DJANGO_SETTINGS_MODULE": "controlplane.settings", "PYTHONPATH": str(ROOT),
           "PROMETHEUS_SCRAPE_INTERVAL": str(charts.SCRAPE)}
    recreate_database(args.database)
    setup(env)
    urls = {"list": "/graphs/", "detail": "/graphs/bench-0025/", "status": "/graphs/bench-0025/status/",
            "api_list": "/api/graphs/", "overview": "/metrics/", "chart": "/metrics/graphs/bench-0025/chart/?window=1h"}
    # Four local graphs with an hour of Dynamo-shaped series in a real Prometheus (bench/charts.py).
    real = f"http://127.0.0.1:{free_port()}"
    prometheus = charts.start_prometheus(var, int(real.rsplit(":", 1)[1]))
    seed_local_graphs()
    urls["chart"] = f"/metrics/graphs/{charts.GRAPHS[0]}/chart/?window=1h"
    urls["overview_data"] = "/metrics/"  # the fragment with the numbers (HX-Request), as htmx asks for it
    seed(50, 10)
    queries_at_50 = count_queries(urls)
    seed(500, 10)
    queries = count_queries(urls)
    cookie = session_cookie()

    results: dict[str, dict] = {}
    slow = SlowPrometheus(2.0)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    passes = ((real, "prometheus up"), (dead, "prometheus down"), (slow.url, "prometheus slow (2 s)"))
    try:
        for url_of_prometheus, label in passes:
            port = free_port()
            proc = start_web({**env, "PROMETHEUS_URL": url_of_prometheus}, port, args.workers)
            try:
                base = f"http://127.0.0.1:{port}"
                pages = urls if label == "prometheus up" else {k: urls[k] for k in ("overview", "overview_data",
                                                                                    "chart")}
                for name, url in pages.items():
                    headers = {"HX-Request": "true"} if name == "overview_data" else {}
                    results.setdefault(name, {})[label] = summary(
                        load(base, url, cookie, args.clients, args.requests, headers))
            finally:
                proc.terminate()
                proc.wait(10)
    finally:
        slow.shutdown()
        prometheus.terminate()
        prometheus.wait(10)

    print(f"{args.clients} clients x {args.requests} requests per page, {args.workers} web worker(s), PostgreSQL, "
          "500 graphs, 5,000 pods")
    print(f"{'page':<10} {'prometheus':<22} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7} {'goal':>6} "
          f"{'p95/goal':>8} {'SQL':>4}")
    for name, by_prom in results.items():
        goal = GOALS_MS.get(name, DEFAULT_GOAL_MS)
        for label, s in by_prom.items():
            print(f"{name:<10} {label:<22} {s['p50']:>7} {s['p95']:>7} {s['p99']:>7} {s['max']:>7} {goal:>6} "
                  f"{s['p95'] / goal:>8.2f} {queries[name]:>4}")
    path = record.write("pages-http", {
        "setup": {"clients": args.clients, "requests_per_client": args.requests, "web_workers": args.workers,
                  "server": "uvicorn controlplane.asgi:application, DEBUG off", "database": "postgresql",
                  "graphs": 500, "pods": 5000},
        "goals_ms": {name: GOALS_MS.get(name, DEFAULT_GOAL_MS) for name in urls},
        "sql_queries": {"at_50_graphs": queries_at_50, "at_500_graphs": queries}, "latency_ms": results})
    print(f"SQL queries per page, 50 -> 500 graphs: {queries_at_50} -> {queries}")
    print(f"written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
