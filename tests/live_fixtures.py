"""Fixtures of the tests that run real Dynamo graphs on the local runtime, written once.

* ``eager``: Celery tasks run in the calling thread (the real task code, no worker process), so
  an apply or a benchmark run queued by a service has finished when the call returns.
* ``browser``: Debian's Chromium driven by Playwright, for the browser tests (a test that has
  no Chromium fails and says how to install it).
* ``operator_page``: a Chromium page signed in as the operator on pytest-django's live server,
  collecting console errors and page errors in ``page.problems`` (a 4xx is not one), dialogs
  accepted, the server's address in ``page.base``.
* ``operator``: a real local operator (graphs.runtimes.local.operator) with its own runtime
  folder under the test's tmp_path and the port range of the settings
  (LOCAL_RUNTIME_PORT_MIN/MAX), stopped with every process it started at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.celery import app as celery_app
from graphs.runtimes.local.operator import LocalOperator


@pytest.fixture
def eager(settings):
    """Tasks run inline, in the thread that also steps the local operator (``operator``): a
    scale then cannot wait for an operator that only runs once it returns, so nothing is waited
    for (OPERATION_OBSERVE_SECONDS 0, as where nothing observes) and the test converges itself."""
    settings.OPERATION_OBSERVE_SECONDS = 0
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def operator(tmp_path, settings):
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
    settings.BENCHMARK_DIR = tmp_path / "benchmarks"
    op = LocalOperator(runtime_dir=settings.LOCAL_RUNTIME_DIR, port_min=settings.LOCAL_RUNTIME_PORT_MIN,
                       port_max=settings.LOCAL_RUNTIME_PORT_MAX)
    yield op
    op.shutdown()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]


@pytest.fixture
def browser(transactional_db, monkeypatch):
    if not Path(CHROMIUM).exists():
        pytest.fail("no Chromium: run scripts/services.sh (installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM calls between Playwright steps
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def operator_page(browser, live_server, users):
    from django.conf import settings
    from django.test import Client

    from tests.conftest import PASSWORD

    client = Client()
    assert client.login(username=users["operator"].username, password=PASSWORD)
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME]
                          .value, "url": live_server.url}])
    page = context.new_page()
    page.problems = []
    # 4xx answers are logged by Chromium as failed resources; anything else is a problem.
    page.on("console", lambda m: page.problems.append(m.text) if m.type == "error"
            and "status of 4" not in m.text else None)
    page.on("pageerror", lambda exc: page.problems.append(str(exc)))
    page.on("dialog", lambda dialog: dialog.accept())
    page.base = live_server.url
    yield page
    context.close()
