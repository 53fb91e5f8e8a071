"""Pages as users meet them: the product served as `make up` serves it (`manage.py web`: nginx
in front of one uvicorn process per worker, DEBUG off),
on PostgreSQL, with 500 graphs and 5,000 pods in the status cache (--graphs, --pods-per-graph,
--history-per-graph: the fleet), 8 logged-in clients at once over real HTTP.

    python bench/pages_http.py                     # ~5 min on a 2-core machine (needs wrk)
    python bench/pages_http.py --clients 8 --seconds 5 --rounds 3 --workers 2
    python bench/pages_http.py --compare gunicorn,granian --compare-nginx   # other stock servers beside it
    python bench/pages_http.py --graphs 5000 --history-per-graph 100 --output pages-http-fleet  # 10x: 50,000
    python bench/pages_http.py --baseline /tmp/base --variant DATABASE_PREPARED_STATEMENTS=0 \
        --pages list,detail,status,api_list --output pages-http-ab   # what a change did, round for round

Loads each page with wrk (8 keep-alive connections, closed loop) in 3 rounds of new connections
and measures p50/p95 (medians over rounds, the p95's min..max, p99 and max) per page: graph list, graph detail, status
fragment (fetched when the page's stream says it changed), API graph list, both lists narrowed
by filters, the API list narrowed by a label selector and its last page read by cursor, metrics
overview, one-hour chart endpoint;
the SQL queries per page at 50 and at all the graphs (counted in-process through the test client on
the same database: they must not grow with the number of graphs); and each web server's memory
after the load.
Prometheus is pointed at a port where nothing listens (the overview must not depend on it)
and, in a second pass, at a server that answers after 2 s (a slow Prometheus).

Writes bench/results/pages-http.json (machine, versions, date, every figure)."""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import charts, record  # noqa: E402

GOALS_MS = {"chart": 250, "overview_data": 250}
BALANCED = "nginx least_conn over single-worker uvicorn processes"
VARIANT = "uvicorn with "
BASELINE = "the code of commit "
PAGES = ("list", "detail", "status", "api_list", "overview", "chart", "overview_data", "list_filtered",
         "api_filtered", "api_labelled", "api_list_end")
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


NAMESPACES, CLUSTERS = 50, 3  # the fleet's graphs are spread over these, round robin


def seed(n_graphs: int, pods_per_graph: int, history_per_graph: int = 5) -> None:
    """Graphs up to ``n_graphs`` (bench-0000, ...), labelled with one of 10 teams and 3 tiers,
    each with a deployment row on one of
    CLUSTERS registered clusters in one of NAMESPACES namespaces, ``pods_per_graph`` pods, and
    ``history_per_graph`` rows of history (events; past 5, half of it finished operations) in
    the status cache, as the watchers and the runner write them."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from clusters.models import Cluster
    from core.catalog import build_spec
    from graphs import services
    from graphs.models import Deployment, Event, Graph, Operation, Pod

    if not User.objects.filter(username="bench").exists():
        User.objects.create_superuser("bench", "b@x", "bench-pass-1")
    clusters = [Cluster.objects.get_or_create(name=f"cluster-{c}", defaults={"in_cluster": True})[0]
                for c in range(CLUSTERS)]
    now = timezone.now()
    events = min(history_per_graph, 5) + max(0, history_per_graph - 5) // 2
    operations = history_per_graph - events
    for i in range(Graph.objects.count(), n_graphs):
        spec = build_spec(template="mocker-disagg", name=f"bench-{i:04d}", model=f"org/model-{i % 20}",
                          backend="mocker").model_copy(update={"metadata_extra": {"labels": {
                              "team": f"team-{i % 10}", "tier": ("prod", "dev", "staging")[i % 3]}}})
        graph = services.graph_create(spec=spec)
        dep = Deployment.objects.create(graph=graph, runtime="kubernetes", cluster=clusters[i % CLUSTERS],
                                        namespace=f"ns-{i % NAMESPACES:02d}", revision=graph.head, active=True,
                                        state=("ready", "degraded", "progressing")[i % 3], observed_at=now,
                                        endpoint="http://127.0.0.1:1")
        Pod.objects.bulk_create([
            Pod(deployment=dep, name=f"bench-{i:04d}-decode-{j}", service="decode", role="decode", phase="Running",
                ready=True, started_at=now, port=20000 + j) for j in range(pods_per_graph)])
        Event.objects.bulk_create([Event(graph=graph, at=now, reason="Started", object="x", message="m")
                                   for _ in range(events)])
        Operation.objects.bulk_create([Operation(graph=graph, kind="scale", state="succeeded", revision=graph.head,
                                                 params={"service": "decode", "replicas": 2}, result="observed")
                                       for _ in range(operations)])


def end_cursor(n_graphs: int) -> str:
    """The API list's page after bench-<n-51>: its last page of the fleet, as a client that
    follows ``next`` to the end gets it (the cursor encodes the last name read)."""
    from rest_framework.pagination import Cursor

    from graphs.api.pagination import NameCursorPagination

    pager = NameCursorPagination()
    pager.base_url = "/api/graphs/"
    return pager.encode_cursor(Cursor(offset=0, reverse=False, position=f"bench-{n_graphs - 51:04d}"))


def memory_mb(proc) -> float | None:
    """Resident memory of a web server: its process and every worker under it."""
    import psutil

    if not hasattr(proc, "pid"):
        return None
    try:
        root = psutil.Process(proc.pid)
        return round(sum(p.memory_info().rss for p in (root, *root.children(recursive=True))) / 2**20, 1)
    except psutil.Error:
        return None


def analyze(url: str) -> None:
    """Table statistics after the bulk load, as autovacuum gathers them within a minute on a
    running server (without them the planner picks plans for empty tables)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def seed_local_graphs() -> None:
    """The graphs whose series bench/charts.py backfills, as applied local graphs."""
    from core.catalog import PoolFields, build_spec
    from graphs import services
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


NGINX_CONF = """worker_processes 1;
pid {prefix}/nginx.pid;
error_log stderr;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/client_body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream web {{ least_conn; {servers} keepalive 32; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://web;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
    }}
  }}
}}
"""


class Balanced:
    """The stock alternative to ``uvicorn --workers N``: N single-worker uvicorn processes on
    ports of their own behind Debian's nginx, which hands each request (not each connection)
    to the least busy one (``least_conn``), as a request-balancing proxy in front of web pods would."""

    def __init__(self, env: dict[str, str], port: int, workers: int) -> None:
        import tempfile

        from tests.gateway_fixtures import nginx_binary

        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("no nginx: run scripts/services.sh nginx")
        ports = [free_port() for _ in range(workers)]
        self.procs = [start_web(env, p, 1) for p in ports]
        prefix = Path(tempfile.mkdtemp(prefix="cp-bench-nginx-"))
        conf = prefix / "nginx.conf"
        conf.write_text(NGINX_CONF.format(prefix=prefix, port=port,
                                          servers=" ".join(f"server 127.0.0.1:{p};" for p in ports)))
        self.procs.append(subprocess.Popen([binary, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError("nginx in front of the web processes did not come up")

    def terminate(self) -> None:
        for proc in self.procs:
            proc.terminate()

    def wait(self, timeout: float) -> None:
        for proc in self.procs:
            proc.wait(timeout)

    def kill(self) -> None:
        for proc in self.procs:
            proc.kill()


# The other stock servers for the same ASGI application, N worker processes each, as they ship
# (uvloop and httptools where they pick them): what a user could run instead of uvicorn --workers.
ALTERNATIVES = {
    "gunicorn": ("gunicorn with uvicorn workers", lambda port, workers: [
        sys.executable, "-m", "gunicorn", "-k", "uvicorn_worker.UvicornWorker", "-w", str(workers),
        "-b", f"127.0.0.1:{port}", "--keep-alive", "75", "controlplane.asgi:application"]),
    "granian": ("granian", lambda port, workers: [
        sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers), "--log-level", "warning", "controlplane.asgi:application"]),
}


def start_alternative(name: str, env: dict[str, str], port: int, workers: int) -> subprocess.Popen:
    env = {**os.environ, **env, "WEB_WORKERS": str(workers)}
    if workers > 1:
        env.setdefault("CACHE_URL", f"file://{Path(env['CONTROLPLANE_VAR_DIR']) / 'cache'}")
    proc = subprocess.Popen(ALTERNATIVES[name][1](port, workers), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_healthy(proc, port)
    return proc


def wait_healthy(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("the web server did not come up")


def start_web(env: dict[str, str], port: int, workers: int, tree: Path = ROOT) -> subprocess.Popen:
    """The web server exactly as `manage.py up` starts it (its own web_command: nginx in front of
    one uvicorn process per worker, and the shared file cache it gives several workers), on
    ``port``; ``tree``: another checkout's code instead of this one's (--baseline), started as
    that checkout's own `manage.py up` starts it."""
    env = {**os.environ, **env, "WEB_WORKERS": str(workers), "PYTHONPATH": str(tree)}
    if workers > 1:
        env.setdefault("CACHE_URL", f"file://{Path(env['CONTROLPLANE_VAR_DIR']) / 'cache'}")
    asked = ("import json, django; django.setup(); from controlplane.management.commands.up import web_command; "
             f"print(json.dumps(web_command('127.0.0.1', {port}, {workers})))")
    argv = json.loads(subprocess.run([sys.executable, "-c", asked], cwd=tree, env=env, capture_output=True, text=True,
                                     check=True).stdout.strip().splitlines()[-1])
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_healthy(proc, port)
    return proc


WRK_SCRIPT = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK %d %d %d %.0f %.0f %.0f %.0f %.0f\\n", summary.requests, e.status,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(95),
    latency:percentile(99), latency.max, latency.mean))
end
"""


def load(base: str, url: str, cookie: str, clients: int, seconds: float, headers: dict | None = None) -> dict:
    """``clients`` closed-loop keep-alive connections for ``seconds`` (after one second of
    warm-up), driven by wrk: a C load generator, so that the two cores go to what is measured
    and the latencies hold no client-side queueing (a Python client of eight threads spent
    about as much CPU per request as the pages themselves and waited on its own GIL)."""
    script = Path(os.environ.get("TMPDIR", "/tmp")) / "cp-bench-pages.lua"
    script.write_text(WRK_SCRIPT)
    argv = ["wrk", "-t", "1", "-c", str(clients), "--timeout", "30s", "-s", str(script),
            "-H", f"Cookie: sessionid={cookie}"]
    for name, value in (headers or {}).items():
        argv += ["-H", f"{name}: {value}"]
    subprocess.run([*argv, "-d", "1s", base + url], capture_output=True, check=True, timeout=60)  # warm-up
    out = subprocess.run([*argv, "-d", f"{seconds:g}s", base + url], capture_output=True, text=True, check=True,
                         timeout=seconds + 60).stdout
    fields = next(line for line in out.splitlines() if line.startswith("WRK ")).split()[1:]
    n, bad_status, socket_errors = (int(x) for x in fields[:3])
    p50, p95, p99, top, mean = (int(x) / 1000 for x in fields[3:])  # µs -> ms
    if n == 0:  # every request outlasted the run (a slow Prometheus): say so, do not report zeros
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None, "mean": None, "requests_per_s": 0,
                "note": f"no request finished within {seconds:g} s"}
    if bad_status or socket_errors:
        raise RuntimeError(f"{url}: {bad_status} answers that were not 2xx/3xx, {socket_errors} socket errors")
    return {"n": n, "p50": round(p50, 1), "p95": round(p95, 1), "p99": round(p99, 1), "max": round(top, 1),
            "mean": round(mean, 1), "requests_per_s": round(n / seconds, 1)}


def version(name: str) -> str:
    from importlib.metadata import version as installed

    return f"{name} {installed(name)}"


def machine_speed(database: str) -> dict:
    """How fast this (shared, noisy) machine was at the start: the same figures on another day
    may differ by that much. Medians of five: a fixed loop of Python, and a PostgreSQL round trip."""
    import psycopg

    def loop() -> float:
        start = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        return (time.perf_counter() - start) * 1000

    with psycopg.connect(database) as conn:
        def select_one() -> float:
            start = time.perf_counter()
            for _ in range(100):
                conn.execute("SELECT 1").fetchall()
            return (time.perf_counter() - start) * 10  # ms per query
        return {"python_loop_1e6_ms": round(statistics.median(loop() for _ in range(5)), 1),
                "postgres_select_1_ms": round(statistics.median(select_one() for _ in range(5)), 3)}


def over_rounds(runs: list[dict]) -> dict:
    """The median over rounds of each figure, and the spread of p50 and p95 (min..max). Each
    round opens new connections, and how many of the eight each web process holds differs
    from round to round, and with it the latency (one process with six connections queues
    them while the other idles)."""
    done = [r for r in runs if r["n"]]
    if not done:
        return {**runs[0], "rounds": runs}
    out = {key: round(statistics.median(r[key] for r in done), 1)
           for key in ("p50", "p95", "p99", "max", "mean", "requests_per_s")}
    out["n"] = sum(r["n"] for r in done)
    out["p50_spread"] = [min(r["p50"] for r in done), max(r["p50"] for r in done)]
    out["p95_spread"] = [min(r["p95"] for r in done), max(r["p95"] for r in done)]
    out["rounds"] = runs
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5, help="seconds of load per page and round (after 1 s "
                        "of warm-up)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per page, each with new connections")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="uvicorn web workers")
    parser.add_argument("--database", default=os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cp_bench_pages"))
    parser.add_argument("--compare-nginx", action="store_true",
                        help="also serve the pages, round for round, from N single-worker uvicorn processes behind "
                             "nginx least_conn (Debian's nginx: scripts/services.sh nginx)")
    parser.add_argument("--compare", default="", help="also serve the pages, round for round, from these other stock "
                        f"servers (comma-separated: {', '.join(ALTERNATIVES)}), N workers each")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=VALUE",
                        help="also serve the pages, round for round, from `make up`'s server with this setting in "
                             "its environment (an A/B of one setting: DATABASE_PREPARED_STATEMENTS=0, say); repeatable")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also serve the pages, round for round, from `make up`'s server running another checkout "
                             "of the product (git worktree add /tmp/base <commit>) on the same database, migrated by "
                             "this one: what a change did, on one machine at one time")
    parser.add_argument("--graphs", type=int, default=500, help="graphs in the fleet (default 500)")
    parser.add_argument("--pods-per-graph", type=int, default=10, help="pods per graph (default 10)")
    parser.add_argument("--history-per-graph", type=int, default=5,
                        help="events and finished operations per graph (default 5: events only)")
    parser.add_argument("--pages", default="", help=f"only these pages (comma-separated: {', '.join(PAGES)})")
    parser.add_argument("--output", default="pages-http", help="the results file's name under bench/results/")
    args = parser.parse_args()
    if args.graphs < 50 or args.pods_per_graph < 0 or args.history_per_graph < 0:
        parser.error("--graphs must be 50 or more; --pods-per-graph and --history-per-graph 0 or more")
    variants = dict(v.split("=", 1) for v in args.variant if "=" in v)
    if len(variants) != len(args.variant):
        parser.error("--variant: write NAME=VALUE")
    selected = [name.strip() for name in args.pages.split(",") if name.strip()]
    if unknown_pages := sorted(set(selected) - set(PAGES)):
        parser.error(f"--pages: no such page {', '.join(unknown_pages)} (known: {', '.join(PAGES)})")
    baseline_commit = None
    if args.baseline:
        baseline_commit = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True).stdout.strip()
        if not (args.baseline / "controlplane" / "asgi.py").is_file() or not baseline_commit:
            parser.error(f"--baseline: {args.baseline} is not a checkout of the product")
    others = [name.strip() for name in args.compare.split(",") if name.strip()]
    unknown = sorted(set(others) - set(ALTERNATIVES))
    if unknown:
        parser.error(f"--compare: no such server {', '.join(unknown)} (known: {', '.join(ALTERNATIVES)})")

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
            "api_list": "/api/graphs/", "overview": "/metrics/", "chart": "/metrics/graphs/bench-0025/chart/?window=1h",
            # narrowed as a person does: a search and a state in the page; a namespace, a cluster
            # and a search in the API (graphs/filters.py)
            "list_filtered": "/graphs/?q=model-7&state=degraded",
            "api_filtered": "/api/graphs/?namespace=ns-07&cluster=cluster-1&search=bench",
            # a label selector as kubectl get -l reads it, and the API list's last page, by cursor
            "api_labelled": "/api/graphs/?label=team%3Dteam-3%2Ctier%21%3Ddev",
            "api_list_end": end_cursor(args.graphs)}
    # Four local graphs with an hour of Dynamo-shaped series in a real Prometheus (bench/charts.py).
    real = f"http://127.0.0.1:{free_port()}"
    prometheus = charts.start_prometheus(var, int(real.rsplit(":", 1)[1]))
    seed_local_graphs()
    urls["chart"] = f"/metrics/graphs/{charts.GRAPHS[0]}/chart/?window=1h"
    urls["overview_data"] = "/metrics/"  # the fragment with the numbers (HX-Request), as htmx asks for it
    seed(50, args.pods_per_graph, args.history_per_graph)
    queries_at_50 = count_queries(urls)
    seed(args.graphs, args.pods_per_graph, args.history_per_graph)
    analyze(args.database)
    queries = count_queries(urls)
    cookie = session_cookie()

    speed = machine_speed(args.database)
    print(f"machine speed at the start: {speed}")
    results: dict[str, dict] = {}
    memory: dict[str, float | None] = {}
    slow = SlowPrometheus(2.0)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    passes = ((real, "prometheus up"), (dead, "prometheus down"), (slow.url, "prometheus slow (2 s)"))
    try:
        for url_of_prometheus, label in passes:
            servers = [label]
            if label == "prometheus up":
                servers += [f"{label}, {ALTERNATIVES[name][0]}" for name in others]
                if args.compare_nginx:
                    servers.append(f"{label}, {BALANCED}")
                servers += [f"{label}, {VARIANT}{name}={value}" for name, value in variants.items()]
                if args.baseline:
                    servers.append(f"{label}, {BASELINE}{baseline_commit}")
            pages = urls if label == "prometheus up" else {k: urls[k] for k in ("overview", "overview_data", "chart")}
            pages = {k: v for k, v in pages.items() if not selected or k in selected}
            if not pages:
                continue
            procs, bases = {}, {}
            try:
                for server_label in servers:
                    port = free_port()
                    web_env = {**env, "PROMETHEUS_URL": url_of_prometheus}
                    other = next((name for name in others if server_label.endswith(ALTERNATIVES[name][0])), None)
                    variant = server_label.partition(VARIANT)[2]
                    if BASELINE in server_label:
                        procs[server_label] = start_web(web_env, port, args.workers, tree=args.baseline.resolve())
                    elif variant:
                        name, _, value = variant.partition("=")
                        procs[server_label] = start_web({**web_env, name: value}, port, args.workers)
                    elif BALANCED in server_label:
                        procs[server_label] = Balanced(web_env, port, args.workers)
                    elif other:
                        procs[server_label] = start_alternative(other, web_env, port, args.workers)
                    else:
                        procs[server_label] = start_web(web_env, port, args.workers)
                    bases[server_label] = f"http://127.0.0.1:{port}"
                for name, url in pages.items():
                    headers = {"HX-Request": "true"} if name == "overview_data" else {}
                    runs: dict[str, list] = {server_label: [] for server_label in servers}
                    for _ in range(args.rounds):  # the servers alternate, round for round
                        for server_label, base in bases.items():
                            runs[server_label].append(load(base, url, cookie, args.clients, args.seconds, headers))
                    for server_label, server_runs in runs.items():
                        results.setdefault(name, {})[server_label] = over_rounds(server_runs)
                for server_label, proc in procs.items():  # after every page was loaded
                    memory[server_label] = memory_mb(proc)
            finally:
                for proc in procs.values():
                    proc.terminate()  # requests still waiting on a slow Prometheus finish first
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
    finally:
        slow.shutdown()
        prometheus.terminate()
        prometheus.wait(10)

    print(f"{args.clients} clients x {args.seconds:g} s x {args.rounds} rounds per page (wrk; medians over rounds), "
          f"{args.workers} web worker(s), PostgreSQL, "
          f"{args.graphs:,} graphs, {args.graphs * args.pods_per_graph:,} pods")
    print(f"{'page':<10} {'prometheus':<34} {'p50':>7} {'p95':>7} {'p95 min..max':>13} {'p99':>7} {'max':>7} "
          f"{'goal':>6} "
          f"{'p95/goal':>8} {'SQL':>4}")
    for name, by_prom in results.items():
        goal = GOALS_MS.get(name, DEFAULT_GOAL_MS)
        for label, s in by_prom.items():
            ratio = f"{s['p95'] / goal:>8.2f}" if s["p95"] is not None else f"{'-':>8}"
            spread = "{}..{}".format(*s["p95_spread"]) if "p95_spread" in s else ""
            print(f"{name:<10} {label:<34} {s['p50']!s:>7} {s['p95']!s:>7} {spread:>13} {s['p99']!s:>7} "
                  f"{s['max']!s:>7} {goal:>6} {ratio} {queries[name]:>4}  {s.get('note', '')}")
    path = record.write(args.output, {
        "setup": {"clients": args.clients, "seconds_per_page": args.seconds, "rounds": args.rounds,
                  "web_workers": args.workers,
                  "load_generator": "wrk (one thread, keep-alive connections, closed loop)",
                  "server": "manage.py up's web command (manage.py web: Debian's nginx, least_conn, in front of "
                            "N single-worker uvicorn processes), DEBUG off; the baseline: that commit's own",
                  "compared_with": ([f"{ALTERNATIVES[name][0]} ({version(name)}, N workers, as it ships)"
                                     for name in others]
                                    + ([f"{BALANCED} (N processes, Debian's nginx, round for round)"]
                                       if args.compare_nginx else [])
                                    + [f"the same server with {name}={value} (round for round)"
                                       for name, value in variants.items()]
                                    + ([f"the same server running commit {baseline_commit} (round for round)"]
                                       if args.baseline else [])) or None,
                  "machine_speed": speed,
                  "database": "postgresql",
                  "graphs": args.graphs, "pods": args.graphs * args.pods_per_graph,
                  "history_rows": args.graphs * args.history_per_graph,
                  "namespaces": NAMESPACES, "clusters": CLUSTERS},
        "goals_ms": {name: GOALS_MS.get(name, DEFAULT_GOAL_MS) for name in urls},
        "sql_queries": {"at_50_graphs": queries_at_50, f"at_{args.graphs}_graphs": queries}, "latency_ms": results,
        "web_memory_mb": memory})
    print(f"SQL queries per page, 50 -> {args.graphs:,} graphs: {queries_at_50} -> {queries}")
    print("web server memory (RSS, all its processes) after the load: "
          + ", ".join(f"{label}: {mb} MB" for label, mb in memory.items()))
    print(f"written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
