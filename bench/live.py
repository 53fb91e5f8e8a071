"""A graph page's status, pushed against polled, measured in a real browser (Debian's Chromium
driven by Playwright) on the product as `make up` runs it (`manage.py up`: uvicorn, the Celery
worker, the local operator running Dynamo's frontend and mocker workers as processes).

    python bench/live.py --baseline /tmp/base            # /tmp/base: a checkout of the code before
    python bench/live.py --baseline /tmp/base --moves 10 --databases sqlite,postgresql

For each arm (this checkout; the baseline checkout, whose page polls its status every 2 s) and
each database (SQLite, the laptop default, where a change is found by a read every 0.25 s per web
process while a page is open; PostgreSQL, as deploy/ runs it, where the database notifies): a
mocker graph is applied from its page and left Ready, then the decode slider is moved 1 -> 2 and
back ``--moves`` times. In the page, a MutationObserver stamps (performance.now()) the moment the
slider's change event fires, the moment the new pod's row is in the page, and the moment its
row says Ready; in a second tab on the graph list, the moment the graph's row shows the new pod
count (the list is pushed too; the code before never refreshed it). Then the page stays open
``--idle`` seconds with nothing changing, and every request it makes is counted.

Writes bench/results/live.json: per arm and database, the slider-to-row and slider-to-Ready
latencies (p50, p95, max, every sample) and the requests an idle open page makes per minute."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
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
from bench import record  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "pw-bench-live-1"
GRAPH = "live"
GOAL_MS = 500
OBSERVER = """
window.__moved = null; window.__seen = {}; window.__ready = {}; window.__log = [];
const __t0 = performance.now();
const __say = (what) => window.__log.push(`${Math.round(performance.now() - __t0)} ${what}`);
document.addEventListener("change", (e) => __say(`change ${e.target.id}=${e.target.value}`), true);
window.__posted = 0;
document.addEventListener("htmx:beforeRequest", (e) => {
  if ((e.detail.requestConfig || {}).path.endsWith("/scale/")) window.__posted += 1;
}, true);
for (const name of ["htmx:beforeRequest", "htmx:afterRequest", "htmx:afterSwap", "htmx:sseMessage", "htmx:abort"]) {
  document.addEventListener(name, (e) => __say(`${name} ${(e.detail.requestConfig || {}).path || ""}`), true);
}
document.addEventListener("change", (e) => {
  if (e.target.id === "slider-decode") {
    window.__moved = performance.now();
    window.__movedAt = performance.timeOrigin + window.__moved;  // the list's tab has another origin
  }
}, true);
new MutationObserver(() => {
  for (const row of document.querySelectorAll("#pods tr[data-pod]")) {
    const pod = row.dataset.pod;
    if (!(pod in window.__seen)) window.__seen[pod] = performance.now();
    if (row.dataset.ready === "1" && !(pod in window.__ready)) window.__ready[pod] = performance.now();
  }
  for (const pod of Object.keys(window.__seen)) {
    if (!document.querySelector(`#pods tr[data-pod="${pod}"]`)) {
      delete window.__seen[pod];
      delete window.__ready[pod];
    }
  }
}).observe(document.body, {childList: true, subtree: true, attributes: true});
"""

# The graph list, in a tab of its own: when the graph's row first shows each pod count ("ready/total").
LIST_OBSERVER = """
window.__totals = {};
new MutationObserver(() => {
  const row = [...document.querySelectorAll("#graph-rows tr")].find((tr) => tr.textContent.includes("%s"));
  const cell = row && row.children[6];
  const counted = cell && cell.textContent.trim().match(/^(\\d+)\\/(\\d+)$/);
  if (counted && !(counted[2] in window.__totals)) {
    window.__totals[counted[2]] = performance.timeOrigin + performance.now();
  }
}).observe(document.body, {childList: true, subtree: true, characterData: true});
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_database(name: str) -> str:
    """A fresh PostgreSQL database for one arm (created through the maintenance database)."""
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')
    return f"postgres://postgres@127.0.0.1:5432/{name}"


@contextlib.contextmanager
def product(tree: Path, database: str, label: str):
    """`manage.py up` from ``tree`` (this checkout or the baseline's) on a fresh var folder and
    database; yields its base URL."""
    var = Path(tempfile.mkdtemp(prefix=f"cp-bench-live-{label}-"))
    port, prometheus = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(CONTROLPLANE_VAR_DIR=str(var), PYTHONPATH=str(tree), DJANGO_DEBUG="0",
               PROMETHEUS_LOCAL_PORT=str(prometheus), PROMETHEUS_URL=f"http://127.0.0.1:{prometheus}",
               LOCAL_RUNTIME_PORT_MIN="28000", LOCAL_RUNTIME_PORT_MAX="28999")
    if database == "postgresql":
        env["DATABASE_URL"] = postgres_database(f"cp_bench_live_{label}")
    log = open(var / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "python"), "manage.py", "up", "--port", str(port),
                             "--no-example", "--password", PASSWORD], cwd=tree, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1):  # noqa: S310 - our http URL
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: the product did not start:\n"
                                       + (var / "up.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"n": len(ordered), "p50": round(statistics.median(ordered)), "p95": round(p95),
            "max": round(ordered[-1]), "samples": [round(s) for s in samples]}


def measure(base: str, moves: int, idle: float) -> dict:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(base + "/login/")
        page.fill("input[name=username]", "operator")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.goto(base + "/graphs/new/?template=mocker-disagg")
        page.fill("input[name=name]", GRAPH)
        page.fill("input[name=model]", "live-model")
        page.fill("input[name=prefill_hf_token_secret]", "")
        page.fill("input[name=decode_hf_token_secret]", "")
        expect(page.locator("#preview pre.yaml")).to_contain_text(f"name: {GRAPH}", timeout=30_000)
        page.click("button[value=create]")
        expect(page.locator("h1")).to_contain_text(GRAPH, timeout=30_000)
        page.goto(f"{base}/graphs/{GRAPH}/")  # a page of its own (create swaps it into the form's page)
        page.wait_for_function("() => window.htmx !== undefined && document.readyState === 'complete'")
        page.click("#apply-button")
        expect(page.locator("#pods tr[data-ready='1']")).to_have_count(3, timeout=180_000)
        page.evaluate(OBSERVER)
        # The graph list open beside it: a list that is pushed (data-pushed) is timed to the row's new
        # pod count; one that is not (the code before) shows it only when reloaded.
        listing = page.context.new_page()
        listing.goto(f"{base}/graphs/?q={GRAPH}")
        listing.wait_for_function("() => window.htmx !== undefined && document.readyState === 'complete'")
        listed = listing.locator("#graph-rows[data-pushed]").count() == 1
        listing.evaluate(LIST_OBSERVER % GRAPH)
        new_pod = f"{GRAPH}-decode-1"
        seen, ready, lost, in_list = [], [], 0, []

        def move(value: str) -> None:
            """Move the slider; a move the page did not send (a swap had just replaced the slider and
            htmx had not bound it yet) is counted and its change event dispatched again."""
            nonlocal lost
            posted = page.evaluate("window.__posted")
            page.locator("#slider-decode").fill(value)
            for _ in range(3):
                try:
                    page.wait_for_function(f"() => window.__posted > {posted}", timeout=1500)
                    return
                except PlaywrightTimeout:
                    lost += 1
                    page.locator("#slider-decode").dispatch_event("change")
            raise AssertionError(f"the slider's move to {value} was never sent")

        idle_status = page.locator("#status .op[role=status]")  # an operation still running: the slider waits
        for _ in range(moves):
            expect(idle_status).to_have_count(0, timeout=120_000)
            move("2")
            page.wait_for_function(f"() => window.__ready['{new_pod}'] !== undefined", timeout=120_000)
            moved, at_seen, at_ready = page.evaluate(
                f"() => [window.__moved, window.__seen['{new_pod}'], window.__ready['{new_pod}']]")
            seen.append(at_seen - moved)
            ready.append(at_ready - moved)
            if listed:
                listing.wait_for_function("() => window.__totals['4'] !== undefined", timeout=30_000)
                in_list.append(listing.evaluate("window.__totals['4']") - page.evaluate("window.__movedAt"))
            expect(idle_status).to_have_count(0, timeout=120_000)
            move("1")
            try:
                expect(page.locator(f"#pods tr[data-pod='{new_pod}']")).to_have_count(0, timeout=120_000)
            except AssertionError:
                said = page.locator("#action-message").inner_text()
                happened = "\n".join(page.evaluate("window.__log.slice(-40)"))
                raise AssertionError(f"scale 2 -> 1 not seen; the page says: {said} / "
                                     f"{page.locator('#status').inner_text()[:300]}\n{happened}") from None
            expect(page.locator("#pods tr[data-ready='1']")).to_have_count(3, timeout=120_000)
            if listed:
                listing.wait_for_function("() => window.__totals['3'] !== undefined", timeout=30_000)
                listing.evaluate("window.__totals = {}")
            time.sleep(1)
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url) if "/static/" not in r.url else None)
        time.sleep(idle)
        browser.close()
    return {"slider_to_new_pod_row_ms": _summary(seen), "slider_to_new_pod_ready_ms": _summary(ready),
            "slider_to_graph_list_pod_count_ms": _summary(in_list) if listed else
            "not shown until the list is reloaded (its rows are neither pushed nor polled)",
            "moves_not_sent_by_the_page": lost,
            "idle_page_requests_per_minute": round(len(requests) * 60 / idle, 1),
            "idle_page_requests": sorted({u.split("?")[0].removeprefix(base) for u in requests})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT", required=True,
                        help="a checkout of the code to compare with (git worktree add /tmp/base <commit>)")
    parser.add_argument("--moves", type=int, default=8, help="slider moves 1 -> 2 measured per arm (default 8)")
    parser.add_argument("--idle", type=float, default=30, help="seconds an idle open page is watched (default 30)")
    parser.add_argument("--databases", default="sqlite,postgresql", help="sqlite, postgresql or both (default)")
    parser.add_argument("--output", default="live", help="bench/results/<OUTPUT>.json (default live)")
    args = parser.parse_args()
    baseline_commit = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()
    if not (args.baseline / "controlplane" / "asgi.py").is_file() or not baseline_commit:
        parser.error(f"--baseline: {args.baseline} is not a checkout of the product")
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    if not databases or any(d not in ("sqlite", "postgresql") for d in databases):
        parser.error("--databases: sqlite, postgresql, or both separated by a comma")
    if args.moves < 1 or args.idle <= 0:
        parser.error("--moves must be 1 or more and --idle more than 0")
    arms = {"pushed (this commit)": ROOT, f"polled every 2 s (commit {baseline_commit})": args.baseline.resolve()}
    results: dict = {}
    for database in databases:
        for label, tree in arms.items():
            tag = "push" if tree == ROOT else "poll"
            print(f"{database}, {label}: starting", flush=True)
            with product(tree, database, f"{tag}_{database}") as base:
                got = measure(base, args.moves, args.idle)
            results.setdefault(database, {})[label] = got
            print(f"  row p50/p95 {got['slider_to_new_pod_row_ms']['p50']}/{got['slider_to_new_pod_row_ms']['p95']} ms,"
                  f" Ready p50/p95 {got['slider_to_new_pod_ready_ms']['p50']}/"
                  f"{got['slider_to_new_pod_ready_ms']['p95']} ms,"
                  f" idle page {got['idle_page_requests_per_minute']} requests/min; graph list:"
                  f" {got['slider_to_graph_list_pod_count_ms']}", flush=True)
    ratios = {}
    for database, by_arm in results.items():
        push, poll = (by_arm[label] for label in arms)
        ratios[database] = {
            "row_p95_poll_over_push": round(poll["slider_to_new_pod_row_ms"]["p95"]
                                            / max(push["slider_to_new_pod_row_ms"]["p95"], 1), 1),
            "row_p95_goal_met": push["slider_to_new_pod_row_ms"]["p95"] <= GOAL_MS,
            "graph_list_p95_goal_met": push["slider_to_graph_list_pod_count_ms"]["p95"] <= GOAL_MS}
    path = record.write(args.output, {
        "setup": {"browser": "Debian's Chromium, Playwright", "server": "manage.py up (uvicorn, Celery worker, local "
                  "operator with Dynamo's frontend and mocker workers)", "moves": args.moves,
                  "idle_seconds": args.idle, "graph": "mocker-disagg: 1 prefill, 1 decode -> 2 -> 1",
                  "baseline": f"commit {baseline_commit}: the status fragment polled every 2 s"},
        "goal_ms": GOAL_MS, "results": results, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
