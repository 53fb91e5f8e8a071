"""The fault bench: the product as deploy/ runs it, on this host (bench/fault_stack.py), under a
steady load of scale operations, applies (to the Kubernetes API emulator), benchmark runs,
playground chats and page and API reads, through faults one after another, then overlapping.

For each fault it reports the operations and benchmark runs asked for during it that were
lost (answered 2xx, then no row), doubled (more Scaled/Applied events than succeeded
operations) or stuck (not terminal 60 s after the fault ended); the 5xx answers of pages
and the API; the seconds from the fault's end until a page and the API serve again and until
every job is terminal; and the data lost: revisions, audit rows and conversations the load
recorded that are gone at the end. Bounded: every fault holds HOLD seconds, every wait has a
deadline, the load is paced, and everything talks to 127.0.0.1 only.

    python -m bench.faults [--hold 8] [--pause 30] [--only db-terminate,db-pause]

Needs root (a tmpfs mount for var/, PostgreSQL run as its own user) and Debian's
PostgreSQL 15 and redis-server. Writes bench/results/faults.json."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: python bench/faults.py
from bench import record
from bench.fault_stack import GIT_LOGIN, Stack

SETUP = """
from django.contrib.auth.models import User
from clusters.models import Cluster
from graphs import operations, services
from core.catalog import PoolFields, build_spec
from endpoint.services import policy_set
pool = PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret="")
local = services.graph_create(spec=build_spec(template="mocker-disagg", name="fl", model="bench-model",
                                              backend="mocker", prefill=pool, decode=pool))
operations.graph_apply(graph=local, via="cli")
from repos.services import repository_create
repository_create(name="bench", url="{git_url}", username="{git_user}", password="{git_password}", via="cli")
Cluster.objects.create(name="emu", kubeconfig="{kubeconfig}", context="emulator", namespaces=["llm"])
services.graph_create(spec=build_spec(template="vllm-disagg", name="fk", model="Qwen/Qwen3-0.6B",
                                      prefill=PoolFields(gpus=1), decode=PoolFields(gpus=1)))
"""
# Jobs recorded before a moment (the fault's end) that are not terminal yet: the load keeps
# asking for new ones, which are not the fault's to finish.
ACTIVE_SQL = ("SELECT (SELECT count(*) FROM graphs_operation WHERE state IN ('pending','running') AND created_at "
              "<= to_timestamp({t})) + (SELECT count(*) FROM benchmarks_benchmarkrun WHERE state IN "
              "('pending','running') AND created_at <= to_timestamp({t}))")


@dataclass
class Load:
    """What the load asked for and what came back, shared by its threads."""

    base: str
    token: str
    password: str
    answers: list[tuple[float, str, int]] = field(default_factory=list)  # (time, what, status; 0: no answer)
    timed: list[tuple[float, str, int, float, str]] = field(default_factory=list)  # (asked at, what, status, s, call)
    operations: list[tuple[float, int]] = field(default_factory=list)  # (time, id) answered 2xx
    runs: list[tuple[float, int]] = field(default_factory=list)
    revisions: list[tuple[str, int]] = field(default_factory=list)
    conversations: list[int] = field(default_factory=list)
    samples: dict[str, list[str]] = field(default_factory=lambda: {"api": [], "page": [], "chat": [], "sso": [],
                                                                   "idp": []})
    sign_ins: list[tuple[float, str]] = field(default_factory=list)  # (time, "signed in" or the failure page's kind)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=15, headers={"Authorization": f"Token {self.token}"})

    def note(self, what: str, response: httpx.Response | None) -> httpx.Response | None:
        with self.lock:
            self.answers.append((time.time(), what, response.status_code if response is not None else 0))
            if response is not None and response.status_code >= 500 and len(self.samples[what]) < 3:
                self.samples[what].append(f"{response.request.method} {response.request.url.path} -> "
                                          f"{response.status_code}: {response.text[:300]}")
        return response

    def call(self, client: httpx.Client, what: str, method: str, url: str, **kwargs) -> httpx.Response | None:
        asked, started = time.time(), time.monotonic()
        try:
            response = client.request(method, url, **kwargs)
        except httpx.HTTPError:
            response = None
        with self.lock:
            self.timed.append((asked, what, response.status_code if response is not None else 0,
                               time.monotonic() - started, f"{method} {url}"))
        return self.note(what, response)

    def session(self) -> httpx.Client | None:
        """A logged-in browser session (for pages and conversations), or None while it cannot log in."""
        client = httpx.Client(base_url=self.base, timeout=15)
        try:
            client.get("/login/")
            csrf = client.cookies.get("csrftoken", "")
            r = client.post("/login/", data={"username": "operator", "password": self.password,
                                             "csrfmiddlewaretoken": csrf}, headers={"Referer": self.base + "/login/"})
            if r.status_code in (200, 302) and client.cookies.get("sessionid"):
                return client
        except httpx.HTTPError:
            pass
        client.close()
        return None

    # --- the load's threads --------------------------------------------------------------------

    def scaler(self) -> None:
        replicas = 1
        with self.api() as api:
            while not self.stop.wait(2.0):
                replicas = 3 - replicas
                r = self.call(api, "api", "POST", "/api/graphs/fl/scale/", json={"service": "decode",
                                                                                  "replicas": replicas})
                if r is not None and r.status_code == 202:
                    with self.lock:
                        self.operations.append((time.time(), r.json()["id"]))

    def applier(self) -> None:
        with self.api() as api:
            while not self.stop.wait(3.0):
                r = self.call(api, "api", "GET", "/api/graphs/fk/")
                if r is None or r.status_code != 200:
                    continue
                graph = r.json()
                spec = graph["spec"]
                decode = next(s for s in spec["services"] if s["name"] == "decode")
                decode["replicas"] = 1 + decode["replicas"] % 3
                r = self.call(api, "api", "PUT", "/api/graphs/fk/", json={
                    "spec": spec, "message": "fault bench", "expected_revision": graph["revision"]})
                if r is not None and r.status_code == 200:
                    with self.lock:
                        self.revisions.append(("fk", r.json()["revision"]))
                r = self.call(api, "api", "POST", "/api/graphs/fk/apply/", json={
                    "runtime": "kubernetes", "cluster": "emu", "namespace": "llm"})
                if r is not None and r.status_code == 202:
                    with self.lock:
                        self.operations.append((time.time(), r.json()["id"]))

    def benchmarker(self) -> None:
        with self.api() as api:
            while not self.stop.wait(15.0):
                r = self.call(api, "api", "POST", "/api/benchmarks/runs/", json={
                    "graph": "fl", "profile": "custom", "concurrency": 2, "request_count": 8,
                    "input_tokens_mean": 32, "output_tokens_mean": 8, "max_seconds": 60})
                if r is not None and r.status_code in (201, 202):
                    with self.lock:
                        self.runs.append((time.time(), r.json()["id"]))

    def chatter(self) -> None:
        session = None
        with self.api() as api:
            while not self.stop.wait(1.5):
                body = {"model": "bench-model", "messages": [{"role": "user", "content": "hello"}],
                        "max_tokens": 8, "stream": False}
                r = self.call(api, "chat", "POST", "/api/playground/fl/v1/chat/completions", json=body)
                if r is None or r.status_code != 200 or random.random() > 0.3:
                    continue
                session = session or self.session()
                if session is None:
                    continue
                reply = r.json()["choices"][0]["message"]["content"]
                saved = self.call(session, "page", "POST", "/playground/conversations/new/", json={
                    "graph": "fl", "title": "fault bench", "messages": [
                        {"role": "user", "content": "hello"}, {"role": "assistant", "content": reply}]},
                    headers={"X-CSRFToken": session.cookies.get("csrftoken", ""), "Referer": self.base + "/"})
                if saved is not None and saved.status_code == 201:
                    with self.lock:
                        self.conversations.append(saved.json()["id"])

    def reader(self) -> None:
        session = None
        with self.api() as api:
            while not self.stop.wait(0.5):
                self.call(api, "api", "GET", "/api/graphs/")
                self.call(api, "api", "GET", "/api/operations/")
                session = session or self.session()
                if session is not None:
                    self.call(session, "page", "GET", "/graphs/")
                    self.call(session, "page", "GET", "/graphs/fl/")

    def syncer(self) -> None:
        """"Sync now" on the Git repository, as a user presses it (the periodic sync runs too)."""
        with self.api() as api:
            while not self.stop.wait(5.0):
                self.call(api, "api", "POST", "/api/repos/bench/sync/")

    def signer(self) -> None:
        """A whole single sign-on as bob (operator): the product, the provider's login form, the callback."""
        while not self.stop.wait(5.0):
            with httpx.Client(base_url=self.base, timeout=15) as browser, contextlib.suppress(httpx.HTTPError):
                self.sign_ins.append((time.time(), self._sign_in(browser)))

    def _sign_in(self, browser: httpx.Client) -> str:
        r = self.call(browser, "sso", "GET", "/auth/oidc/login/?next=/graphs/")
        hops = 0
        while r is not None and r.status_code in (302, 303) and hops < 12:
            hops += 1
            url = httpx.URL(r.headers["location"])
            url = url if url.is_absolute_url else r.request.url.join(url)
            # The provider's own pages are the provider's answers, not the product's ("idp").
            what = "sso" if str(url).startswith(self.base) else "idp"
            r = self.call(browser, what, "GET", str(url))
            if r is not None and r.status_code == 200 and 'name="login"' in r.text:
                # The provider's login form (dev interactions): any password, the login names the person.
                r = self.call(browser, "idp", "POST", str(r.request.url),
                              data={"prompt": "login", "login": "bob", "password": "x"})
        if r is not None and r.status_code == 200 and browser.cookies.get("sessionid"):
            return "signed in"
        if r is None:
            return "no answer"
        return f"{r.status_code}: {r.text[:80]}" if r.status_code != 200 else "failure page"

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=t, daemon=True) for t in
                   (self.scaler, self.applier, self.benchmarker, self.chatter, self.reader, self.syncer,
                    self.signer)]
        for thread in threads:
            thread.start()
        return threads


# --- the faults ------------------------------------------------------------------------------

def _kill_child(stack: Stack, name: str) -> str:
    """One of ``name``'s worker processes (web: a uvicorn process, not nginx)."""
    children = stack.processes[name].children()
    with contextlib.suppress(psutil.Error):
        children = [c for c in children if "uvicorn" in " ".join(c.cmdline())] or children
    if not children:
        return f"{name} had no child process"
    victim = random.choice(children)
    victim.send_signal(signal.SIGKILL)
    return f"killed {name}'s child {victim.pid}"


def _hold(stack: Stack, name: str, seconds: float, sig=signal.SIGKILL) -> str:
    process = stack.processes[name] if name != "redis" else stack.redis
    process.held = True
    process.kill(sig)
    time.sleep(seconds)
    process.held = False
    process.start()
    return f"{name} down {seconds:.0f}s"


def _fill_disk(stack: Stack, seconds: float) -> str:
    filler = stack.var / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True, check=False)
    time.sleep(seconds)
    filler.unlink(missing_ok=True)
    return "var/ full"


def _pause(stack: Stack, what: str, seconds: float) -> str:
    """Paused, not stopped (SIGSTOP, then SIGCONT): connections stay open and the kernel keeps
    acknowledging, so a client learns nothing until its own deadline."""
    stop = ((lambda sig: stack.pg_signal(sig)) if what == "postgresql" else
            {"redis": stack.redis, "idp": stack.idp, "git": stack.git}[what].signal_group)
    stop(signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        stop(signal.SIGCONT)
    return f"{what} paused {seconds:.0f}s (SIGSTOP)"


def _kube(stack: Stack, seconds: float, **fault) -> str:
    stack.kube.inject("*", ".*", times=None, **fault)
    time.sleep(seconds)
    stack.kube.clear_faults()
    return f"Kubernetes API {fault}"


def faults(stack: Stack, hold: float, pause: float = 30.0) -> dict:
    terminate = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'cp' "
                 "AND pid <> pg_backend_pid()")

    def db_restart():
        stack.pg_stop()
        time.sleep(hold)
        stack.pg_start()
        return f"PostgreSQL down {hold:.0f}s"

    single = {
        "db-terminate": lambda: f"terminated {stack.psql(terminate)} connections",
        "db-restart": db_restart,
        "broker-restart": lambda: _hold(stack, "redis", hold / 2) + ", queue lost",
        "worker-kill": lambda: (stack.processes["worker-1"].kill(), "worker-1 SIGKILLed (restarted)")[1],
        "pool-process-kill": lambda: _kill_child(stack, "worker-2"),
        "operator-kill": lambda: (stack.processes["operator"].kill(), "operator SIGKILLed (restarted)")[1],
        "web-worker-kill": lambda: _kill_child(stack, "web"),
        "prometheus-stop": lambda: _hold(stack, "prometheus", hold, signal.SIGTERM),
        "disk-full": lambda: _fill_disk(stack, hold),
        "kube-hang": lambda: _kube(stack, hold, delay=30.0),
        "kube-500": lambda: _kube(stack, hold, status=500),
        "db-pause": lambda: _pause(stack, "postgresql", pause),
        "redis-pause": lambda: _pause(stack, "redis", pause),
        "idp-pause": lambda: _pause(stack, "idp", pause),
        "git-pause": lambda: _pause(stack, "git", pause),
    }

    def together(*names):
        def run():
            threads = [threading.Thread(target=single[n]) for n in names]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return " + ".join(names)
        return run

    return {**single,
            "overlap-db-broker-worker": together("db-restart", "broker-restart", "worker-kill"),
            "overlap-kube-operator-web-disk": together("kube-500", "operator-kill", "web-worker-kill", "disk-full")}


# --- measuring -------------------------------------------------------------------------------

def _serving(base: str, token: str, password: str) -> bool:
    try:
        api = httpx.get(base + "/api/graphs/", headers={"Authorization": f"Token {token}"}, timeout=3)
        page = httpx.get(base + "/login/", timeout=3)
        return api.status_code == 200 and page.status_code == 200
    except httpx.HTTPError:
        return False


def _until(predicate, timeout: float, interval: float = 0.25) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with contextlib.suppress(Exception):
            if predicate():
                return round(time.monotonic() - start, 2)
        time.sleep(interval)
    return None


def account(stack: Stack, load: Load, windows: list[dict]) -> dict:
    """Per fault: jobs lost, stuck, doubled; 5xx; data lost (over everything the load recorded)."""
    rows = {int(i): s for i, s in (line.split("|") for line in stack.psql(
        "SELECT id, state FROM graphs_operation").splitlines() if line)}
    runs = {int(i): s for i, s in (line.split("|") for line in stack.psql(
        "SELECT id, state FROM benchmarks_benchmarkrun").splitlines() if line)}
    audited = {int(x) for x in stack.psql("SELECT (after->>'operation') FROM audit_auditrecord "
                                          "WHERE after ? 'operation'").splitlines() if x}
    for window in windows:
        start, end = window["started_at"], window["next_at"]
        mine = [i for t, i in load.operations if start <= t < end]
        my_runs = [i for t, i in load.runs if start <= t < end]
        window["operations"] = {"asked": len(mine), "lost": sum(i not in rows for i in mine),
                                "stuck": sum(rows.get(i) in ("pending", "running") for i in mine),
                                "failed": sum(rows.get(i) == "failed" for i in mine),
                                "no_audit_row": sum(i not in audited for i in mine)}
        window["benchmark_runs"] = {"asked": len(my_runs), "lost": sum(i not in runs for i in my_runs),
                                    "stuck": sum(runs.get(i) in ("pending", "running") for i in my_runs),
                                    "failed": sum(runs.get(i) == "failed" for i in my_runs)}
        # The product's answers: the identity provider's own (a paused one gives none) are not.
        answers = [(w, s) for t, w, s in load.answers if start <= t < end and w != "idp"]
        ids, run_ids = ",".join(map(str, mine)) or "0", ",".join(map(str, my_runs)) or "0"  # integers only
        failed_ops = stack.psql("SELECT kind || ': ' || split_part(result, E'\\n', 1) FROM graphs_operation "  # noqa: S608
                                f"WHERE state = 'failed' AND id IN ({ids})")
        failed_runs = stack.psql("SELECT split_part(error, E'\\n', 1) FROM benchmarks_benchmarkrun "  # noqa: S608
                                 f"WHERE state = 'failed' AND id IN ({run_ids})")
        window["failures"] = [line[:300] for line in (failed_ops + "\n" + failed_runs).splitlines() if line]
        timed = sorted((d, s, call) for t, w, s, d, call in load.timed if start <= t < end and w != "idp")
        window["sign_ins"] = dict(Counter(result for t, result in load.sign_ins if start <= t < end))
        window["slowest_answer_s"] = round(timed[-1][0], 2) if timed else None
        window["slowest_answers"] = [f"{call} -> {s or 'no answer'} after {d:.1f} s" for d, s, call in timed[-3:]]
        window["answers"] = {"total": len(answers), "5xx": sum(s >= 500 and s != 503 for _, s in answers),
                             "503": sum(s == 503 for _, s in answers), "no_answer": sum(s == 0 for _, s in answers),
                             "5xx_by_kind": {k: dict(Counter(s for w, s in answers if w == k and s >= 500))
                                             for k in ("api", "page", "chat", "sso")}}
    events = dict(line.split("|") for line in stack.psql(
        "SELECT reason, count(*) FROM graphs_event e JOIN graphs_graph g ON g.id = e.graph_id "
        "WHERE reason IN ('Scaled', 'Applied') GROUP BY reason").splitlines() if line)
    succeeded = dict(line.split("|") for line in stack.psql(
        "SELECT kind, count(*) FROM graphs_operation WHERE state = 'succeeded' AND NOT (params ? 'dryRun' "
        "AND (params->>'dryRun')::boolean) GROUP BY kind").splitlines() if line)
    revisions = {(g, int(n)) for g, n in (line.split("|") for line in stack.psql(
        "SELECT g.name, r.number FROM graphs_revision r JOIN graphs_graph g ON g.id = r.graph_id").splitlines())}
    conversations = {int(x) for x in stack.psql("SELECT id FROM playground_conversation").splitlines() if x}
    return {"doubled": {"scale": int(events.get("Scaled", 0)) - int(succeeded.get("scale", 0)),
                        "apply": int(events.get("Applied", 0)) - int(succeeded.get("apply", 0))},
            "data_lost": {"revisions": sum(r not in revisions for r in load.revisions),
                          "conversations": sum(c not in conversations for c in load.conversations),
                          "operations_without_audit_row": sum(i not in audited for _, i in load.operations)},
            "recorded": {"revisions": len(load.revisions), "conversations": len(load.conversations),
                         "operations": len(load.operations), "benchmark_runs": len(load.runs)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hold", type=float, default=8.0, help="seconds each fault lasts")
    parser.add_argument("--pause", type=float, default=30.0, help="seconds a paused (SIGSTOP) server stays paused")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds allowed for every job to end")
    parser.add_argument("--only", default="", help="comma-separated fault names")
    parser.add_argument("--name", default="faults", help="bench/results/<name>.json")
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy the processes' logs here at the end")
    args = parser.parse_args()
    stack = Stack()
    password = "bench-" + os.urandom(6).hex()
    try:
        stack.setup()
        stack.manage("migrate", "--verbosity", "0")
        stack.manage("bootstrap", "--admin-password", password, "--demo-users")
        stack.manage("shell", "-c", SETUP.replace("{kubeconfig}", str(stack.kubeconfig)).replace(
            "{git_url}", stack.git_url).replace("{git_user}", GIT_LOGIN[0]).replace("{git_password}", GIT_LOGIN[1]))
        token = stack.manage("create_token", "operator", "--name", "bench").strip().split()[-1]
        stack.start_product()
        base = f"http://127.0.0.1:{stack.web_port}"
        ready = _until(lambda: stack.psql("SELECT state FROM graphs_deployment d JOIN graphs_graph g ON "
                                          "g.id = d.graph_id WHERE g.name = 'fl'") == "ready", 240, 1.0)
        if ready is None:
            raise SystemExit("the local graph did not become ready within 240 s")
        load = Load(base=base, token=token, password=password)
        load.start()
        time.sleep(20)  # steady state before the first fault
        windows = []
        plan = faults(stack, args.hold, args.pause)
        names = [n for n in plan if not args.only or n in args.only.split(",")]
        for name in names:
            started = time.time()
            what = plan[name]()
            ended = time.time()
            serve = _until(lambda: _serving(base, token, password), 60)
            terminal = _until(lambda t=ended: stack.psql(ACTIVE_SQL.format(t=t)) == "0", args.settle, 0.5)
            windows.append({"fault": name, "what": what, "started_at": started, "ended_at": ended,
                            "seconds_down": round(ended - started, 1), "serving_again_after_s": serve,
                            "all_jobs_terminal_after_s": terminal})
            print(f"{name}: {what}; serving again after {serve}s, all terminal after {terminal}s", flush=True)
            time.sleep(5)  # load between faults
        load.stop.set()
        time.sleep(2)
        end = time.time()
        for i, window in enumerate(windows):
            window["next_at"] = windows[i + 1]["started_at"] if i + 1 < len(windows) else end
        _until(lambda: stack.psql(ACTIVE_SQL.format(t=end)) == "0", args.settle, 0.5)
        totals = account(stack, load, windows)
        for window in windows:
            for key in ("started_at", "ended_at", "next_at"):
                window.pop(key)
        restarts = {p.name: p.restarts for p in [*stack.processes.values(), stack.redis]}
        path = record.write(args.name, {"hold_seconds": args.hold, "faults": windows, **totals,
                                        "supervisor_restarts": restarts, "samples_of_5xx": load.samples,
                                        "requests": len(load.answers)})
        print(json.dumps({"faults": windows, **totals}, indent=1))
        print(f"wrote {path}")
    finally:
        stack.stop(keep_logs=args.keep_logs)


if __name__ == "__main__":
    main()
