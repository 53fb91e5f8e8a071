"""The repository pages in Debian's Chromium: registering a repository (a refusal shown in the
form), syncing it (a refused file shown with its findings and commit), a conflict shown in three
ways, and the graph page's Git card. No console error on any of them."""

from __future__ import annotations

import pytest

from graphs.models import Graph
from graphs.services import graph_update
from repos.export import repository_export
from repos.models import Repository
from tests.conftest import PASSWORD
from tests.git_fixtures import manifest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
pytest_plugins = ["tests.git_fixtures"]


@pytest.fixture(autouse=True)
def _mirrors(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


def _page(browser, live_server, users, role: str):
    from django.conf import settings
    from django.test import Client

    client = Client()
    assert client.login(username=users[role].username, password=PASSWORD)
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME,
                          "value": client.cookies[settings.SESSION_COOKIE_NAME].value, "url": live_server.url}])
    page = context.new_page()
    page.problems = []
    page.on("console", lambda msg: page.problems.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: page.problems.append(str(exc)))
    return page


def test_register_sync_refusals_conflict_and_the_graph_card_in_the_browser(browser, live_server, users, remote):
    from playwright.sync_api import expect

    remote.write("graphs/alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    page = _page(browser, live_server, users, "admin")
    page.goto(f"{live_server.url}/repos/")

    def fill(url: str):
        page.fill("input[name=name]", "fleet")
        page.fill("input[name=url]", url)
        page.fill("input[name=path]", "graphs")
        page.fill("input[name=password]", "tok-browser")
        page.click("#repository-form button[type=submit]")

    fill("not a url")
    expect(page.locator("#repository-form [role=alert]")).to_contain_text("is not a Git URL")
    assert not Repository.objects.exists()
    fill(remote.url)
    expect(page.locator("h1")).to_contain_text("fleet")
    assert "tok-browser" not in page.content()

    page.click("text=Sync now")
    expect(page.locator("body")).to_contain_text("1 revision(s) imported")
    expect(page.locator("#links")).to_contain_text("alpha.yaml")

    remote.write("graphs/alpha.yaml", manifest("alpha", replicas=3).replace("replicas: 3", "replicas: -1"))
    bad = remote.commit("negative workers")
    remote.push()
    page.click("text=Sync now")
    expect(page.locator("body")).to_contain_text("1 refused")
    expect(page.locator("#links")).to_contain_text(bad[:12])
    expect(page.locator("#links")).to_contain_text("The graph keeps its last good revision")

    # A change in Git and one in the product at once: the conflict in three ways.
    remote.write("graphs/alpha.yaml", manifest("alpha", replicas=7))
    remote.commit("Git says 7")
    remote.push()
    graph = Graph.objects.get(name="alpha")
    spec = graph.head.graph_spec
    pools = list(spec.services)
    pools[1] = pools[1].model_copy(update={"replicas": 2})
    graph_update(graph=graph, spec=spec.model_copy(update={"services": pools}), user=users["admin"],
                 message="product says 2")
    repository_export(repository=Repository.objects.get(name="fleet"))
    page.goto(f"{live_server.url}/repos/fleet/")
    expect(page.locator("#exports")).to_contain_text("Conflict")
    expect(page.locator("#exports")).to_contain_text("dynamo-cp/alpha-r2")
    page.click("#exports a")
    expect(page.locator("#merged")).to_contain_text("<<<<<<< product r2")
    expect(page.locator("#theirs")).to_contain_text("replicas: 7")
    expect(page.locator("#ours")).to_contain_text("replicas: 2")

    page.goto(f"{live_server.url}/graphs/alpha/")
    expect(page.locator("#git")).to_contain_text("alpha.yaml")
    expect(page.locator("#git-export")).to_contain_text("Conflict")
    page.goto(f"{live_server.url}/graphs/alpha/revisions/")
    expect(page.locator("table")).to_contain_text("Alice Git")
    # The refused registration answers 400 (the form with its error), which Chromium logs.
    assert [p for p in page.problems if "status of 400" not in p] == []
