"""Every click tells the truth, in Debian's Chromium against the real server (pytest-django's
live server, the product's URLs, CSP and htmx): a graph from every template the page offers, a
bad value in every graph form with its message found on screen, an imported manifest of each
API version edited, re-saved and exported field by field, and every refused action tried from
the page, its message beside what caused it (and still there after the status poll)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.catalog import PoolFields, build_spec
from core.dgd.render import render
from core.planner_config import PlannerSettings
from graphs import services
from graphs.models import Deployment, Graph, Operation
from tests import factories
from tests.graphs.test_truthful_actions import ALPHA_WITH_RESOURCES

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
BETA_MOCKER = Path(__file__).parents[1] / "fixtures" / "reference" / "dgd-templates-1.6.1" / "mocker-disagg.yaml"


@pytest.fixture
def page(operator_page):
    return operator_page


def _open(page, path: str) -> None:
    page.goto(page.base + path)
    # htmx loads deferred: a click before it binds submits a form the plain way.
    page.wait_for_function("() => window.htmx !== undefined && document.readyState === 'complete'")


def test_every_template_the_page_offers_creates_a_graph(page):
    from playwright.sync_api import expect

    _open(page, "/graphs/new/")
    offered = page.locator(".templates a.tpl").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert len(offered) == 7
    for i, href in enumerate(offered):
        _open(page, "/graphs/new/" + href)
        name = f"tpl-{i}"
        page.fill("input[name=name]", name)
        expect(page.locator("#preview pre.yaml")).to_contain_text(f"name: {name}", timeout=15_000)
        page.click("button[value=create]")
        expect(page.locator("h1")).to_contain_text(name, timeout=15_000)
        expect(page.locator(".flash-success")).to_contain_text(f"Graph {name} created (revision 1).")
    assert Graph.objects.count() == 7
    assert page.problems == []


# What a bad value in each field of the create form gets on screen: (field, value, message).
BAD_CREATE_VALUES = [
    ("name", "", "This field is required."),
    ("name", "Bad_Name", "graph name 'Bad_Name' is not a valid Kubernetes name"),
    ("name", "g" * 63, "the operator names this component's resources"),
    ("dynamo_version", "latest", "'latest' is not a Dynamo version"),
    ("decode_replicas", "-1", "Ensure this value is greater than or equal to 0."),
    ("decode_gpus", "100", "Ensure this value is less than or equal to"),
    ("decode_shared_memory", "lots", "lots"),
    ("decode_engine_args", "--max-model-len 'unclosed", "engine arguments cannot be parsed"),
]


def test_a_bad_value_in_every_create_field_shows_its_message_on_screen(page):
    from playwright.sync_api import expect

    for field, value, message in BAD_CREATE_VALUES:
        _open(page, "/graphs/new/?template=mocker-disagg")
        page.fill("input[name=name]", "good-name")
        page.fill(f"input[name={field}]", value)
        page.click("button[value=create]")
        expect(page.locator("main")).to_contain_text(message, timeout=15_000)
        expect(page.locator("h1")).to_have_text("New graph from a template")
    assert not Graph.objects.exists()
    # The preview says what is missing while the form is being filled.
    _open(page, "/graphs/new/?template=vllm-agg")
    page.fill("input[name=decode_replicas]", "-2")
    expect(page.locator("#form-problems")).to_contain_text("Replicas: Ensure this value is greater than or equal to 0.",
                                                           timeout=15_000)
    assert page.problems == []


def test_a_bad_manifest_and_a_stale_edit_show_their_messages(page):
    from playwright.sync_api import expect

    _open(page, "/graphs/import/")
    page.fill("#yaml", "apiVersion: nvidia.com/v1beta1\nkind: DynamoGraphDeployment\nmetadata: {name: Llama.Prod}\n"
                       "spec: {components: []}\n")
    page.click("button[type=submit]")
    expect(page.locator("main")).to_contain_text("DynamoGraphDeployment name 'Llama.Prod' is not a valid")
    expect(page.locator("main")).not_to_contain_text("'Llama-Prod'")
    page.fill("#yaml", "a: [unclosed")
    page.click("button[type=submit]")
    expect(page.locator("main")).to_contain_text("YAML")
    # An edit of a revision that moved on under the editor is refused, with the reason.
    graph = factories.graph("moving")
    _open(page, "/graphs/moving/edit/")
    services.graph_update(graph=graph, spec=graph.head.graph_spec.model_copy(update={"model": "other"}),
                          message="meanwhile")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_contain_text("revision", timeout=10_000)
    assert Graph.objects.get(name="moving").head.number == 2
    assert page.problems == []


@pytest.mark.parametrize("source", ["v1alpha1", "v1beta1"])
def test_an_imported_manifest_is_edited_resaved_and_exported_field_by_field(page, source):
    from playwright.sync_api import expect

    text = ALPHA_WITH_RESOURCES if source == "v1alpha1" else BETA_MOCKER.read_text()
    manifest = yaml.safe_load(text)
    name = manifest["metadata"]["name"]
    _open(page, "/graphs/import/")
    page.fill("#yaml", text)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text(name, timeout=15_000)

    page.click("text=Edit YAML")
    opened = yaml.safe_load(page.input_value("#yaml"))
    assert opened == manifest  # in the version it was imported in, every field as written
    # One change (decode replicas 1 -> 3), saved as a new revision.
    if source == "v1alpha1":
        opened["spec"]["services"]["decode"]["replicas"] = 3
    else:
        next(c for c in opened["spec"]["components"] if c.get("type") == "decode")["replicas"] = 3
    page.fill("#yaml", yaml.safe_dump(opened, sort_keys=False))
    page.click("button[type=submit]")
    expect(page.locator(".flash-success")).to_contain_text("as revision 2", timeout=15_000)

    with page.expect_download() as download:
        page.click("text=Export YAML")
    exported = yaml.safe_load(Path(download.value.path()).read_text())
    assert download.value.suggested_filename == f"{name}-r2-{source}.yaml"
    assert exported == opened  # field by field: nothing dropped, nothing added
    assert page.problems == []


def _deployed(name: str, **kwargs) -> Graph:
    spec = build_spec(template="mocker-disagg", name=name, prefill=PoolFields(gpus=0, hf_token_secret=""),
                      decode=PoolFields(gpus=0, hf_token_secret=""), **kwargs)
    graph = services.graph_create(spec=spec)
    Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready",
                              manifest=render(spec), generation=1, observed_generation=1)
    return graph


def test_every_refused_action_shows_its_message_beside_it_and_a_planner_pool_offers_force(page, settings):
    from playwright.sync_api import expect

    message = page.locator("#action-message")
    # A slider on a Planner-managed pool: the refusal, then the way to force it.
    _deployed("planned", planner=PlannerSettings())
    _open(page, "/graphs/planned/")
    page.locator("#slider-decode").fill("3")
    expect(message).to_contain_text("decode is managed by Dynamo's Planner", timeout=10_000)
    page.wait_for_timeout(2_500)  # the status polls every 2 s: the message stays
    expect(message).to_contain_text("decode is managed by Dynamo's Planner")
    page.click("#force-scale")
    expect(page.locator("#status")).to_contain_text("scale is pending", timeout=10_000)
    expect(message).to_be_empty()
    assert Operation.objects.get(graph__name="planned").params == {"service": "decode", "replicas": 3, "force": True}

    # Another action while that operation is unfinished.
    page.click("#apply-button")
    expect(message).to_contain_text("planned already has a pending scale operation", timeout=10_000)

    # A scale the host cannot run: refused up front, naming the limit and its setting ("planned"
    # runs 3 processes, "small" 3 of which 2 stay: 3 decode replicas fit).
    settings.LOCAL_RUNTIME_MAX_PROCESSES = 8
    _deployed("small")
    _open(page, "/graphs/small/")
    page.locator("#slider-decode").fill("8")
    expect(message).to_contain_text("at most 8 processes on this host (setting LOCAL_RUNTIME_MAX_PROCESSES)",
                                    timeout=10_000)
    expect(message).to_contain_text("at most 3 replicas of decode fit now")
    assert not Operation.objects.filter(graph__name="small").exists()

    # An apply of a revision with errors, from its page (which says so before the click).
    services.graph_create(spec=build_spec(template="vllm-disagg", name="gpuless", prefill=PoolFields(gpus=0),
                                          decode=PoolFields(gpus=0)))
    _open(page, "/graphs/gpuless/")
    expect(page.locator("#head-errors")).to_contain_text("cannot be applied")
    page.click("#apply-button")
    expect(message).to_contain_text("revision 1 has", timeout=10_000)
    expect(message).to_contain_text("cannot be applied")
    page.click("text=Preview (dry run)")
    expect(message).to_contain_text("cannot be applied", timeout=10_000)
    assert not Operation.objects.filter(graph__name="gpuless").exists()
    assert page.problems == []


def test_a_refusal_that_is_not_a_fragment_is_shown_as_text_next_to_its_form(page, live_server):
    """A 403 page (a session that lost its role, a CSRF failure) is not swapped into the status:
    its message is written next to the form that asked."""
    from playwright.sync_api import expect

    _deployed("lost")
    _open(page, "/graphs/lost/")
    page.evaluate("document.body.setAttribute('hx-headers', JSON.stringify({'X-CSRFToken': 'stale'}))")
    page.click("#apply-button")
    expect(page.locator("#runtime .refusal")).to_contain_text("CSRF", timeout=10_000)
    assert not Operation.objects.exists()


def test_the_graph_page_does_not_scroll_sideways_at_800_px(page):
    from graphs.models import Pod

    graph = _deployed("narrow-graph-with-a-long-name")
    deployment = Deployment.objects.get(graph=graph)
    for i, service in enumerate(["Frontend", "prefill", "decode"]):
        Pod.objects.create(deployment=deployment, name=f"narrow-graph-with-a-long-name-{service.lower()}-0",
                           service=service, role=service.lower(), phase="Running", ready=True, port=20500 + i,
                           shm_bytes=23 * 2**30, command=["python3", "-m", "dynamo.mocker"],
                           args=["--model-path", "/var/lib/a/very/long/path/to/a/model/directory/x" * 2])
    page.set_viewport_size({"width": 800, "height": 900})
    _open(page, "/graphs/narrow-graph-with-a-long-name/")
    page.wait_for_selector("#pods")
    wide = page.evaluate("""() => {
      const limit = document.documentElement.clientWidth;
      return [...document.querySelectorAll('body *')].filter(e => {
        const r = e.getBoundingClientRect();
        return r.right > limit + 1 && getComputedStyle(e).position !== 'fixed' && !e.closest('.scroll-x');
      }).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className).slice(0, 15);
    }""")
    width = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1], (width, wide)


def test_the_graph_list_shows_a_change_the_runtime_observes_without_a_reload(page):
    """The rows are pushed (graphs.live); this server (WSGI) cannot hold a stream, so the page is
    told to poll and the row still changes on screen, with nothing else on the page touched."""
    from playwright.sync_api import expect

    from graphs.runtimes.base import Observation, PodStatus
    from graphs.status_cache import observation_record

    graph = factories.graph("listed", model="m", backend="mocker", pool=PoolFields(gpus=0))
    deployment = factories.deployed(graph, state="progressing", observed=None)
    _open(page, "/graphs/?q=listed")
    row = page.locator("#graph-rows tr", has_text="listed")
    expect(row).to_contain_text("Progressing")
    page.fill("input[name=namespace]", "typed-not-sent")  # what the person is typing stays
    observation_record(deployment, Observation(state="ready", pods=[
        PodStatus(name="listed-decode-0", service="decode", role="decode", phase="Running", ready=True)]),
        observed_generation=1)
    expect(row).to_contain_text("1/1", timeout=10_000)
    expect(row).to_contain_text("Ready")
    assert page.input_value("input[name=namespace]") == "typed-not-sent"
    assert page.problems == []


def test_a_session_that_ends_while_a_page_is_open_leads_to_the_sign_in_page_and_back(page):
    """The rows' next fetch is redirected to the sign-in page: the page goes there (the sign-in
    page is never swapped into the table), and signing in comes back to the list, not to the
    fragment that was asked for."""
    from playwright.sync_api import expect

    from graphs.runtimes.base import Observation, PodStatus
    from graphs.status_cache import observation_record
    from tests.conftest import PASSWORD

    graph = factories.graph("listed", model="m", backend="mocker", pool=PoolFields(gpus=0))
    deployment = factories.deployed(graph, state="progressing", observed=None)
    _open(page, "/graphs/?q=listed")
    page.context.clear_cookies()  # the session is gone (signed out elsewhere, expired)
    observation_record(deployment, Observation(state="ready", pods=[
        PodStatus(name="listed-decode-0", service="decode", role="decode", phase="Running", ready=True)]),
        observed_generation=1)
    page.wait_for_url("**/login/?next=%2Fgraphs%2F%3Fq%3Dlisted", timeout=10_000)
    assert page.locator("#graph-rows").count() == 0
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/graphs/?q=listed", timeout=10_000)
    expect(page.locator("#graph-rows tr", has_text="listed")).to_contain_text("1/1")
