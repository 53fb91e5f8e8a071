"""What the screen shows is what happened (issue #43), in Debian's Chromium against the live
server with the product's strict CSP and htmx: a gateway exposure saved on a local graph leaves
its OpenAI endpoint alone, "Create graph" puts each error beside its field, and a form refuses
what a cluster would."""

from __future__ import annotations

import pytest

from endpoint.models import GraphExposure
from graphs.models import Graph
from tests.playground_fixtures import make_graph

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(operator_page):
    return operator_page


def _open(page, path: str) -> None:
    page.goto(page.base + path)
    page.wait_for_function("() => window.htmx !== undefined && document.readyState === 'complete'")


def test_an_exposure_saved_on_a_local_graph_leaves_its_endpoint_on_the_relay(page, users):
    from playwright.sync_api import expect

    make_graph("gw-local", "model-a", "http://127.0.0.1:9", user=users["admin"])
    _open(page, "/playground/exposure/gw-local/")
    # The form says what it does and does not do on the local runtime before anything is saved.
    expect(page.locator('[data-role="exposure-scope"]')).to_contain_text("nothing on the local runtime")
    page.fill("input[name=host]", "llm.example.com")
    page.fill("input[name=gateway_name]", "eg")
    page.check("input[name=apply_with_graph]")
    page.click("button[type=submit] >> text=Save")
    expect(page.locator('[data-role="exposure-state"]')).to_contain_text("not in effect")
    assert GraphExposure.objects.filter(graph__name="gw-local", apply_with_graph=True).exists()

    relay = f"{page.base}/api/playground/gw-local/v1"
    _open(page, "/graphs/gw-local/")
    expect(page.locator('[data-role="openai-endpoint"]')).to_have_text(relay)
    expect(page.locator('[data-role="exposure-pending"]')).to_contain_text("http://llm.example.com/v1")
    # The playground's copy-as-curl/Python read the option's data-endpoint: empty is the relay.
    _open(page, "/playground/")
    assert page.locator('option[value="gw-local"]').get_attribute("data-endpoint") == ""
    assert page.problems == []


def _in_view(locator) -> bool:
    return locator.evaluate("el => { const r = el.getBoundingClientRect();"
                            " return r.top >= 0 && r.bottom <= window.innerHeight; }")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("name", "taken", "a graph named 'taken' already exists"),
    ("name", "Bad_Name", "graph name 'Bad_Name' is not a valid Kubernetes name"),
    ("namespace", "Bad_NS", "namespace 'Bad_NS' is not a valid Kubernetes name"),
])
def test_create_graph_puts_each_error_beside_its_field_and_brings_it_into_view(page, users, field, value, message):
    from playwright.sync_api import expect

    make_graph("taken", "model-a", "http://127.0.0.1:9", user=users["admin"])
    _open(page, "/graphs/new/?template=mocker-disagg")
    page.fill("input[name=name]", "good-name")
    page.fill(f"input[name={field}]", value)
    # The Create button is at the bottom of a long form: the page is scrolled there to press it.
    page.locator("button[value=create]").scroll_into_view_if_needed()
    page.click("button[value=create]")
    box = page.locator(f"input[name={field}]")
    expect(box).to_have_attribute("aria-invalid", "true", timeout=15_000)
    error = page.locator(f"#id_{field}_error")
    expect(error).to_contain_text(message)
    # The message is in the field's own label, read with it by a screen reader, and on screen.
    assert "id_" + field + "_error" in (box.get_attribute("aria-describedby") or "")
    assert page.locator(f"label:has(input[name={field}]) .field-error").count() == 1
    page.wait_for_function(f"() => document.activeElement && document.activeElement.name === '{field}'")
    assert _in_view(box) and _in_view(error)
    assert Graph.objects.filter(name__in=["good-name", value]).exclude(name="taken").count() == 0
    assert page.problems == []


# What a cluster would refuse, refused at its field: (field, value, message).
REFUSED_AT_THE_FIELD = [
    ("dynamo_version", "9.9.9", "9.9.9 is not a known Dynamo release: the known releases are 1.6.1"),
    ("decode_image", "not a valid image!!", "is not a valid image reference"),
    ("decode_image", "UPPER/Case:tag", "is not a valid image reference"),
    ("decode_engine_args", "--max-model-len notanumber", "--max-model-len takes a number of tokens"),
]


def test_create_graph_refuses_at_the_field_what_a_cluster_would_refuse(page):
    from playwright.sync_api import expect

    for field, value, message in REFUSED_AT_THE_FIELD:
        _open(page, "/graphs/new/?template=mocker-disagg")
        page.fill("input[name=name]", "refused")
        page.fill(f"input[name={field}]", value)
        page.click("button[value=create]")
        expect(page.locator(f"#id_{field}_error")).to_contain_text(message, timeout=15_000)
        expect(page.locator(f"input[name={field}]")).to_have_attribute("aria-invalid", "true")
    # A Planner whose scale-up threshold is below its scale-down one.
    _open(page, "/graphs/new/?template=mocker-disagg")
    page.fill("input[name=name]", "refused")
    page.check("input[name=planner_enabled]")
    page.fill("input[name=planner_decode_scale_up_kv_rate]", "0.2")
    page.fill("input[name=planner_decode_scale_down_kv_rate]", "0.5")
    page.click("button[value=create]")
    expect(page.locator("#id_planner_decode_scale_up_kv_rate_error")).to_contain_text(
        "must be above the scale-down threshold (0.5)", timeout=15_000)
    assert not Graph.objects.exists()
    assert page.problems == []


def test_a_graph_stored_with_errors_says_it_is_not_appliable_and_a_mocker_needs_no_nixl_shm(page):
    from playwright.sync_api import expect

    # A vLLM prefill pool with 256Mi of /dev/shm: NIXL needs 1Gi, the preview says Invalid.
    _open(page, "/graphs/new/?template=vllm-disagg")
    page.fill("input[name=name]", "draft")
    page.fill("input[name=prefill_shared_memory]", "256Mi")
    expect(page.locator("#preview")).to_contain_text("gets only 256Mi of /dev/shm", timeout=15_000)
    page.click("button[value=create]")
    expect(page.locator("h1")).to_contain_text("draft", timeout=15_000)
    expect(page.locator(".flash-warning")).to_contain_text("Stored as not appliable: its manifest has 1 error")
    # The mocker only simulates KV transfer: the same /dev/shm is no finding there.
    _open(page, "/graphs/new/?template=mocker-disagg")
    page.fill("input[name=name]", "small-shm")
    page.fill("input[name=prefill_shared_memory]", "256Mi")
    expect(page.locator("#preview pre.yaml")).to_contain_text("sharedMemorySize: 256Mi", timeout=15_000)
    assert "/dev/shm" not in page.locator("#preview").inner_text()
    page.click("button[value=create]")
    expect(page.locator("h1")).to_contain_text("small-shm", timeout=15_000)
    assert page.locator(".flash-warning").count() == 0
    assert page.problems == []
