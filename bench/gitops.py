"""Graphs kept in Git, end to end on this machine, with a real web server, a real Celery worker
and real git (a bare repository pushed to by a separate clone):

* push → revision: a commit is pushed, the Git host's webhook (a GitHub-signed POST) reaches the
  web server, the worker syncs; timed until the API shows the commit's revision (goal < 10 s);
* product → commit: a revision is saved through the API; timed until the commit is on the
  remote branch (goal < 5 s);
* 100 graphs: one repository of 100 manifests synced the first time, then after one commit
  changing all 100, then after 100 commits of one file each (goal < 30 s each).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/cp_bench CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        python bench/gitops.py [ROUNDS]          # writes bench/results/gitops.json"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402
from bench.proxy import wait_http  # noqa: E402
from tests.git_fixtures import _free_port as free_port  # noqa: E402  (in LOCAL_RUNTIME_PORT_MIN..MAX)

SECRET = "bench-webhook-secret"


def _start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _wait(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} did not happen within {timeout} s")


def _summary(values: list[float]) -> dict:
    return {"p50_s": round(statistics.median(values), 3), "max_s": round(max(values), 3),
            "min_s": round(min(values), 3), "n": len(values)}


def end_to_end(remote, rounds: int) -> dict:
    """The two round trips through the web server and the worker."""
    import httpx
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from accounts.tokens import token_create
    from repos import services
    from repos.sync import repository_sync
    from tests.git_fixtures import git, manifest

    admin = get_user_model().objects.create_user(username="bench-admin", email="bench@example.test")
    admin.groups.add(Group.objects.get_or_create(name="admin")[0])
    _token, key = token_create(user=admin, name="bench", via="system")
    remote.write("graphs/alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = services.repository_create(name="bench", url=remote.url, path="graphs", webhook_secret=SECRET)
    repository_sync(repository=repo)

    port = free_port()
    env = {**os.environ, "DJANGO_DEBUG": "0", "CELERY_TASK_ALWAYS_EAGER": "0",
           "CONTROLPLANE_VAR_DIR": str(settings.VAR_DIR)}
    logs = Path(tempfile.mkdtemp(prefix="cp-bench-gitops-logs-"))
    # The web server as `make up` and deploy/ run it: stock uvicorn on the ASGI application.
    web = _start(["-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                  "--workers", "1", "--no-access-log", "--log-level", "warning"], env, logs / "web.log")
    worker = _start(["-m", "celery", "-A", "controlplane", "worker", "--pool", "solo", "--without-gossip",
                     "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"], env, logs / "worker.log")
    base = f"http://127.0.0.1:{port}"
    push_to_revision, change_to_commit = [], []
    try:
        wait_http(f"{base}/healthz", timeout=60)
        http = httpx.Client(base_url=base, headers={"Authorization": f"Token {key}"}, timeout=30)
        time.sleep(2)  # the worker connects to the broker
        for i in range(rounds):
            # Git → product: push, the host calls the webhook, the worker syncs.
            remote.write("graphs/alpha.yaml", manifest("alpha", replicas=2 + i % 5 + (i // 5)))
            sha = remote.commit(f"git change {i}")
            remote.push()
            t0 = time.monotonic()
            body = json.dumps({"ref": "refs/heads/main", "after": sha}).encode()
            sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            hook = http.post("/api/repos/bench/webhook/", content=body, headers={
                "Content-Type": "application/json", "X-Hub-Signature-256": sig, "X-GitHub-Event": "push"})
            assert hook.status_code == 202, hook.text

            def imported(sha=sha):
                rows = http.get("/api/graphs/alpha/revisions/").json()["results"]
                return rows and (rows[0].get("git") or {}).get("sha") == sha

            _wait(imported, 30, f"the revision of {sha[:12]}")
            push_to_revision.append(time.monotonic() - t0)

            # Product → Git: a revision through the API, until the commit is on the branch.
            graph = http.get("/api/graphs/alpha/").json()
            spec = graph["spec"]
            spec["services"][1]["replicas"] = 20 + i
            message = f"product change {i}"
            t0 = time.monotonic()
            saved = http.put("/api/graphs/alpha/", json={"spec": spec, "message": message})
            assert saved.status_code == 200, saved.text
            _wait(lambda message=message: git("--git-dir", str(remote.bare), "log", "-1", "--format=%s",
                                               "main").strip() == message, 30, f"the commit of {message!r}")
            change_to_commit.append(time.monotonic() - t0)
            remote.pull()
    finally:
        _stop(web)
        _stop(worker)
    return {"push_to_revision_via_webhook": {**_summary(push_to_revision), "goal_s": 10},
            "product_change_to_commit": {**_summary(change_to_commit), "goal_s": 5}}


def hundred_graphs(remote) -> dict:
    from repos import services
    from repos.sync import repository_sync
    from tests.git_fixtures import manifest

    for i in range(100):
        remote.write(f"graphs/g{i:03d}.yaml", manifest(f"g{i:03d}"))
    remote.commit("100 graphs")
    remote.push()
    repo = services.repository_create(name="hundred", url=remote.url, path="graphs")
    out = {}
    t0 = time.monotonic()
    result = repository_sync(repository=repo)
    out["first_sync"] = {"seconds": round(time.monotonic() - t0, 3), "imported": len(result.imported),
                         "error": result.error}
    for i in range(100):
        remote.write(f"graphs/g{i:03d}.yaml", manifest(f"g{i:03d}", replicas=2))
    remote.commit("all 100 to two workers")
    remote.push()
    t0 = time.monotonic()
    result = repository_sync(repository=repo)
    out["one_commit_changing_100"] = {"seconds": round(time.monotonic() - t0, 3), "imported": len(result.imported)}
    for i in range(100):
        remote.write(f"graphs/g{i:03d}.yaml", manifest(f"g{i:03d}", replicas=3))
        remote.commit(f"g{i:03d} to three workers")
    remote.push()
    t0 = time.monotonic()
    result = repository_sync(repository=repo)
    out["100_commits_one_file_each"] = {"seconds": round(time.monotonic() - t0, 3), "imported": len(result.imported),
                                        "commits": result.commits}
    out["goal_s"] = 30
    return out


def main(rounds: int = 10) -> dict:
    from bench.run import setup_django

    setup_django()
    from django.conf import settings

    from tests.git_fixtures import Remote

    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        print("note: SQLite; set BENCH_DATABASE_URL to a PostgreSQL database for the web server and worker")
    root = Path(tempfile.mkdtemp(prefix="cp-bench-gitops-"))
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    data = {"rounds": rounds, "git": git_version,
            "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
            "broker": settings.CELERY_BROKER_URL.split("://")[0]}
    data["hundred_graphs"] = hundred_graphs(Remote(root / "hundred"))
    data.update(end_to_end(Remote(root / "e2e"), rounds))
    path = record.write("gitops", data)
    print(json.dumps(data, indent=2))
    print(f"wrote {path}")
    return data


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rounds", nargs="?", type=int, default=10, help="push and save rounds (10)")
    main(parser.parse_args().rounds)
