"""The whole product as a newcomer meets it: `manage.py up` (web, Celery worker, local
operator, Prometheus), driven in Debian's Chromium: apply the example graph, watch its pods
become Ready, move the decode slider, see the new pod, delete; chat, benchmark and compare.
Regenerates the README's screenshots (docs/*.png) on every run, so they never go stale."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from graphs.runtimes.processes import allocate_ports

pytestmark = [pytest.mark.browser, pytest.mark.dynamo]
ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture
def product(tmp_path):
    port = allocate_ports(1, 26000, 26999, set())[0]
    # Not this process's metrics folder: `manage.py up` empties the one it uses at its start.
    env = {k: v for k, v in os.environ.items() if k not in (
            "DATABASE_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR")}
    prometheus_port = allocate_ports(1, 26000, 26999, {port})[0]
    env.update(CONTROLPLANE_VAR_DIR=str(tmp_path / "var"), LOCAL_RUNTIME_PORT_MIN="25000",
               PROMETHEUS_LOCAL_PORT=str(prometheus_port), PROMETHEUS_URL=f"http://127.0.0.1:{prometheus_port}",
               LOCAL_RUNTIME_PORT_MAX="25999", DJANGO_DEBUG="1", PROMETHEUS_SCRAPE_INTERVAL="2")
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "manage.py", "up", "--port", str(port), "--no-example",
                             "--password", "pw-browser-1"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1):
                break
        except OSError:
            assert proc.poll() is None, (tmp_path / "up.log").read_text()[-3000:]
            time.sleep(0.5)
    yield base
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


def test_apply_watch_ready_scale_decode_and_delete_in_the_browser(product):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(product + "/graphs/demo/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", "pw-browser-1")
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_contain_text("demo")

        # htmx loads deferred: a click before it binds submits the form as a plain GET (a reload).
        page.wait_for_function("() => window.htmx !== undefined && document.readyState === 'complete'")
        page.click("#apply-button")
        ready = page.locator("#pods tr[data-ready='1']")
        expect(ready).to_have_count(3, timeout=120_000)
        expect(page.locator("#graph-state")).to_have_text("Ready", timeout=30_000)
        docs = ROOT / "docs"
        docs.mkdir(exist_ok=True)
        page.screenshot(path=str(docs / "graph-page.png"), full_page=False)

        page.locator("#slider-decode").fill("2")
        expect(page.locator("#pods tr[data-pod='demo-decode-1'][data-ready='1']")).to_be_visible(timeout=60_000)
        expect(ready).to_have_count(4, timeout=30_000)
        expect(page.locator("#pods tr[data-pod='demo-prefill-1']")).to_have_count(0)

        page.click("text=Undeploy")
        expect(page.locator("#graph-state")).to_have_text("Not deployed", timeout=60_000)
        expect(page.locator("#pods")).to_have_count(0)
        browser.close()


CSP_RECORDER = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sourceFile || '') + ':' + e.lineNumber);
});
"""


def test_the_main_flows_run_under_the_strict_csp_without_a_single_violation(product):
    """Create from a template, apply, scale, chat, benchmark: every page the operator goes
    through, with the Content-Security-Policy on and every violation recorded."""
    violations: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_init_script(CSP_RECORDER)
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        # CSP reports, and htmx refusing what the CSP forbids (a trigger filter needs eval).
        page.on("console", lambda msg: violations.append(msg.text)
                if "Content Security Policy" in msg.text or msg.text.startswith("htmx:") else None)

        def collect():
            violations.extend(page.evaluate("window.__csp || []"))

        page.goto(product + "/login/")
        page.fill("input[name=username]", "operator")
        page.fill("input[name=password]", "pw-browser-1")
        page.click("button[type=submit]")

        # Create from the mocker template: the preview updates as the form is filled.
        page.goto(product + "/graphs/new/?template=mocker-disagg")
        page.fill("input[name=name]", "flow")
        page.fill("input[name=model]", "flow-model")
        page.fill("input[name=prefill_hf_token_secret]", "")
        page.fill("input[name=decode_hf_token_secret]", "")
        expect(page.locator("#preview pre.yaml")).to_contain_text("name: flow", timeout=15_000)
        collect()
        page.click("button[value=create]")
        expect(page.locator("h1")).to_contain_text("flow", timeout=15_000)

        # Apply and scale prefill 1 -> 2 (once htmx is bound: a click before submits a plain GET).
        page.wait_for_function("() => window.htmx !== undefined && document.readyState === 'complete'")
        page.click("#apply-button")
        expect(page.locator("#pods tr[data-ready='1']")).to_have_count(3, timeout=120_000)
        page.locator("#slider-prefill").fill("2")
        expect(page.locator("#pods tr[data-pod='flow-prefill-1'][data-ready='1']")).to_be_visible(timeout=60_000)
        collect()

        # A pod's log polls every 2 s while "Follow" is checked, and not at all once unchecked.
        polls: list[str] = []
        page.on("request", lambda r: polls.append(r.url) if "/pods/flow-prefill-0/log/" in r.url else None)
        page.goto(product + "/graphs/flow/pods/flow-prefill-0/log/")
        expect(page.locator("#log")).to_be_visible()
        page.wait_for_timeout(4_500)
        assert len(polls) >= 2, polls  # the page, then polls
        page.uncheck("#follow")
        page.wait_for_timeout(500)  # a poll already on its way may still land
        paused = len(polls)
        page.wait_for_timeout(4_500)
        assert len(polls) == paused, polls
        collect()

        # Chat through the playground.
        page.goto(product + "/playground/?graph=flow")
        page.fill('textarea[name="prompt"]', "Why split prefill and decode?")
        page.keyboard.press("Enter")
        reply = page.locator('[data-role="msg-assistant"]').last
        reply.locator('[data-role="timing"]').wait_for(timeout=30_000)
        expect(reply.locator('[data-metric="ttft"]')).to_contain_text("ms")
        collect()

        # A short benchmark from the form; the page follows its progress to the end.
        page.goto(product + "/benchmarks/new/")
        page.select_option("select[name=graph]", "flow")
        page.check("input[name=profile][value=custom]")
        page.fill("input[name=concurrency]", "2")
        page.fill("input[name=request_count]", "6")
        page.fill("input[name=input_tokens_mean]", "32")
        page.fill("input[name=output_tokens_mean]", "8")
        page.click("text=Start the benchmark")
        expect(page.locator("#run-state")).to_have_text("Succeeded", timeout=120_000)
        collect()

        planner_timeline(page, product)
        collect()
        browser.close()
    assert violations == []


def test_the_readme_screenshots_show_a_real_graph_its_charts_a_reply_and_a_comparison(product):
    """docs/graph-charts.png, docs/playground-reply.png and docs/benchmark-compare.png, from the
    example graph under real traffic: a chat in the playground and two benchmark runs, one per
    decode pool size."""
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(product + "/login/")
        page.fill("input[name=username]", "operator")
        page.fill("input[name=password]", "pw-browser-1")
        page.click("button[type=submit]")
        page.goto(product + "/graphs/demo/")
        page.click("#apply-button")
        expect(page.locator("#pods tr[data-ready='1']")).to_have_count(3, timeout=120_000)

        page.goto(product + "/playground/?graph=demo")
        page.fill('textarea[name="prompt"]', "Why split prefill and decode into two pools?")
        page.keyboard.press("Enter")
        reply = page.locator('[data-role="msg-assistant"]').last
        reply.locator('[data-role="timing"]').wait_for(timeout=30_000)
        expect(reply.locator('[data-metric="ttft"]')).to_contain_text("ms")
        page.screenshot(path=str(docs / "playground-reply.png"))

        runs = []
        for decode in (1, 2):
            if decode > 1:
                page.goto(product + "/graphs/demo/")
                page.locator("#slider-decode").fill(str(decode))
                expect(page.locator("#pods tr[data-ready='1']")).to_have_count(2 + decode, timeout=60_000)
            page.goto(product + "/benchmarks/new/")
            page.select_option("select[name=graph]", "demo")
            page.check("input[name=profile][value=custom]")
            page.fill("input[name=concurrency]", "4")
            page.fill("input[name=request_count]", "24")
            page.fill("input[name=input_tokens_mean]", "64")
            page.fill("input[name=output_tokens_mean]", "16")
            page.click("text=Start the benchmark")
            expect(page.locator("#run-state")).to_have_text("Succeeded", timeout=120_000)
            runs.append(page.url.rstrip("/").rsplit("/", 1)[-1])
        page.goto(product + f"/benchmarks/compare/?runs={','.join(runs)}")
        expect(page.locator(".bench-col")).to_have_count(2)
        expect(page.locator(".bench-col").first).to_contain_text("p1d1")
        expect(page.locator(".bench-col").last).to_contain_text("p1d2")
        page.screenshot(path=str(docs / "benchmark-compare.png"), full_page=True)

        page.goto(product + "/graphs/demo/")
        panel = page.locator("[data-metrics-panel]")
        expect(panel.locator(".metrics-chart .uplot").first).to_be_visible(timeout=30_000)
        panel.locator('button[data-window="15m"]').click()
        expect(panel.locator('button[data-window="15m"]')).to_have_attribute("aria-pressed", "true")
        # The benchmarks' traffic, scraped: latencies, not dashes.
        expect(panel.locator('[data-stat="ttft"]')).to_contain_text(" ms", timeout=60_000)
        expect(panel.locator('[data-stat="targets"]')).to_contain_text("up")
        panel.scroll_into_view_if_needed()
        panel.screenshot(path=str(docs / "graph-charts.png"))
        browser.close()


def planner_timeline(page, product: str) -> None:
    """A graph with Dynamo's Planner: created from the form with its settings, applied; the real
    VirtualConnectorCoordinator publishes two decisions as the Planner does, under load; the
    graph page says what is missing on this host, and the timeline shows load, replicas, each
    decision acknowledged, and the health line. Keeps docs/planner-timeline.png."""
    import json
    import threading

    import httpx

    page.goto(product + "/graphs/new/?template=mocker-disagg")
    page.fill("input[name=name]", "planned")
    page.fill("input[name=model]", "planned-model")
    page.fill("input[name=prefill_hf_token_secret]", "")
    page.fill("input[name=decode_hf_token_secret]", "")
    page.check("input[name=planner_enabled]")
    page.select_option("select[name=planner_optimization_target]", "sla")
    page.fill("input[name=planner_ttft_ms]", "40")
    page.fill("input[name=planner_itl_ms]", "15")
    page.fill("input[name=planner_adjustment_interval_seconds]", "30")
    expect(page.locator("#preview pre.yaml")).to_contain_text("dynamo.planner", timeout=15_000)
    page.click("button[value=create]")
    expect(page.locator("h1")).to_contain_text("planned", timeout=15_000)
    page.click("#apply-button")
    expect(page.locator("#pods tr[data-ready='1']")).to_have_count(3, timeout=120_000)
    expect(page.locator("#planner-runtime")).to_contain_text("does not run on this host", timeout=30_000)
    expect(page.locator("#planner-runtime")).to_contain_text("What still works")

    def attach() -> dict:
        return page.request.get(product + "/api/graphs/planned/status/").json()

    deadline = time.monotonic() + 60
    while not attach()["attach"].get("planner", {}).get("connector", {}).get("running"):
        assert time.monotonic() < deadline, attach()
        time.sleep(0.5)
    status = attach()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "ETCD_"))},
           **status["attach"]["env"], "ETCD_ENDPOINTS": status["attach"]["planner"]["connector"]["etcd"],
           "DYN_LOG": "warn"}
    stop = threading.Event()

    def traffic():
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                client.post(status["endpoint"] + "/v1/chat/completions",
                            json={"model": "planned-model", "max_tokens": 16,
                                  "messages": [{"role": "user", "content": "scale me " * 40}]})

    load = threading.Thread(target=traffic, daemon=True)
    load.start()
    try:
        time.sleep(12)  # two scrapes of load before the first decision
        publisher = subprocess.run([sys.executable, str(ROOT / "tests" / "planner_publisher.py"), "dynamo",
                                    "2:1", "2:2"], env=env, capture_output=True, text=True, timeout=240)
        time.sleep(10)
    finally:
        stop.set()
        load.join(30)
    acks = [json.loads(line) for line in publisher.stdout.splitlines() if "acknowledged" in line]
    assert [a["ready"] for a in acks] == [True, True], publisher.stdout + publisher.stderr[-2000:]

    page.goto(product + "/graphs/planned/")
    timeline = page.locator("#planner-timeline")
    timeline.locator("button[data-window='15m']").click()
    expect(timeline.locator("[data-decisions] li.decision-acknowledged")).to_have_count(2, timeout=30_000)
    expect(timeline.locator("[data-health]")).to_contain_text("Planner health: Last decision")
    expect(timeline.locator("[data-plot='replicas'] .u-legend")).to_contain_text("prefill desired")
    expect(page.locator("#status")).to_contain_text("via planner · for Planner decision 1 (acknowledged)",
                                                    timeout=30_000)
    timeline.scroll_into_view_if_needed()
    timeline.screenshot(path=str(ROOT / "docs" / "planner-timeline.png"))
