# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The playground in Debian's Chromium, against the ASGI app under uvicorn and the session's
real Dynamo graph: a reply streams in and its timings appear, Stop cancels the frontend's
request, a kept conversation reopens, side by side shows two graphs, and the JavaScript's
arithmetic is the Python's. Pages are served with a strict script CSP to prove they need no
inline script."""

from __future__ import annotations

import json
import random
import re
import shlex
import time

import pytest

from playground.models import Conversation
from tests.conftest import PASSWORD
from tests.playground_fixtures import (  # noqa: F401
    _fresh_limits,
    chat_graph,
    dynamo_graph,
    gauges,
    make_graph,
    routed_server,
    tokens,
    wait_for,
)
from tests.playground_timing import summarise

pytestmark = [pytest.mark.browser, pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
CSP = "default-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'"
PAGES = re.compile(r"^http://127\.0\.0\.1:\d+/playground/(compare/)?(\?.*)?$")


@pytest.fixture
def browser(transactional_db, monkeypatch):
    """Chromium, started after the database fixtures and stopped before their teardown.
    Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    between browser steps are plain synchronous ones, hence DJANGO_ALLOW_ASYNC_UNSAFE."""
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_page(browser, server, users, role="operator"):
    """A page signed in as ``role``, whose playground pages carry a strict CSP; CSP
    violations and page errors are collected in ``page.problems``."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    assert client.login(username=users[role].username, password=PASSWORD)
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME]
                          .value, "url": server.url}])
    page = context.new_page()
    page.problems = []
    page.on("console", lambda msg: page.problems.append(msg.text)
            if msg.type == "error" and "Content Security Policy" in msg.text else None)
    page.on("pageerror", lambda exc: page.problems.append(str(exc)))

    def with_csp(route):
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "content-security-policy": CSP})

    page.route(PAGES, with_csp)
    return page


def metric(reply, name: str) -> str:
    return reply.locator(f'[data-metric="{name}"] .pg-metric-value').inner_text()


def ms(text: str) -> float:
    return float(text.removesuffix(" ms"))


# htmx 2.0.8 injects its indicator <style> element on every page of base.html (the page-wide
# fix is htmx-config includeIndicatorStyles=false in base.html); nothing else may violate.
HTMX_INDICATOR_STYLE = "sha256-faU7yAF8NxuMTNEwVmBz+VcYeIoBQ2EMHW3WaVxCvnk="


def own_problems(page) -> list[str]:
    return [p for p in page.problems if HTMX_INDICATOR_STYLE not in p]


def test_a_reply_streams_in_with_its_timings_and_the_conversation_reopens(routed_server, dynamo_graph, chat_graph,
                                                                          users, browser):
    page = open_page(browser, routed_server, users)
    page.goto(routed_server.url + "/playground/")
    page.fill('input[name="max_tokens"]', "150")
    page.fill('textarea[name="system_prompt"]', "Be brief.")
    # Record the reply's text length as it changes, with the time, from the page itself.
    page.evaluate("""() => {
        window.__lengths = [];
        new MutationObserver(() => {
            const node = document.querySelector('.pg-streaming .pg-text');
            if (node) window.__lengths.push([performance.now(), node.textContent.length]);
        }).observe(document.querySelector('[data-role="transcript"]'),
                   {subtree: true, childList: true, characterData: true});
    }""")
    started = time.monotonic()
    page.fill('textarea[name="prompt"]', "Why split prefill and decode?")
    page.keyboard.press("Enter")
    reply = page.locator('[data-role="msg-assistant"]').last
    reply.locator('[data-role="timing"]').wait_for(timeout=15000)
    wall_ms = (time.monotonic() - started) * 1000
    # The test graph's workers are Dynamo's mocker: the reply and its numbers say so.
    assert reply.locator('[data-role="simulated"]').inner_text() == "simulated with Dynamo's mocker"

    lengths = page.evaluate("window.__lengths")
    distinct = sorted({n for _, n in lengths})
    assert len(distinct) >= 20, f"the text did not stream in: {distinct}"
    assert lengths[-1][0] - lengths[0][0] > 300  # 150 tokens of ~5.8 ms each, not one burst

    ttft, itl, p90 = ms(metric(reply, "ttft")), ms(metric(reply, "itl_mean")), ms(metric(reply, "itl_p90"))
    completion = int(metric(reply, "completion_tokens"))
    assert 0 < ttft < wall_ms
    assert 1 <= itl <= p90  # milliseconds (the mocker paces tokens ~5.8 ms apart), the mean below the p90
    assert 1 <= completion <= 150 and int(metric(reply, "prompt_tokens")) > 5
    # usage.prompt_tokens_details.cached_tokens, under every reply (a KV-cache prefix hit)
    assert 0 <= int(metric(reply, "cached_tokens")) <= int(metric(reply, "prompt_tokens"))
    assert float(metric(reply, "tokens_per_s")) > 0
    workers = reply.locator('[data-role="workers"] code').all_inner_texts()
    assert len(workers) == 2 and all(w.isdigit() for w in workers) and workers[0] != workers[1]
    rows = reply.locator(".pg-wf-row").all_inner_texts()
    assert [r.split("\n")[0] for r in rows] == ["queue", "prefill", "KV transfer", "decode"]
    queue_ms, prefill_ms = (ms(rows[i].split("\n")[-1]) for i in (0, 1))
    assert ttft >= queue_ms + prefill_ms - 1.0  # the browser cannot see the token before the frontend made it

    reply.get_by_role("button", name="Copy as curl").click()
    curl = page.evaluate("navigator.clipboard.readText()")
    argv = shlex.split(curl.replace("\\\n", " "))
    assert argv[:3] == ["curl", "-N", f"{routed_server.url}/api/playground/pg-test/v1/chat/completions"]
    sent = json.loads(argv[argv.index("-d") + 1])
    assert sent["max_tokens"] == 150 and sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["nvext"] == {"extra_fields": ["worker_id", "timing"]}
    reply.get_by_role("button", name="Copy as Python").click()
    python = page.evaluate("navigator.clipboard.readText()")
    compile(python, "<snippet>", "exec")
    assert "base_url=" + json.dumps(f"{routed_server.url}/api/playground/pg-test/v1") in python

    page.get_by_role("button", name="Keep conversation").click()
    page.wait_for_url(re.compile(r"\?c=\d+$"))
    page.reload()
    assert page.locator('[data-role="msg-assistant"] [data-metric="ttft"]').inner_text().endswith(" ms")
    assert page.locator('[data-role="msg-assistant"] [data-role="simulated"]').count() == 1  # kept with the reply
    assert page.locator('textarea[name="system_prompt"]').input_value() == "Be brief."
    page.fill('textarea[name="prompt"]', "And the KV transfer?")
    page.keyboard.press("Enter")
    page.locator('[data-role="msg-assistant"]').nth(1).locator('[data-role="timing"]').wait_for(timeout=15000)
    wait_for(lambda: Conversation.objects.filter(messages__position=3).exists(), timeout=5, interval=0.1)
    kept = Conversation.objects.get()
    assert kept.owner == users["operator"] and kept.title == "Why split prefill and decode?"
    assistant = [m for m in kept.messages.all() if m.role == "assistant"]
    assert len(assistant) == 2 and all(m.reply_timing.ttft_ms > 0 for m in assistant)
    assert all(m.reply_timing.simulated.startswith("simulated with Dynamo's mocker: ") for m in assistant)
    assert assistant[0].reply_timing.server.prefill_ms > 0
    assert own_problems(page) == []


def test_stop_cancels_the_frontends_request(routed_server, dynamo_graph, chat_graph, users, browser):
    page = open_page(browser, routed_server, users)
    page.goto(routed_server.url + "/playground/")
    page.fill('input[name="max_tokens"]', "3000")
    page.fill('textarea[name="prompt"]', "Go on and on.")
    page.get_by_role("button", name="Send").click()
    page.wait_for_function("() => document.querySelector('.pg-streaming .pg-text')?.textContent.length > 40")
    wait_for(lambda: gauges(dynamo_graph.endpoint)["dynamo_frontend_inflight_requests"] == 1, timeout=2)
    page.get_by_role("button", name="Stop").click()
    # 3,000 tokens at the mocker's pace take over 15 s: done within 5 s means cancelled, not finished.
    wait_for(lambda: all(v == 0 for v in gauges(dynamo_graph.endpoint).values()), timeout=5)
    reply = page.locator('[data-role="msg-assistant"]').last
    assert "Stopped." in reply.locator('[data-role="timing"]').inner_text()
    assert page.get_by_role("button", name="Send").is_enabled()
    assert own_problems(page) == []


def test_side_by_side_shows_both_graphs_replies_and_timings(routed_server, dynamo_graph, chat_graph, users, browser):
    make_graph("pg-test-b", dynamo_graph.model, dynamo_graph.endpoint, user=users["admin"])
    page = open_page(browser, routed_server, users)
    page.goto(routed_server.url + "/playground/compare/")
    assert page.locator('[data-column="a"] select').input_value() == "pg-test"
    assert page.locator('[data-column="b"] select').input_value() == "pg-test-b"
    page.fill('input[name="max_tokens"]', "20")
    page.fill('textarea[name="prompt"]', "Same prompt, two graphs.")
    page.get_by_role("button", name="Send to both").click()
    for side, graph in (("a", "pg-test"), ("b", "pg-test-b")):
        reply = page.locator(f'[data-column="{side}"] [data-role="msg-assistant"]')
        reply.locator('[data-role="timing"]').wait_for(timeout=15000)
        assert reply.locator(".pg-who").inner_text().lower() == graph
        assert reply.locator(".pg-text").inner_text()
        assert ms(metric(reply, "ttft")) > 0
        assert int(metric(reply, "completion_tokens")) <= 20
    assert own_problems(page) == []


def test_the_browser_computes_timings_exactly_as_python_does(routed_server, users, browser):
    page = open_page(browser, routed_server, users)
    page.goto(routed_server.url + "/playground/conversations/")
    rng = random.Random(7)
    cases = [(0.0, [], None, 5.0), (0.0, [12.5], 1, None), (3.0, [30.0, 31.0, 37.0, 43.0, 49.0], 6, 60.0)]
    for _ in range(5):
        start = rng.uniform(0, 1000)
        arrivals = sorted(start + rng.uniform(20, 400) for _ in range(rng.randint(2, 60)))
        cases.append((start, arrivals, rng.choice([None, len(arrivals), len(arrivals) + 3]), arrivals[-1] + 1))
    got = page.evaluate("""async (cases) => {
        const m = await import('/static/js/playground-stream.js');
        return cases.map(([s, a, c, e]) => m.summarise(s, a, c, e));
    }""", [list(c) for c in cases])
    for case, js in zip(cases, got, strict=True):
        py = summarise(*case)
        assert js.keys() == py.keys()
        for key, value in py.items():
            assert js[key] == pytest.approx(value, abs=1e-6), (case, key)
