"""What each page costs the CPU, apart from any queueing: the pages served in-process by Django's
test client (DEBUG off, PostgreSQL, the fleet of bench/pages_http.py: --graphs graphs with ten
pods each), this code against another checkout's, round for round, on one database.

    python bench/pages_inprocess.py --baseline /tmp/base     # /tmp/base: git worktree add /tmp/base <commit>

Each arm runs in a process of its own, from its own tree; per round and page it gets the page
--requests times after five unmeasured gets, and counts the SQL queries of one get. Reported: the
median over rounds of each round's median and p90, and the queries. Under bench/pages_http.py's
8 closed-loop clients on 2 web workers a page waits behind 3 to 7 others: its p95 there is
several times these figures.

Writes bench/results/<output>.json."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402

PAGES = {"list": "/graphs/", "detail": "/graphs/bench-0025/", "status": "/graphs/bench-0025/status/",
         "api_list": "/api/graphs/", "overview": "/metrics/", "overview_data": "/metrics/"}

GETS = r'''
import json, os, sys, tempfile, time
tree, database, requests, pages = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
sys.path.insert(0, tree)
os.chdir(tree)
os.environ.update(DJANGO_SETTINGS_MODULE="controlplane.settings", DATABASE_URL=database, DJANGO_DEBUG="0",
                  DJANGO_SECURE_TLS="0", DJANGO_SECRET_KEY="bench-only-secret-key",
                  CONTROLPLANE_VAR_DIR=tempfile.mkdtemp(prefix="cp-bench-inprocess-"),
                  PROMETHEUS_URL="http://127.0.0.1:9")  # nothing listens: the overview says so
import django
django.setup()
from django.contrib.auth.models import User
from django.core.signals import request_started
from django.db import connections
from django.test import Client
client = Client()
client.force_login(User.objects.get(username="bench"))
out = {}
for name, url in pages.items():
    headers = {"HX-Request": "true"} if name == "overview_data" else {}
    for _ in range(5):
        client.get(url, headers=headers)
    seen = []
    def count(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)
    def hook(**_):
        connections["default"].execute_wrappers.append(count)
    request_started.connect(hook)
    response = client.get(url, headers=headers)
    request_started.disconnect(hook)
    connections["default"].execute_wrappers.remove(count)
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        client.get(url, headers=headers)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    out[name] = {"median": times[len(times) // 2], "p90": times[int(len(times) * 0.9)], "queries": len(seen)}
print(json.dumps(out))
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT", required=True)
    parser.add_argument("--graphs", type=int, default=500)
    parser.add_argument("--requests", type=int, default=200, help="measured gets per page and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", default="postgres://postgres@127.0.0.1:5432/cp_bench_inprocess")
    parser.add_argument("--output", default="pages-inprocess")
    args = parser.parse_args()
    if args.graphs < 26 or args.requests < 1 or args.rounds < 1:
        parser.error("--graphs must be at least 26 (the graph page is bench-0025); --requests and --rounds positive")
    commit = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    if not (args.baseline / "graphs" / "views.py").is_file() or not commit:
        parser.error(f"--baseline: {args.baseline} is not a checkout of the product")

    import tempfile

    from bench.pages_http import analyze, recreate_database, seed, setup

    recreate_database(args.database)
    setup({"DATABASE_URL": args.database, "CONTROLPLANE_VAR_DIR": tempfile.mkdtemp(prefix="cp-bench-inprocess-"),
           "DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "bench-only-secret-key",
           "DJANGO_SETTINGS_MODULE": "controlplane.settings"})
    seed(args.graphs, 10)
    analyze(args.database)
    arms = {"this code": ROOT, f"the code of commit {commit}": args.baseline.resolve()}
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for _ in range(args.rounds):  # the arms alternate, round for round
        for arm, tree in arms.items():
            done = subprocess.run([sys.executable, "-c", GETS, str(tree), args.database, str(args.requests),
                                   json.dumps(PAGES)], capture_output=True, text=True, cwd=tree)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            runs[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
    results = {arm: {page: {"median_ms": round(statistics.median(r[page]["median"] for r in rounds), 2),
                            "p90_ms": round(statistics.median(r[page]["p90"] for r in rounds), 2),
                            "rounds_median_ms": [round(r[page]["median"], 2) for r in rounds],
                            "queries": rounds[-1][page]["queries"]} for page in PAGES}
               for arm, rounds in runs.items()}
    print(f"{'page':14s}" + "".join(f"{arm[-22:]:>36s}" for arm in arms))
    for page in PAGES:
        cells = (results[arm][page] for arm in arms)
        print(f"{page:14s}" + "".join(f"{c['median_ms']:>14.2f} ms p90 {c['p90_ms']:>7.2f} q {c['queries']:>2d}"
                                      for c in cells))
    path = record.write(args.output, {
        "setup": {"database": "postgresql", "graphs": args.graphs, "pods_per_graph": 10, "requests": args.requests,
                  "rounds": args.rounds, "server": "none: Django's test client in-process, DEBUG off",
                  "prometheus": "nothing listening (the overview's numbers say so)",
                  "compared_with": f"commit {commit}, round for round"},
        "pages": PAGES, "results": results})
    print(f"written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
