"""The cluster watchers under churn: a fleet's pods in the API emulator (tests/k8s_emulator, real
HTTP, the real client), the watchers as the operator process runs them (run_cluster_watchers in
a process of their own), PostgreSQL. Pods flip readiness at --rate a second, picked at random
across the fleet, for --seconds; each flip's lag is the time from the emulator's write to the
Pod row showing it (read every 20 ms), p50/p95/p99/max, with the rows that never showed it
within 30 s, the first sync of the whole fleet and the watcher process's memory.

    python bench/watch_churn.py                                  # 500 graphs, 5,000 pods
    python bench/watch_churn.py --graphs 5000 --rate 50 --baseline /tmp/base --output watch-churn-fleet

Arms: the watchers as they ship; the same counting the cluster's free GPUs every cycle (a list of
every pod of the cluster, KUBERNETES_GPU_READ_SECONDS=0) instead of every 5 minutes; and, with
--baseline CHECKOUT, the watchers of another checkout (git worktree add /tmp/base <commit>); each
in turn, on the same emulator and database.
Writes bench/results/<output>.json."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402
from bench.pages_http import CLUSTERS, NAMESPACES, analyze, recreate_database  # noqa: E402

POLL_S = 0.02
UNSEEN_AFTER_S = 30.0
WATCHERS = """
import threading, django
django.setup()
from graphs.runtimes.kubernetes.watch import run_cluster_watchers
run_cluster_watchers(threading.Event(), interval=5.0)
"""


def seed(kube, kubeconfig: Path, n_graphs: int, pods_per_graph: int) -> list[tuple[str, str]]:
    """Graphs bench-0000... over NAMESPACES namespaces and CLUSTERS registered clusters (all
    of them this one emulator; a cluster watches its own third of the namespaces), each applied
    (a Deployment row) with ``pods_per_graph`` ready decode pods in the emulator. The pods, as
    (namespace, name)."""
    from django.db import transaction

    from clusters.models import Cluster
    from core.catalog import build_spec
    from graphs import services
    from graphs.models import Deployment

    namespaces = [f"ns-{n:02d}" for n in range(NAMESPACES)]
    for namespace in namespaces:
        kube.add_namespace(namespace)
    clusters = [Cluster.objects.create(name=f"cluster-{c}", kubeconfig=str(kubeconfig),
                                       namespaces=namespaces[c::CLUSTERS]) for c in range(CLUSTERS)]
    pods = []
    for i in range(n_graphs):
        name, namespace = f"bench-{i:04d}", namespaces[i % NAMESPACES]
        with transaction.atomic():
            graph = services.graph_create(spec=build_spec(template="mocker-disagg", name=name, model="m",
                                                          backend="mocker"))
            Deployment.objects.create(graph=graph, runtime="kubernetes", cluster=clusters[i % NAMESPACES % CLUSTERS],
                                      namespace=namespace, revision=graph.head, active=True, state="progressing")
        for j in range(pods_per_graph):
            pod = f"{name}-decode-{j}"
            kube.set_pod(pod, namespace, dgd=name, component="decode", component_type="worker", ready=True)
            pods.append((namespace, pod))
    return pods


def start_watchers(env: dict[str, str], tree: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WATCHERS], cwd=tree, env={**os.environ, **env,
                            "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def rows_ready(names: list[str]) -> dict[str, bool]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT name, ready FROM graphs_pod WHERE name = ANY(%s)", [names])
        return dict(cursor.fetchall())


def first_sync(n_pods: int, since: float, proc: subprocess.Popen, timeout: float = 1800) -> float:
    """Seconds until every pod has a row and every deployment was observed after ``since``."""
    from django.db import connection

    while time.time() - since < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the watchers exited: {proc.stderr.read().decode()[-2000:]}")
        with connection.cursor() as cursor:
            cursor.execute("SELECT (SELECT count(*) FROM graphs_pod), (SELECT count(*) FROM graphs_deployment "
                           "WHERE observed_at IS NULL OR observed_at < to_timestamp(%s))", [since])
            pods, stale = cursor.fetchone()
        if pods >= n_pods and stale == 0:
            return time.time() - since
        time.sleep(0.5)
    raise TimeoutError("the watchers did not sync the fleet")


def churn(kube, pods: list[tuple[str, str]], ready: dict[str, bool], rate: float, seconds: float) -> dict:
    """Flip pods' readiness (``ready``: as the emulator has it, kept from arm to arm) at ``rate``
    a second for ``seconds``; each flip's lag to its row."""
    pending: dict[str, tuple[bool, float]] = {}  # pod -> (the readiness written, when)
    lags: list[float] = []
    written_at: list[float] = []  # each seen flip's time of writing, beside its lag
    lock = threading.Lock()
    done = threading.Event()

    def watch_rows() -> None:
        from django.db import connection

        while not done.is_set() or pending:
            with lock:
                asked = list(pending)
            if asked:
                seen = rows_ready(asked)
                now = time.monotonic()
                with lock:
                    for name, row in seen.items():
                        want = pending.get(name)
                        if want is not None and row == want[0]:
                            lags.append(now - want[1])
                            written_at.append(want[1])
                            del pending[name]
                    if done.is_set() and pending and now - max(t for _, t in pending.values()) > UNSEEN_AFTER_S:
                        break
            time.sleep(POLL_S)
        connection.close()

    reader = threading.Thread(target=watch_rows, daemon=True)
    reader.start()
    rng = random.Random(7)
    start = time.monotonic()
    written = 0
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate) + 1
        while written < due:
            namespace, name = rng.choice(pods)
            with lock:
                if name in pending:
                    continue
            ready[name] = not ready[name]
            dgd = name.rsplit("-decode-", 1)[0]
            with lock:
                pending[name] = (ready[name], time.monotonic())
            kube.set_pod(name, namespace, dgd=dgd, component="decode", component_type="worker", ready=ready[name])
            written += 1
        time.sleep(0.005)
    achieved = written / (time.monotonic() - start)
    done.set()
    reader.join(UNSEEN_AFTER_S + 10)
    with lock:
        unseen = len(pending)
        pending.clear()
    lags_ms = sorted(lag * 1000 for lag in lags)
    # Where in the churn the slow ones fall: the worst lag of the flips written in each 5 s (a
    # tail bunched in a few windows is the watch cycle's end, not the watcher's pace).
    windows: dict[int, float] = {}
    for at, lag in zip(written_at, lags, strict=True):
        window = int((at - start) // 5)
        windows[window] = max(windows.get(window, 0.0), lag * 1000)

    def pct(p: float) -> float | None:
        return round(lags_ms[min(len(lags_ms) - 1, int(len(lags_ms) * p))], 1) if lags_ms else None

    return {"changes": written, "rate_per_s": round(achieved, 1), "seen": len(lags_ms), "unseen_after_30s": unseen,
            "lag_ms": {"p50": pct(0.5), "p95": pct(0.95), "p99": pct(0.99), "max": round(lags_ms[-1], 1) if lags_ms
                       else None, "mean": round(statistics.fmean(lags_ms), 1) if lags_ms else None},
            "worst_lag_ms_per_5s": [round(windows.get(w, 0.0), 1) for w in range(int(seconds // 5) + 1)]}


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def vacuum(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def schema_of(tree: Path) -> list[str]:
    """Migrate the database back to the schema the code in ``tree`` ships (the latest migration
    of each app there), with this code's migrations, which know how to go back: a baseline's
    watchers then write through the schema they were written for (its triggers included)."""
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(connection)
    moved = []
    for app in sorted({app for app, _ in loader.disk_migrations}):
        theirs = sorted(p.stem for p in (tree / app / "migrations").glob("[0-9][0-9][0-9][0-9]_*.py"))
        ours = sorted(name for a, name in loader.disk_migrations if a == app)
        if theirs and ours and theirs[-1] != ours[-1] and theirs[-1] in ours:
            call_command("migrate", app, theirs[-1], verbosity=0)
            moved.append(f"{app} {theirs[-1]}")
    return moved


def memory_mb(proc: subprocess.Popen) -> float | None:
    import psutil

    try:
        return round(psutil.Process(proc.pid).memory_info().rss / 2**20, 1)
    except psutil.Error:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=500)
    parser.add_argument("--pods-per-graph", type=int, default=10)
    parser.add_argument("--rate", type=float, default=50, help="pod changes a second, across the fleet")
    parser.add_argument("--seconds", type=float, default=60, help="of churn (the watch cycle is 30 s: two ends "
                        "of a cycle fall in it)")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT")
    parser.add_argument("--baseline-first", action="store_true", help="measure the baseline's watchers first")
    parser.add_argument("--without-gpu-arm", action="store_true",
                        help="leave out the arm that counts free GPUs every cycle")
    parser.add_argument("--database", default=os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cp_bench_churn"))
    parser.add_argument("--output", default="watch-churn")
    args = parser.parse_args()
    if args.graphs < 1 or args.pods_per_graph < 1 or args.rate <= 0 or args.seconds <= 0:
        parser.error("--graphs, --pods-per-graph, --rate and --seconds must be positive")
    baseline_commit = None
    if args.baseline:
        baseline_commit = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True).stdout.strip()
        if not (args.baseline / "graphs" / "runtimes" / "kubernetes" / "watch.py").is_file() or not baseline_commit:
            parser.error(f"--baseline: {args.baseline} is not a checkout of the product")

    var = Path(tempfile.mkdtemp(prefix="cp-bench-churn-"))
    env = {"DATABASE_URL": args.database, "CONTROLPLANE_VAR_DIR": str(var), "DJANGO_DEBUG": "0",
           "DJANGO_SECRET_KEY": "bench-only-secret-key", "DJANGO_SETTINGS_MODULE": "controlplane.settings",
           "KUBERNETES_WATCH_SECONDS": "30"}
    recreate_database(args.database)
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    from tests.k8s_emulator import KubeEmulator

    call_command("migrate", verbosity=0)
    kube = KubeEmulator().start()
    kubeconfig = kube.write_kubeconfig(var / "kubeconfig")
    began = time.time()
    pods = seed(kube, kubeconfig, args.graphs, args.pods_per_graph)
    analyze(args.database)
    print(f"seeded {args.graphs:,} graphs and {len(pods):,} pods in {time.time() - began:.0f} s")

    # The watchers as they ship (free GPUs counted every 5 minutes, beside the watch), the same
    # counting them every cycle (what a cluster-wide pod list costs the watcher process), and
    # the baseline's.
    arms = [("this code", ROOT, {})]
    if not args.without_gpu_arm:
        arms.append(("this code, free GPUs counted every cycle", ROOT, {"KUBERNETES_GPU_READ_SECONDS": "0"}))
    if args.baseline:
        arms.append((f"the code of commit {baseline_commit}", args.baseline.resolve(), {}))
    if args.baseline_first:  # the first arm writes the fleet's first sync into a fresh database
        arms.insert(0, arms.pop())
    results = {}
    ready = dict.fromkeys((name for _, name in pods), True)
    try:
        # A first sync, not measured: the database's first 50,000 pod rows are written here, not
        # in the first measured arm (which measured 3 to 10 times slower for its place alone).
        warmup = start_watchers(env, ROOT)
        try:
            print(f"warm-up: first sync {first_sync(len(pods), time.time(), warmup):.1f} s (not measured)")
        finally:
            stop(warmup)
        for label, tree, setting in arms:
            if tree != ROOT:
                print(f"{label}: the database migrated back to its schema: {', '.join(schema_of(tree)) or 'the same'}")
            else:
                call_command("migrate", verbosity=0)  # this code's schema (after a baseline that went first)
            # What the last arm left (50,000 pods written at its first sync, then churned) is
            # vacuumed now, not by autovacuum while the next arm is measured (arms were measured
            # 2 to 8 times apart by their order alone).
            vacuum(args.database)
            since = time.time()
            proc = start_watchers({**env, **setting}, tree)
            try:
                synced = first_sync(len(pods), since, proc)
                time.sleep(2)  # the watches are open
                measured = churn(kube, pods, ready, args.rate, args.seconds)
                measured.update(first_sync_s=round(synced, 1), watcher_memory_mb=memory_mb(proc))
            finally:
                stop(proc)
            results[label] = measured
            lag = measured["lag_ms"]
            print(f"{label}: first sync {measured['first_sync_s']} s; {measured['changes']:,} changes at "
                  f"{measured['rate_per_s']}/s; lag p50 {lag['p50']} ms, p95 {lag['p95']}, p99 {lag['p99']}, "
                  f"max {lag['max']}; unseen after 30 s: {measured['unseen_after_30s']}; "
                  f"watcher RSS {measured['watcher_memory_mb']} MB; worst lag per 5 s: "
                  f"{measured['worst_lag_ms_per_5s']}")
    finally:
        kube.stop()
    path = record.write(args.output, {
        "setup": {"graphs": args.graphs, "pods": len(pods), "namespaces": NAMESPACES, "clusters": CLUSTERS,
                  "rate_per_s": args.rate, "seconds": args.seconds, "row_poll_s": POLL_S,
                  "emulator": "tests/k8s_emulator over real HTTP, one for every cluster (each cluster watches "
                              "its own third of the namespaces)",
                  "watchers": "graphs.runtimes.kubernetes.watch.run_cluster_watchers in a process of its own, "
                              "as manage.py runoperator runs it",
                  "database": "postgresql",
                  "compared_with": f"the watchers of commit {baseline_commit}" if baseline_commit else None},
        "results": results})
    print(f"written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
