"""Fixtures for the playground tests: the ASGI app under a real uvicorn server, graphs whose
Deployment points at the session's real Dynamo frontend, tokens, a recording TCP relay and
the frontend's gauges. Import what a module needs:

    from tests.playground_fixtures import asgi_server, chat_graph, ...  # noqa: F401

The server runs in a thread of the test process, so it sees the test database (the same
PostgreSQL test database, or SQLite's shared in-memory one) and the same settings overrides;
tests that use it need ``transactional_db`` so that their rows are committed."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.dynamo_fixtures import dynamo_graph  # noqa: F401

CHAT = "/api/playground/{graph}/v1/chat/completions"
GAUGES = ("dynamo_frontend_inflight_requests", "dynamo_frontend_active_requests")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AsgiServer:
    """An ASGI application (``module:attribute``) under uvicorn as it ships, on a free loopback
    port, in a thread."""

    def __init__(self, app: str = "controlplane.asgi:application") -> None:
        import importlib

        import uvicorn

        module, _, attribute = app.partition(":")
        application = getattr(importlib.import_module(module), attribute)
        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name="playground-uvicorn", daemon=True)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve())

    def start(self) -> AsgiServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        from asgiref.sync import sync_to_async
        from django.db import connections

        from endpoint import upstream

        async def close() -> None:
            # The database connections of the server's thread-sensitive executor, and the
            # pooled upstream client: both belong to this server, not to the test process.
            await sync_to_async(connections.close_all)()
            await upstream.close()

        if self.loop is not None and self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=10)
        self.server.should_exit = True
        self.thread.join(timeout=10)


# The project's entry point (the OpenAI endpoint outside Django, endpoint.asgi) and plain
# Django (the same paths through endpoint.proxy's views): every proxy test runs against both.
ENTRY_POINTS = ["controlplane.asgi:application", "controlplane.asgi:django_application"]


@pytest.fixture(scope="session", params=ENTRY_POINTS, ids=["controlplane-asgi", "django-views"])
def asgi_server(request, django_db_setup) -> Iterator[AsgiServer]:
    server = AsgiServer(request.param).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def routed_server(django_db_setup) -> Iterator[AsgiServer]:
    """The project's entry point: pages through the middleware stack, the OpenAI endpoint and
    /metrics outside it."""
    server = AsgiServer("controlplane.asgi:application").start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _fresh_limits():
    """Rate and stream counters live in the (process-local) cache, admissions are remembered
    per process: start every test with neither."""
    from django.core.cache import cache

    from endpoint import admission, counting, upstream

    cache.clear()
    admission.forget()
    counting.reset()
    yield
    cache.clear()
    admission.forget()
    counting.reset()
    # The test client runs each request on an event loop of its own: drop a pooled upstream
    # session whose loop is gone (production runs one loop per process).
    if upstream._session_loop is not None and upstream._session_loop.is_closed():
        upstream._session = upstream._session_loop = None


def make_graph(name: str, model: str, endpoint: str, *, user=None, state: str = "ready", active: bool = True):
    """A Graph (through the service, from the mocker template) with a Deployment that points
    at ``endpoint``, as the runtime's observer would have written it."""
    from tests import factories

    return factories.serving(name, endpoint=endpoint, model=model, backend="mocker", user=user, state=state,
                             active=active, observed=None)


@pytest.fixture
def chat_graph(users, dynamo_graph):  # noqa: F811
    """A graph named pg-test served by the session's real Dynamo frontend, once it serves."""
    dynamo_graph.wait_serving()
    return make_graph("pg-test", dynamo_graph.model, dynamo_graph.endpoint, user=users["admin"])


@pytest.fixture
def tokens(users) -> dict[str, str]:
    """role -> API token key."""
    from accounts.tokens import token_create

    return {role: token_create(user=user, name="tests", via="system")[1] for role, user in users.items()}


def chat_body(model: str, *, max_tokens: int = 16, stream: bool = True, **extra) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": "Tell me about disaggregated serving."}],
            "max_tokens": max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


def gauges(endpoint: str) -> dict[str, float]:
    """The frontend's in-flight and active request gauges, summed over models."""
    text = httpx.get(f"{endpoint}/metrics", timeout=2).text
    out = dict.fromkeys(GAUGES, 0.0)
    for name in GAUGES:
        for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M):
            out[name] += float(m.group(1))
    return out


def wait_for(predicate, *, timeout: float, interval: float = 0.01):
    """Poll until ``predicate()`` is truthy; returns (value, seconds waited) or raises."""
    start = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not true within {timeout} s (last value: {value!r})")
        time.sleep(interval)


@dataclass
class SSEReading:
    """A streamed reply as a client saw it: the raw body, and each read with its arrival time."""

    raw: bytes = b""
    reads: list[tuple[float, bytes]] = field(default_factory=list)
    started: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 0

    @property
    def events(self) -> list[str]:
        return [block[len("data: "):] for block in self.raw.decode().split("\n\n") if block.startswith("data: ")]

    def content_arrivals(self) -> list[float]:
        """Arrival time (ms, on the start's clock) of every event that carries content."""
        out, buffer = [], b""
        for at, chunk in self.reads:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n\n")
            for block in complete:
                if not block.startswith(b"data: {"):
                    continue
                choices = json.loads(block[6:]).get("choices") or [{}]
                if (choices[0].get("delta") or {}).get("content"):
                    out.append((at - self.started) * 1000)
        return out


def read_sse(client: httpx.Client, url: str, body: dict, **kwargs) -> SSEReading:
    reading = SSEReading(started=time.perf_counter())
    with client.stream("POST", url, json=body, **kwargs) as response:
        reading.status = response.status_code
        reading.headers = dict(response.headers)
        for chunk in response.iter_raw():
            reading.reads.append((time.perf_counter(), chunk))
            reading.raw += chunk
    return reading


class RecordingRelay:
    """A TCP relay on loopback between the proxy and the frontend that keeps every byte the
    frontend sends back, so a test can compare what the proxy received with what it relayed.
    It changes nothing in either direction."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.received = bytearray()
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, name="recording-relay", daemon=True)

    async def _pipe(self, reader, writer, record: bool) -> None:
        try:
            while data := await reader.read(65536):
                if record:
                    self.received += data
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _handle(self, client_reader, client_writer) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(self._pipe(client_reader, upstream_writer, False),
                             self._pipe(upstream_reader, client_writer, True))

    def start(self) -> RecordingRelay:
        self.thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", self.port), self.loop).result(5)
        return self

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def dechunk(raw: bytes) -> tuple[bytes, bytes]:
    """An HTTP/1.1 response's head and its de-chunked body (Transfer-Encoding: chunked)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    body = bytearray()
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2:]
    return head, bytes(body)
