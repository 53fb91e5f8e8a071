"""What one runtime look costs the status cache's writer (graphs.status_cache.observation_record):
a deployment of ten pods on PostgreSQL, looked at with nothing changed and with one pod's
readiness flipped, this code against another checkout's, round for round.

    python bench/observation.py --baseline /tmp/base     # /tmp/base: git worktree add /tmp/base <commit>

Each arm runs in a process of its own, from its own tree, on a database of its own migrated by
that tree (its triggers included), 20 graphs x 15 looks per kind of look and round."""

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

LOOKS = r'''
import json, os, sys, time
tree, database = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
os.chdir(tree)
os.environ.update(DJANGO_SETTINGS_MODULE="controlplane.settings", DATABASE_URL=database, DJANGO_DEBUG="0")
import psycopg
admin, name = database.rsplit("/", 1)
with psycopg.connect(admin + "/postgres", autocommit=True) as conn:
    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.execute(f'CREATE DATABASE "{name}"')
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.utils import timezone
from core.catalog import build_spec
from graphs import services
from graphs.models import Deployment
from graphs.runtimes.base import Observation, PodStatus
from graphs.status_cache import observation_record
now = timezone.now()
deployments = []
for i in range(20):
    graph = services.graph_create(spec=build_spec(template="mocker-disagg", name=f"look-{i}", backend="mocker"))
    deployments.append(Deployment.objects.create(graph=graph, runtime="kubernetes", namespace="ns", revision=graph.head,
                                                 active=True, state="ready"))
def pods(i, flipped):
    return [PodStatus(name=f"look-{i}-decode-{j}", service="decode", role="decode", phase="Running",
                      ready=not (flipped and j == 0), started_at=now, node="node-1", command=["python3"],
                      args=["-m", "dynamo.vllm"]) for j in range(10)]
for d in deployments:
    observation_record(d, Observation(state="ready", pods=pods(0, False)), observed_generation=1)
out = {}
for kind, flip in (("unchanged", False), ("one_pod_changed", True)):
    started, n = time.perf_counter(), 0
    for look in range(15):
        for i, d in enumerate(deployments):
            look_at = Observation(state="ready", pods=pods(i, flip and look % 2 == 0))
            observation_record(d, look_at, observed_generation=1)
            n += 1
    out[kind] = (time.perf_counter() - started) / n * 1000
print(json.dumps(out))
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", default="postgres://postgres@127.0.0.1:5432/cp_bench_observation")
    parser.add_argument("--output", default="observation")
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    if not (args.baseline / "graphs" / "status_cache.py").is_file() or not commit:
        parser.error(f"--baseline: {args.baseline} is not a checkout of the product")
    arms = {"this code": ROOT, f"the code of commit {commit}": args.baseline.resolve()}
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for _ in range(args.rounds):
        for arm, tree in arms.items():
            done = subprocess.run([sys.executable, "-c", LOOKS, str(tree), args.database], capture_output=True,
                                  text=True, check=True)
            runs[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
    results = {arm: {kind: {"median_ms": round(statistics.median(r[kind] for r in rounds), 2),
                            "rounds_ms": [round(r[kind], 2) for r in rounds]}
                     for kind in ("unchanged", "one_pod_changed")} for arm, rounds in runs.items()}
    for arm, kinds in results.items():
        print(f"{arm}: a look with nothing changed {kinds['unchanged']['median_ms']} ms, "
              f"with one pod changed {kinds['one_pod_changed']['median_ms']} ms (median of {args.rounds} rounds)")
    path = record.write(args.output, {
        "setup": {"database": "postgresql", "graphs": 20, "pods_per_graph": 10, "looks_per_graph": 15,
                  "rounds": args.rounds, "compared_with": f"commit {commit}, round for round"},
        "results": results})
    print(f"written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
