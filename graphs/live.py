"""A graph page's status, pushed: ``GET /graphs/<name>/events/`` is a stream of server-sent
events that says ``status`` whenever what the status fragment shows has changed, and the page
(htmx's SSE extension) then fetches the fragment. Nothing is sent while nothing changes but a
comment every ``KEEPALIVE_S`` seconds, so that a proxy keeps the stream open.

How a change is known, in each web process (``Hub``, one per event loop):

* PostgreSQL: the database says it. Every writer of what a graph's status shows moves the
  graph's status version (graphs.status_version.moved), which also ``NOTIFY graphs_status``
  with the graph's id; PostgreSQL delivers a notification at its transaction's commit. One
  ``LISTEN`` connection per process, opened while a page is open, fans it out.
* SQLite (the laptop's default): one read of the open graphs' versions every ``POLL_S``
  seconds per process, only while a page is open.

A graph's *version* digests its status version (StatusStamp) and its deployment's shown columns: it is each
event's id, so a browser that reconnects (``Last-Event-ID``) or a page that rendered an older
version (``?v=``) is told at once that it missed something.

The graph list is pushed the same way: ``GET /graphs/_events/?<the list's own query>`` waits on
the graphs of that page and says ``rows`` when the rows it shows (state, pods ready, revision)
changed; the page then fetches them. Its version digests the rows themselves, so a row that
moved out of a narrowed list (a state filter) or into it is a change too.

Served on the event loop through Django's ASGI handler (controlplane.asgi routes the path
there), never on the pages' thread pool: an open stream holds no thread. Under WSGI (the test
client, a WSGI server) the view answers the one event a change would have sent, or none, then
``end``: the page closes the stream and polls its status every 2 s, as it did before the push."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging

from asgiref.sync import sync_to_async
from django.db import connections
from django.http import Http404, HttpResponseNotAllowed, StreamingHttpResponse

from accounts.roles import Role, role_required

from .models import Deployment, Graph, StatusStamp
from .status_version import CHANNEL

log = logging.getLogger(__name__)

POLL_S = 0.1  # SQLite: how often the open graphs' versions are read
KEEPALIVE_S = 20  # a comment on a quiet stream, well inside common proxies' idle timeouts
RETRY_MS = 1000  # how soon a browser reconnects a stream that ended
# The page closes its stream on this event (sse-close) and polls instead: what a server that
# cannot hold a stream (WSGI) answers.
END = b"event: end\ndata: poll\n\n"
LISTEN_CHECK_S = 15  # PostgreSQL: how often a quiet LISTEN connection is checked
# The deployment's columns that the status shows: all but its observed time, which moves on every
# look, and its applied manifest.
SHOWN = tuple(field.attname for field in Deployment._meta.concrete_fields
              if field.attname not in ("id", "graph_id", "observed_at", "manifest"))


def versions(graph_ids) -> dict[int, str]:
    """Each graph's version: what its status shows, digested (one query)."""
    rows = Graph.objects.filter(pk__in=list(graph_ids)).values_list(
        "pk", "status_stamp__value", *(f"deployment__{field}" for field in SHOWN))
    return {row[0]: _digest(row[1:]) for row in rows}


def version_from(graph: Graph, deployment: Deployment | None) -> str:
    """``versions`` from a graph read with its status stamp and deployment (no query): what the
    page rendered, so that its stream tells it of any change made since."""
    try:
        stamp = graph.status_stamp.value
    except StatusStamp.DoesNotExist:
        stamp = None
    shown = tuple(getattr(deployment, field) if deployment is not None else None for field in SHOWN)
    return _digest((stamp, *shown))


def _digest(values: tuple) -> str:
    return hashlib.blake2b(repr(values).encode(), digest_size=8).hexdigest()


def version_of(graph_id: int) -> str | None:
    return versions([graph_id]).get(graph_id)


class Hub:
    """Per event loop: which open streams wait on which graph, and the one task that learns of
    changes (LISTEN on PostgreSQL, a poll on SQLite) while any stream is open."""

    def __init__(self) -> None:
        self.waiting: dict[int, set[asyncio.Event]] = {}
        self.task: asyncio.Task | None = None

    @contextlib.contextmanager
    def subscribe(self, *graph_ids: int):
        """One event, set when any of these graphs' status changes (a graph page: its graph; the
        graph list: the graphs of its page)."""
        wake = asyncio.Event()
        for graph_id in graph_ids:
            self.waiting.setdefault(graph_id, set()).add(wake)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())
        try:
            yield wake
        finally:
            for graph_id in graph_ids:
                waiting = self.waiting.get(graph_id)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del self.waiting[graph_id]
            if not self.waiting and self.task is not None:
                self.task.cancel()  # the last page closed: the LISTEN connection goes with it
                self.task = None

    def wake(self, graph_id: int | None = None) -> None:
        """Wake the streams of ``graph_id`` (None: of every graph: something may have been missed)."""
        for gid, events in self.waiting.items():
            if graph_id is None or gid == graph_id:
                for event in events:
                    event.set()

    async def _run(self) -> None:
        while self.waiting:
            try:
                if connections["default"].vendor == "postgresql":
                    await self._listen()
                else:
                    await self._poll()
            except Exception:  # a database that is down, say: the streams stay open and are woken after
                log.exception("the status push failed; trying again")
                await asyncio.sleep(1)
                self.wake()

    async def _poll(self) -> None:
        seen: dict[int, str] = {}
        while self.waiting:
            now = await _in_thread(versions, set(self.waiting))
            for gid, version in now.items():
                if seen.get(gid, version) != version:
                    self.wake(gid)
            seen = now
            await asyncio.sleep(POLL_S)

    async def _listen(self) -> None:
        import psycopg

        params = {k: v for k, v in connections["default"].get_connection_params().items()
                  if k not in ("cursor_factory", "context", "prepare_threshold")}
        while self.waiting:
            try:
                connection = await asyncio.wait_for(psycopg.AsyncConnection.connect(autocommit=True, **params),
                                                    LISTEN_CHECK_S)
            except (psycopg.Error, OSError, TimeoutError) as exc:
                log.warning("cannot listen for status changes (%s); trying again", exc)
                await asyncio.sleep(1)
                continue
            try:
                async with connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    self.wake()  # whatever changed while nobody listened
                    while self.waiting:
                        async for note in connection.notifies(timeout=LISTEN_CHECK_S):
                            with contextlib.suppress(ValueError):
                                self.wake(int(note.payload))
                            if not self.waiting:
                                break
                        else:  # quiet for LISTEN_CHECK_S: is the server still there?
                            await asyncio.wait_for(connection.execute("SELECT 1"), 5)
            except (psycopg.Error, OSError, TimeoutError) as exc:
                log.warning("the status LISTEN connection was lost (%s); listening again", exc)
                await asyncio.sleep(0.5)


async def _in_thread(read, *args):
    """``read(*args)`` in a worker thread whose database connection is closed after: no thread of
    the pool keeps one for a stream that may stay open for hours."""
    def run():
        try:
            return read(*args)
        finally:
            connections.close_all()
    return await sync_to_async(run, thread_sensitive=False)()


_hubs: dict[asyncio.AbstractEventLoop, Hub] = {}


def hub() -> Hub:
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        for old in [old for old in _hubs if old.is_closed()]:
            del _hubs[old]
        found = _hubs[loop] = Hub()
    return found


@role_required(Role.VIEWER)
def _open(request, name: str) -> tuple[int, str | None]:
    """Who may watch (a viewer, signed in), and which graph: its id and version. Http404, or
    PermissionDenied / a login redirect raised as the pages do."""
    graph_id = Graph.objects.filter(name=name).values_list("pk", flat=True).first()
    if graph_id is None:
        raise Http404("No such graph.")
    return graph_id, version_of(graph_id)


def _event(version: str) -> bytes:
    return f"event: status\nid: {version}\ndata: {version}\n\n".encode()


def _known(request) -> str:
    """The version the page already shows: the stream's last event id, else the page's ?v=."""
    return request.headers.get("Last-Event-ID") or request.GET.get("v", "")


async def graph_events(request, name: str):
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    # Under ASGI any thread will do (the streams' reads never queue on one); under WSGI the
    # request's own, whose connection may hold the caller's transaction (the test client's).
    asgi = hasattr(request, "scope")
    opened = await (_in_thread(_open, request, name) if asgi else sync_to_async(_open)(request, name))
    if not isinstance(opened, tuple):
        return opened  # the login redirect
    graph_id, version = opened
    if not asgi:
        return _answered_once(_event(version) if version and version != _known(request) else None)
    return _stream(_push(graph_id, version, _known(request)))


async def _push(graph_id: int, version: str | None, known: str):
    """Until the page leaves. The stream carries no data but the version digest; the fragment
    the page then fetches is a request of its own, signed in and checked like any other."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    with hub().subscribe(graph_id) as wake:
        if version and version != known:
            yield _event(version)
            known = version
        async for keepalive in _woken(wake):
            if keepalive:
                yield keepalive
                continue
            version = await _in_thread(version_of, graph_id)
            if version is None:  # the graph was deleted: the page's next fetch says so
                yield _event("deleted")
                return
            if version != known:
                yield _event(version)
                known = version


async def _woken(wake: asyncio.Event):
    """None each time ``wake`` is set; a keepalive comment after each KEEPALIVE_S of quiet."""
    while True:
        try:
            await asyncio.wait_for(wake.wait(), KEEPALIVE_S)
        except TimeoutError:
            yield b": keepalive\n\n"
            continue
        wake.clear()
        yield None


def _answered_once(event: bytes | None) -> StreamingHttpResponse:
    """WSGI, which cannot hold a stream: what changed, if anything, then "end": the page polls
    instead (static/js/app.js)."""
    return _stream(iter([f"retry: {RETRY_MS}\n\n".encode(), *([event] if event else []), END]))


def _stream(body) -> StreamingHttpResponse:
    response = StreamingHttpResponse(body, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on as it comes
    return response


graph_events.required_role = Role.VIEWER


# ------------------------------------------------------------------ the graph list


def rows_version(rows) -> str:
    """The version of a page of the graph list: its rows (selectors.LIST_ROW tuples), digested."""
    return _digest(tuple(rows))


def _list_rows(params) -> list[tuple]:
    from .filters import list_query
    from .selectors import graph_list_page

    _given, narrowed, _errors, archived = list_query(params)
    return list(graph_list_page(narrowed, archived=archived, number=params.get("page")).object_list)


def _shown(params) -> tuple[list[int], str]:
    """The ids of the graphs a list page shows, and its version (two queries: the page's own)."""
    rows = _list_rows(params)
    names = [row[0] for row in rows]
    return sorted(Graph.objects.filter(name__in=names).values_list("pk", flat=True)), rows_version(rows)


@role_required(Role.VIEWER)
def _open_list(request) -> tuple[list[int], str]:
    return _shown(request.GET)


async def graph_list_events(request):
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    asgi = hasattr(request, "scope")
    opened = await (_in_thread(_open_list, request) if asgi else sync_to_async(_open_list)(request))
    if not isinstance(opened, tuple):
        return opened  # the login redirect
    ids, version = opened
    if not asgi:
        return _answered_once(_rows_event(version) if version != _known(request) else None)
    return _stream(_push_list(request.GET.copy(), ids, version, _known(request)))


def _rows_event(version: str) -> bytes:
    return f"event: rows\nid: {version}\ndata: {version}\n\n".encode()


async def _push_list(params, ids: list[int], version: str, known: str):
    """Until the page leaves: ``rows`` whenever a graph of the page changed what its row shows.
    After each, it waits on the graphs the page now shows (a narrowed list's rows come and go)."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    if version != known:
        yield _rows_event(version)
        known = version
    while True:
        with hub().subscribe(*ids) as wake:
            async with contextlib.aclosing(_woken(wake)) as woken:
                async for keepalive in woken:
                    if keepalive:
                        yield keepalive
                        continue
                    now, version = await _in_thread(_shown, params)
                    if version != known:
                        yield _rows_event(version)
                        known = version
                    if now != ids:
                        ids = now
                        break  # wait on the graphs the page shows now


graph_list_events.required_role = Role.VIEWER
