# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The metrics panel in Debian's Chromium, on a page that includes it exactly as the graph
page does ({% include "metrics/_graph_panel_include.html" %}), served with a strict CSP: the
charts draw from a real Prometheus, the window picker and the objectives form work, and a
Prometheus that stops answering turns into a sentence in the panel."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.template import engines
from django.urls import path
from django.utils import timezone

from controlplane.urls import urlpatterns as product_urls
from core.catalog import PoolFields, build_spec
from graphs import services as graph_services
from graphs.models import Deployment, Graph, Operation
from metrics.services import objectives_set
from tests.conftest import PASSWORD
from tests.metrics_fixtures import (  # noqa: F401
    KNOWN,
    SCRAPE_INTERVAL,
    exposition,
    free_port,
    known_scraped,
    prometheus_server,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CSP = "default-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'"
PAGE = """{% extends "base.html" %}{% block content %}<h1>{{ graph.name }}</h1>
{% include "metrics/_graph_panel_include.html" %}{% endblock %}"""


def graph_page(request, name):
    """What templates/graphs/detail.html does with the include line, and nothing else."""
    graph = get_object_or_404(Graph, name=name)
    return HttpResponse(engines["django"].from_string(PAGE).render({"graph": graph}, request))


urlpatterns = [path("metrics-test/<slug:name>/", graph_page), *product_urls]


@pytest.fixture
def site(live_server, settings, known_scraped):
    from django.core.cache import cache

    settings.ROOT_URLCONF = __name__
    settings.PROMETHEUS_URL = known_scraped.url
    settings.PROMETHEUS_SCRAPE_INTERVAL = SCRAPE_INTERVAL
    cache.clear()
    yield live_server
    cache.clear()


def open_page(browser, site, users, role="operator"):
    from django.conf import settings
    from django.test import Client

    client = Client()
    assert client.login(username=users[role].username, password=PASSWORD)
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME]
                          .value, "url": site.url}])
    page = context.new_page()
    page.problems = []
    page.on("console", lambda msg: page.problems.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: page.problems.append(str(exc)))

    def with_csp(route):
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "content-security-policy": CSP})

    page.route(re.compile(r".*/metrics-test/.*"), with_csp)
    # Every CSP violation, with the element that caused it (console messages do not say).
    page.add_init_script("window.cspViolations = []; document.addEventListener('securitypolicyviolation', (e) => "
                         "window.cspViolations.push([e.violatedDirective, e.sourceFile, e.target && e.target.outerHTML "
                         "&& e.target.outerHTML.slice(0, 200)]));")
    return page


def test_the_panel_draws_switches_windows_saves_objectives_and_reports_an_outage(browser, site, users, settings,
                                                                                 tmp_path):
    from django.core.cache import cache
    from playwright.sync_api import expect

    graph = graph_services.graph_create(spec=build_spec(template="vllm-disagg", name=KNOWN,
                                                        prefill=PoolFields(replicas=2), decode=PoolFields(replicas=3)))
    Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready")
    objectives_set(graph=graph, ttft_ms=150, itl_ms=10, gpu_hour_price="2.50")
    op = Operation.objects.create(graph=graph, kind="scale", state="succeeded", requested_by=users["operator"],
                                  params={"service": "decode", "replicas": 3}, before={"replicas": 1},
                                  after={"replicas": 3})
    Operation.objects.filter(pk=op.pk).update(created_at=timezone.now() - timedelta(seconds=5))

    page = open_page(browser, site, users)
    page.goto(f"{site.url}/metrics-test/{KNOWN}/")
    panel = page.locator("[data-metrics-panel]")
    expect(panel.locator(".metrics-chart .uplot")).to_have_count(6, timeout=20_000)
    expect(panel.locator('[data-stat="ttft"]')).to_contain_text("75.0 / 160.0 / 196.0 ms")
    expect(panel.locator('[data-stat="ttft"]')).to_have_class("slo-missed")  # p90 160 ms > 150 ms
    expect(panel.locator('[data-stat="goodput"]')).to_have_text("65.6% (between 62.5% and 75.0%)")
    expect(panel.locator('[data-stat="targets"]')).to_have_text("1 of 1 up")
    expect(panel.locator('[data-stat="cost"]')).to_contain_text("USD")
    expect(panel.locator("[data-markers] li")).to_contain_text(["scale decode 1→3 (operator)"])
    legend = panel.locator('[data-chart="ttft"] .u-legend')
    for label in ("p50", "p90", "p99", "SLO target"):
        expect(legend).to_contain_text(label)
    page.screenshot(path=str(tmp_path / "metrics-panel.png"), full_page=True)

    panel.locator('button[data-window="15m"]').click()
    expect(panel.locator('button[data-window="15m"]')).to_have_attribute("aria-pressed", "true")
    expect(panel.locator("[data-source]")).to_contain_text("every 4 s, rate over 8 s")
    page.screenshot(path=str(tmp_path / "metrics-panel-15m.png"), full_page=True)

    form = panel.locator("#metrics-objectives form")
    form.locator('input[name="ttft_ms"]').fill("9999999")
    form.locator("button[type=submit]").click()
    expect(panel.locator("#metrics-objectives .field-error")).to_contain_text("less than or equal to 480000")
    panel.locator('#metrics-objectives input[name="ttft_ms"]').fill("200")
    panel.locator("#metrics-objectives button[type=submit]").click()
    expect(panel.locator("#metrics-objectives")).to_contain_text("Saved.")
    expect(panel.locator('[data-stat="ttft"]')).to_contain_text("target 200 ms", timeout=10_000)

    settings.PROMETHEUS_URL = dead = f"http://127.0.0.1:{free_port()}"
    cache.clear()
    panel.locator('button[data-window="6h"]').click()
    expect(panel.locator("[data-status]")).to_contain_text(f"Prometheus is unreachable at {dead}")
    expect(panel.locator(".metrics-charts")).to_be_hidden()
    assert page.evaluate("window.cspViolations") == []
    assert [p for p in page.problems if "400 (Bad Request)" not in p] == []  # the refused form is a 400, on purpose
