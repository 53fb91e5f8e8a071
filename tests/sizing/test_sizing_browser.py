"""Sizing in Debian's Chromium against the real server (pytest-django's live server, the
product's URLs, CSP and htmx; the estimate job runs the real AIConfigurator in line): a refused
input's message on screen beside the form, an estimate asked and read (its choice, the Pareto
chart drawn, the ranked table), a graph made from it, and a refused "Make graph" that says why."""

from __future__ import annotations

import pytest

from graphs.models import Graph
from sizing.models import Estimate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(operator_page, eager, settings, tmp_path):
    settings.SIZING_DIR = tmp_path / "sizing"
    return operator_page


def _fill(page, **values) -> None:
    for name, value in values.items():
        selector = f"[name={name}]"
        if page.locator(f"select{selector}").count():
            page.select_option(f"select{selector}", value)
        else:
            page.fill(f"input{selector}", str(value))


def test_an_estimate_is_asked_read_and_made_into_a_graph_with_every_refusal_on_screen(page):
    from playwright.sync_api import expect

    page.goto(page.base + "/sizing/")
    # A system and backend the support matrix does not pair: refused, named, nothing stored.
    _fill(page, model="Qwen/Qwen3-32B", system="b60", backend="sglang", gpus=8, isl=4000, osl=500,
          ttft=600, itl=20)
    page.click("button:has-text('Estimate')")
    expect(page.locator("#sizing-error")).to_contain_text("backend: AIConfigurator has no 'sglang' database for b60")
    assert Estimate.objects.count() == 0

    _fill(page, system="h200_sxm", backend="vllm")
    page.click("button:has-text('Estimate')")
    expect(page.locator("#estimate-state")).to_have_text("Succeeded", timeout=120_000)
    estimate = Estimate.objects.get()
    chosen = estimate.result["chosen"]
    expect(page.locator("#estimate-chosen")).to_have_text(chosen)
    # uPlot drew the Pareto front (a canvas inside the figure), and every ranked row is listed.
    expect(page.locator("#pareto canvas")).to_have_count(1, timeout=10_000)
    rows = page.locator(f"#configurations-{chosen} tbody tr")
    expect(rows).to_have_count(len(estimate.result["experiments"][chosen]["configurations"]))

    # Make a graph from rank 1 of the chosen mode: the graph page, with who times its mocker.
    page.fill("input[name=name]", "sized")
    page.click("button:has-text('Make graph')")
    expect(page.locator("h1")).to_contain_text("sized", timeout=60_000)
    expect(page.locator(".flash-success")).to_contain_text("timed by AIConfigurator for h200_sxm")
    assert Graph.objects.filter(name="sized").exists()

    # A name Kubernetes refuses is refused on the estimate's page, naming it; nothing is made.
    page.go_back()
    page.fill("input[name=name]", "Bad_Name")
    page.click("button:has-text('Make graph')")
    expect(page.locator("#sizing-error")).to_contain_text("Bad_Name")
    assert list(Graph.objects.values_list("name", flat=True)) == ["sized"]

    # The same configuration under the same name again is no change: no empty revision, and it says so.
    page.fill("input[name=name]", "sized")
    page.click("button:has-text('Make graph')")
    expect(page.locator(".flash-info")).to_contain_text("sized is unchanged: revision 1 is already estimate")
    assert Graph.objects.get(name="sized").revisions.count() == 1
    assert page.problems == []
