"""graphs.live: a graph page's status is pushed. The stream (GET /graphs/<name>/events/, served
by the project's ASGI entry point under uvicorn) says ``status`` when a runtime's observation,
an operation or the deployment changes what the status shows, says nothing while nothing
changes, and tells a page that rendered an older version at once. On PostgreSQL the database's
notifications carry it, on SQLite a read of the open graphs' versions (CI runs the suite on
PostgreSQL; both pass)."""

from __future__ import annotations

import queue
import threading
import time

import httpx
import pytest

from core.catalog import PoolFields
from graphs import live
from graphs.models import Deployment, Graph, GraphState
from graphs.runtimes.base import Observation, PodStatus
from graphs.status_cache import observation_record, state_record
from graphs.status_view import WITH_HEAD_AND_DEPLOYMENT, WITH_STAMP
from tests import factories
from tests.playground_fixtures import routed_server  # noqa: F401


def _graph(name: str = "pushed") -> tuple[Graph, Deployment]:
    graph = factories.graph(name, model="m", backend="mocker", pool=PoolFields(gpus=0))
    return graph, factories.deployed(graph, state=GraphState.PROGRESSING, observed=None)


def _observe(deployment: Deployment, *pods: str, state: str = GraphState.PROGRESSING) -> None:
    observation_record(deployment, Observation(state=state, pods=[
        PodStatus(name=p, service="decode", role="decode", phase="Running", ready=True) for p in pods]),
        observed_generation=1)


def _as_the_page_reads_it(graph: Graph) -> Graph:
    return (Graph.objects.select_related(*WITH_HEAD_AND_DEPLOYMENT, *WITH_STAMP)
            .get(pk=graph.pk))


def test_the_version_a_page_renders_is_the_one_the_stream_reads_and_moves_with_the_status(db):
    graph, deployment = _graph()
    read = _as_the_page_reads_it(graph)
    assert live.version_from(read, read.deployment) == live.versions([graph.pk])[graph.pk]
    before = live.versions([graph.pk])[graph.pk]
    _observe(deployment, "pushed-decode-0")
    after_pod = live.versions([graph.pk])[graph.pk]
    assert after_pod != before
    read = _as_the_page_reads_it(graph)
    assert live.version_from(read, read.deployment) == after_pod
    Deployment.objects.filter(pk=deployment.pk).update(state=GraphState.READY)
    assert live.versions([graph.pk])[graph.pk] != after_pod


class Stream:
    """The events of one open stream, read in a thread: (seconds since open, event, data)."""

    def __init__(self, url: str, cookies: dict, headers: dict | None = None):
        self.events: queue.Queue = queue.Queue()
        self.opened = threading.Event()
        self.closing = threading.Event()
        self.status_code = None
        self.started = time.monotonic()
        self._client = httpx.Client(cookies=cookies, timeout=httpx.Timeout(5, read=60))
        self._thread = threading.Thread(target=self._read, args=(url, headers or {}), daemon=True)
        self._thread.start()
        assert self.opened.wait(10), "the stream did not open"

    def _read(self, url: str, headers: dict) -> None:
        try:
            with self._client.stream("GET", url, headers=headers) as response:
                self.status_code = response.status_code
                self.content_type = response.headers.get("content-type", "")
                self.opened.set()
                event = None
                for line in response.iter_lines():
                    if self.closing.is_set():
                        return  # leaving the block closes the connection: the server sees it go
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event:
                        self.events.put((time.monotonic(), event, line[6:]))
                        event = None
        except (httpx.HTTPError, RuntimeError):
            self.opened.set()

    def next(self, within: float):
        try:
            return self.events.get(timeout=within)
        except queue.Empty:
            return None

    def close(self) -> None:
        self.closing.set()
        self._thread.join(10)
        self._client.close()


@pytest.fixture(autouse=True)
def _quick_keepalives(monkeypatch):
    """A comment every 0.3 s on a quiet stream (the server runs in this process), so that a
    reader that closes is noticed at once: closing the connection is how a page leaves."""
    monkeypatch.setattr(live, "KEEPALIVE_S", 0.3)


@pytest.fixture
def viewer_cookies(client_for):
    client = client_for("viewer")
    return {name: morsel.value for name, morsel in client.cookies.items()}


@pytest.mark.django_db(transaction=True)
def test_a_change_the_runtime_observes_reaches_an_open_stream_and_nothing_is_sent_while_nothing_changes(
        routed_server, viewer_cookies):  # noqa: F811
    graph, deployment = _graph()
    _observe(deployment, "pushed-decode-0")
    version = live.versions([graph.pk])[graph.pk]
    stream = Stream(f"{routed_server.url}/graphs/{graph.name}/events/?v={version}", viewer_cookies)
    try:
        assert stream.status_code == 200 and stream.content_type.startswith("text/event-stream")
        time.sleep(0.5)  # subscribed (the first read of the hub, or LISTEN, is in place)
        # The same pods observed again: nothing the status shows changed, nothing is sent.
        _observe(deployment, "pushed-decode-0")
        assert stream.next(within=1.5) is None
        written = time.monotonic()
        _observe(deployment, "pushed-decode-0", "pushed-decode-1")
        got = stream.next(within=5)
        assert got is not None, "a new pod was not pushed"
        at, event, data = got
        assert event == "status" and data == live.versions([graph.pk])[graph.pk]
        assert at - written < 2.0  # the figure itself is bench/live.py's; this only says "pushed, not polled"
        state_record(deployment, state=GraphState.READY, message="")  # the graph's state alone
        assert stream.next(within=5)[1] == "status"
    finally:
        stream.close()


@pytest.mark.django_db(transaction=True)
def test_a_page_that_rendered_an_older_version_is_told_at_once(routed_server, viewer_cookies):  # noqa: F811
    graph, deployment = _graph()
    old = live.versions([graph.pk])[graph.pk]
    _observe(deployment, "pushed-decode-0")  # after the page was rendered, before its stream opened
    stream = Stream(f"{routed_server.url}/graphs/{graph.name}/events/?v={old}", viewer_cookies)
    try:
        got = stream.next(within=5)
        assert got is not None and got[2] == live.versions([graph.pk])[graph.pk]
    finally:
        stream.close()
    # A reconnecting browser's Last-Event-ID says what it has: the current one is not sent again.
    current = live.versions([graph.pk])[graph.pk]
    again = Stream(f"{routed_server.url}/graphs/{graph.name}/events/?v={old}", viewer_cookies,
                   headers={"Last-Event-ID": current})
    try:
        assert again.next(within=1.0) is None
    finally:
        again.close()


@pytest.mark.django_db(transaction=True)
def test_the_stream_asks_what_the_page_asks(routed_server, viewer_cookies):  # noqa: F811
    graph, _ = _graph()
    anonymous = httpx.get(f"{routed_server.url}/graphs/{graph.name}/events/", timeout=10)
    assert anonymous.status_code == 302 and "/login/" in anonymous.headers["location"]
    missing = httpx.get(f"{routed_server.url}/graphs/no-such-graph/events/", cookies=viewer_cookies, timeout=10)
    assert missing.status_code == 404
    posted = httpx.post(f"{routed_server.url}/graphs/{graph.name}/events/", cookies=viewer_cookies, timeout=10)
    assert posted.status_code in (403, 405)  # CSRF first, else the method


def test_under_wsgi_the_stream_is_one_answer_then_the_page_is_told_to_poll(client_for, db):
    graph, deployment = _graph()
    client = client_for("viewer")
    current = live.versions([graph.pk])[graph.pk]
    same = client.get(f"/graphs/{graph.name}/events/?v={current}")
    assert same.status_code == 200 and same["Content-Type"].startswith("text/event-stream")
    assert b"".join(same.streaming_content) == b"retry: 1000\n\nevent: end\ndata: poll\n\n"
    _observe(deployment, "pushed-decode-0")
    moved = b"".join(client.get(f"/graphs/{graph.name}/events/?v={current}").streaming_content).decode()
    assert f"event: status\nid: {live.versions([graph.pk])[graph.pk]}" in moved


def test_the_graph_page_opens_the_stream_at_the_version_it_rendered(client_for, db):
    graph, deployment = _graph()
    _observe(deployment, "pushed-decode-0")
    page = client_for("viewer").get(f"/graphs/{graph.name}/").content.decode()
    assert f'sse-connect="/graphs/{graph.name}/events/?v={live.versions([graph.pk])[graph.pk]}"' in page
    assert 'hx-trigger="sse:status, status-poll"' in page and "every 2s" not in page.split('id="status"')[1][:200]
    # A pushed refresh never swaps an action's element out from under its request, and a swapped-in
    # slider is bound at once (htmx binds new content when the swap settles).
    assert 'hx-swap="outerHTML settle:0ms" hx-sync="#status:replace"' in page  # the apply form
    assert 'hx-trigger="sse:status, status-poll" hx-swap="outerHTML settle:0ms"' in page


@pytest.mark.django_db(transaction=True)
def test_a_closed_page_leaves_nothing_behind(routed_server, viewer_cookies):  # noqa: F811
    """The last stream that closes takes its process's LISTEN connection (PostgreSQL) or poll
    (SQLite) with it: a page with nothing open costs nothing."""
    graph, _ = _graph()
    stream = Stream(f"{routed_server.url}/graphs/{graph.name}/events/", viewer_cookies)
    time.sleep(0.5)
    hubs = list(live._hubs.values())
    assert any(hub.task is not None and hub.waiting for hub in hubs)
    stream.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(hub.waiting or hub.task is not None for hub in hubs):
        time.sleep(0.05)
    assert not any(hub.waiting or hub.task is not None for hub in hubs)


@pytest.mark.django_db(transaction=True)
def test_the_local_operator_starts_its_next_pass_when_a_graph_is_asked_to_change_not_a_whole_interval_later():
    """A slider's scale moves the deployment's generation: the operator, waiting for its next
    pass, reads that within a tenth of a second and starts the pass (the pod row, then the page,
    follow); with nothing asked it waits the whole interval."""
    from graphs.runtimes.local.operator import LocalOperator

    _, deployment = _graph()
    Deployment.objects.filter(pk=deployment.pk).update(runtime="local")
    waiting = LocalOperator.__new__(LocalOperator)  # _wait and desired use no state of the instance
    seen = waiting.desired()
    started = time.monotonic()
    waiting._wait(started + 0.6, seen)
    assert time.monotonic() - started >= 0.6  # nothing asked: the whole interval
    timer = threading.Timer(0.3, lambda: Deployment.objects.filter(pk=deployment.pk).update(generation=7))
    timer.start()
    started = time.monotonic()
    waiting._wait(started + 30, seen)
    timer.join()
    assert time.monotonic() - started < 15  # woken by the change, long before its interval ran out


# ------------------------------------------------------------------ the graph list


def _rows_version(query: str = "") -> str:
    from django.http import QueryDict

    return live._shown(QueryDict(query))[1]


@pytest.mark.django_db(transaction=True)
def test_the_graph_list_is_pushed_when_a_row_it_shows_changes_and_not_for_a_graph_it_does_not_show(
        routed_server, viewer_cookies):  # noqa: F811
    _, shown_deployment = _graph("alpha")
    _, hidden_deployment = _graph("zulu")
    version = _rows_version("q=alpha")
    stream = Stream(f"{routed_server.url}/graphs/_events/?q=alpha&v={version}", viewer_cookies)
    try:
        assert stream.status_code == 200 and stream.content_type.startswith("text/event-stream")
        time.sleep(0.5)
        _observe(hidden_deployment, "zulu-decode-0")  # not on this page (the search leaves it out)
        assert stream.next(within=1.5) is None
        _observe(shown_deployment, "alpha-decode-0")  # its "pods ready" column
        got = stream.next(within=5)
        assert got is not None and got[1] == "rows" and got[2] == _rows_version("q=alpha")
        state_record(shown_deployment, state=GraphState.READY, message="")  # its state column
        assert stream.next(within=5)[1] == "rows"
    finally:
        stream.close()


@pytest.mark.django_db(transaction=True)
def test_a_narrowed_list_is_told_when_a_graph_leaves_it_and_then_waits_on_the_graphs_it_shows_now(
        routed_server, viewer_cookies):  # noqa: F811
    _, leaving_deployment = _graph("alpha")
    _, staying_deployment = _graph("bravo")
    query = "state=progressing"
    old = _rows_version(query)
    stream = Stream(f"{routed_server.url}/graphs/_events/?{query}&v={old}", viewer_cookies)
    try:
        time.sleep(0.5)
        state_record(leaving_deployment, state=GraphState.READY, message="")  # out of "progressing"
        got = stream.next(within=5)
        assert got is not None and got[2] == _rows_version(query)
        state_record(leaving_deployment, state=GraphState.DEGRADED, message="")  # no longer on the page
        assert stream.next(within=1.5) is None
        _observe(staying_deployment, "bravo-decode-0")
        assert stream.next(within=5)[1] == "rows"
    finally:
        stream.close()


def test_the_graph_list_opens_its_stream_at_the_rows_it_rendered_and_serves_them_alone(client_for, db):
    _, deployment = _graph("alpha")
    _graph("bravo")
    viewer = client_for("viewer")
    page = viewer.get("/graphs/?q=alp&state=progressing").content.decode()
    version = _rows_version("q=alp&state=progressing")
    assert f'sse-connect="/graphs/_events/?q=alp&amp;state=progressing&amp;v={version}"' in page
    assert 'hx-get="/graphs/?q=alp&amp;state=progressing&amp;fragment=rows" hx-trigger="sse:rows, status-poll"' in page
    rows = viewer.get("/graphs/?q=alp&state=progressing&fragment=rows", headers={"HX-Request": "true"})
    assert rows.status_code == 200 and "<html" not in rows.content.decode()
    assert 'href="/graphs/alpha/"' in rows.content.decode() and "bravo" not in rows.content.decode()
    # Under WSGI the stream answers what changed since the page, if anything, then "end" (poll).
    same = b"".join(viewer.get(f"/graphs/_events/?q=alp&state=progressing&v={version}").streaming_content)
    assert same == b"retry: 1000\n\nevent: end\ndata: poll\n\n"
    _observe(deployment, "alpha-decode-0")
    moved = b"".join(viewer.get(f"/graphs/_events/?q=alp&state=progressing&v={version}").streaming_content).decode()
    assert f"event: rows\nid: {_rows_version('q=alp&state=progressing')}" in moved


@pytest.mark.django_db(transaction=True)
def test_the_list_stream_asks_what_the_list_asks(routed_server, viewer_cookies):  # noqa: F811
    anonymous = httpx.get(f"{routed_server.url}/graphs/_events/", timeout=10)
    assert anonymous.status_code == 302 and "/login/" in anonymous.headers["location"]
    # A filter the list cannot narrow by is the list's own answer: not applied, the page says so.
    bad = Stream(f"{routed_server.url}/graphs/_events/?namespace=Not_A_Label", viewer_cookies)
    try:
        assert bad.status_code == 200
    finally:
        bad.close()
    posted = httpx.post(f"{routed_server.url}/graphs/_events/", cookies=viewer_cookies, timeout=10)
    assert posted.status_code in (403, 405)
