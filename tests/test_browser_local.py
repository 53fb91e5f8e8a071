"""The whole product as a newcomer meets it: `manage.py up` (web, Celery worker, local
operator), driven in Debian's Chromium: apply the example graph, watch its pods become
Ready, move the decode slider, see the new pod, delete. Keeps a screenshot for the README."""

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
ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture
def product(tmp_path):
    port = allocate_ports(1, 26000, 26999, set())[0]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    prometheus_port = allocate_ports(1, 26000, 26999, {port})[0]
    env.update(CONTROLPLANE_VAR_DIR=str(tmp_path / "var"), LOCAL_RUNTIME_PORT_MIN="25000",
               PROMETHEUS_LOCAL_PORT=str(prometheus_port), PROMETHEUS_URL=f"http://127.0.0.1:{prometheus_port}",
               LOCAL_RUNTIME_PORT_MAX="25999", DJANGO_DEBUG="1")
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
        page.screenshot(path=str(docs / "screenshot.png"), full_page=False)

        page.locator("#slider-decode").fill("2")
        expect(page.locator("#pods tr[data-pod='demo-decode-1'][data-ready='1']")).to_be_visible(timeout=60_000)
        expect(ready).to_have_count(4, timeout=30_000)
        expect(page.locator("#pods tr[data-pod='demo-prefill-1']")).to_have_count(0)

        page.click("text=Delete deployment")
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
        page.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)

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

        # Apply and scale prefill 1 -> 2.
        page.click("#apply-button")
        expect(page.locator("#pods tr[data-ready='1']")).to_have_count(3, timeout=120_000)
        page.locator("#slider-prefill").fill("2")
        expect(page.locator("#pods tr[data-pod='flow-prefill-1'][data-ready='1']")).to_be_visible(timeout=60_000)
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
        browser.close()
    assert violations == []
