"""The one module that talks HTTP to a graph's frontend: HTTP/1.1 on wire.Connection (a bare
asyncio Protocol with httptools' C parser), pooled per frontend with keep-alive.

Why not a client library: aiohttp relayed a stream for half the CPU of httpx (whose pool also
stalled under 64 concurrent streams), but its per-chunk machinery was still most of the
proxy's own CPU per SSE event (wire.py says what it was). The proxy sends one kind of request
to one kind of server, so it speaks the few lines of HTTP/1.1 it needs itself.

The pool belongs to the event loop that opened its connections; it is re-created if first
used from another loop (only tests do that; uvicorn runs one loop per process). At most
PLAYGROUND_UPSTREAM_MAX_CONNECTIONS are in use at once in a process; a request waits for a
free one within the connect timeout. An idle connection is kept for KEEPALIVE_SECONDS.

About keep-alive and TTFT: on a reused connection the Dynamo 1.6.1 frontend sends the first
token late when it follows the headers closely (Nagle against delayed ACK; fixed upstream by
ai-dynamo/dynamo#14643). ``PLAYGROUND_UPSTREAM_KEEPALIVE=0`` opens one connection per chat;
bench/proxy.py measured fresh connections to cost more than they save, so keep-alive stays."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings

from .wire import Connection, StreamDropped, StreamTimeout

CHAT_PATH = "/v1/chat/completions"
# What we forward from the caller's request; nothing else (no cookies, no Authorization).
FORWARDED_HEADERS = ("accept", "user-agent")
KEEPALIVE_SECONDS = 30.0
# What a relay may see mid-stream: the frontend stalled (a TimeoutError) or dropped it.
STREAM_ERRORS = (StreamTimeout, StreamDropped)


class UpstreamError(Exception):
    """The frontend could not be reached or did not answer in time. ``kind`` names why."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def status(self) -> int:
        return {"upstream_timeout": 504, "upstream_busy": 503}.get(self.kind, 502)


class BadEndpoint(ValueError):
    """A deployment's endpoint is not an http(s) URL we are willing to call."""


def frontend_base(endpoint: str) -> str:
    """The base URL of a frontend (as the runtime wrote it on the Deployment), normalised.
    Refuses anything but a plain http(s) URL: no credentials, no query or fragment."""
    try:
        parts = urlsplit(endpoint.strip())
        port = parts.port
    except ValueError as exc:
        raise BadEndpoint(f"the graph's endpoint {endpoint!r} is not a URL") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadEndpoint(f"the graph's endpoint {endpoint!r} is not an http(s) URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise BadEndpoint(f"the graph's endpoint {endpoint!r} carries credentials, a query or a fragment")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = f"{host}:{port}" if port else host
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"


def chat_url(endpoint: str) -> str:
    """The chat-completions URL of the frontend at ``endpoint``."""
    return frontend_base(endpoint) + CHAT_PATH


@dataclass
class _Pool:
    loop: asyncio.AbstractEventLoop
    slots: asyncio.Semaphore
    idle: dict[tuple, list[Connection]] = field(default_factory=dict)
    busy: set[Connection] = field(default_factory=set)
    closed: bool = False


_pool: _Pool | None = None
_tls: ssl.SSLContext | None = None


def session() -> _Pool:
    """This event loop's pool of connections (created on first use)."""
    global _pool
    loop = asyncio.get_running_loop()
    if _pool is None or _pool.loop is not loop or _pool.closed:
        if _pool is not None and _pool.loop is not loop:
            _discard(_pool)
        _pool = _Pool(loop, asyncio.Semaphore(settings.PLAYGROUND_UPSTREAM_MAX_CONNECTIONS))
    return _pool


def _discard(pool: _Pool) -> None:
    """Drop a pool of another (finished) event loop without awaiting anything on it."""
    pool.closed = True
    for conn in [c for conns in pool.idle.values() for c in conns] + list(pool.busy):
        with contextlib.suppress(Exception):
            conn.transport.abort()
    pool.idle.clear()
    pool.busy.clear()


async def close() -> None:
    """Close the pooled connections (tests, shutdown hooks)."""
    global _pool
    if _pool is not None and _pool.loop is asyncio.get_running_loop():
        _pool.closed = True
        for conns in _pool.idle.values():
            for conn in conns:
                conn.close()
        _pool.idle.clear()
    _pool = None


class Response:
    """A frontend's answer: ``status`` and ``headers`` (lower-case names) once ``request``
    returns, the body to ``read`` (or ``iter_any``). ``release()`` after reading it to the
    end gives the connection back for the next request; ``close()`` abandons it (the
    connection closes: the frontend cancels the request)."""

    def __init__(self, pool: _Pool, conn: Connection) -> None:
        self._pool = pool
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers
        self.read = conn.read  # the hot path: the relay calls it once per wake-up
        self._open = True

    def pipe(self, out, flow, *, end: bool = False):
        """The rest of the body written to the client's transport from the connection's own
        callback (wire.Connection.pipe)."""
        return self._conn.pipe(out, flow, end=end)

    def ended(self) -> bool:
        """Whether ``pipe(end=True)`` wrote the client's last chunk."""
        return self._conn.ended

    def tail(self) -> bytes:
        """The last bytes ``pipe`` wrote."""
        return self._conn.last_bytes()

    async def iter_any(self):
        while chunk := await self.read():
            yield chunk

    def release(self) -> None:
        if not self._open:
            return
        conn = self._conn
        if conn.reusable() and settings.PLAYGROUND_UPSTREAM_KEEPALIVE and not self._pool.closed:
            conn.done()
            conn.idle_since = self._pool.loop.time()
            self._give_back()
            self._pool.idle.setdefault(conn.key, []).append(conn)
        else:
            self.close()

    def close(self) -> None:
        if not self._open:
            return
        self._conn.close()
        self._give_back()

    def _give_back(self) -> None:
        self._open = False
        self._pool.busy.discard(self._conn)
        self._pool.slots.release()


@functools.lru_cache(maxsize=1024)  # a few frontends and routes: parsed once each
def _target(url: str) -> tuple[tuple, str, str]:
    parts = urlsplit(url)
    scheme, host = parts.scheme, parts.hostname
    port = parts.port or (443 if scheme == "https" else 80)
    host_header = parts.netloc.rpartition("@")[2]
    return (scheme, host, port), host_header, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _request_bytes(method: str, host: str, path: str, body: bytes | None, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"host: {host}", "accept-encoding: identity"]  # relayed as they come
    if body is not None:
        lines += ["content-type: application/json", f"content-length: {len(body)}"]
    for name in FORWARDED_HEADERS:
        value = headers.get(name)
        if value and "\r" not in value and "\n" not in value:
            lines.append(f"{name}: {value}")
    if not settings.PLAYGROUND_UPSTREAM_KEEPALIVE:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _pooled(pool: _Pool, key: tuple) -> Connection | None:
    """An idle kept-alive connection to ``key``, or None."""
    idle = pool.idle.get(key)
    now = pool.loop.time()
    while idle:
        conn = idle.pop()
        if not conn.lost and now - conn.idle_since < KEEPALIVE_SECONDS:
            return conn
        conn.close()
    return None


async def _open(pool: _Pool, key: tuple) -> Connection:
    global _tls
    scheme, host, port = key
    if scheme == "https" and _tls is None:
        _tls = ssl.create_default_context()
    conn = Connection(pool.loop, key)
    await pool.loop.create_connection(lambda: conn, host, port, ssl=_tls if scheme == "https" else None)
    return conn


NO_CONNECTION = ("the graph's frontend did not accept a connection in time (down, or too many streams to it "
                 "are open)")


async def request(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Response:
    """Send the request and wait for the response headers; the body is left to stream.
    The caller must ``release()`` (read to the end) or ``close()`` (abandon) the response."""
    pool = session()
    key, host, path = _target(url)
    data = _request_bytes(method, host, path, body, headers)
    connect = settings.PLAYGROUND_CONNECT_TIMEOUT
    try:
        if pool.slots.locked():  # all in use: wait for one within the connect timeout
            await asyncio.wait_for(pool.slots.acquire(), connect)
        else:
            await pool.slots.acquire()  # returns at once
    except TimeoutError:
        raise UpstreamError("upstream_unavailable", NO_CONNECTION) from None
    conn = None
    try:
        for attempt in (1, 2):
            conn = _pooled(pool, key)
            reused = conn is not None
            if conn is None:
                try:
                    conn = await asyncio.wait_for(_open(pool, key), connect)
                except TimeoutError:
                    raise UpstreamError("upstream_unavailable", NO_CONNECTION) from None
                except OSError as exc:
                    raise UpstreamError("upstream_unavailable",
                                        f"the graph's frontend is not reachable ({exc.strerror or exc})") from None
            pool.busy.add(conn)
            conn.start(data, settings.PLAYGROUND_IDLE_TIMEOUT)
            try:
                await conn.head()
                break
            except StreamDropped:
                # A kept-alive connection the frontend closed as we sent: once more, on a new one.
                if not (reused and not conn.received and attempt == 1):
                    raise
                pool.busy.discard(conn)
                conn.close()
    except StreamTimeout:
        _abort(pool, conn)
        raise UpstreamError("upstream_timeout", "the graph's frontend accepted the request but did not answer "
                                                "within the idle timeout") from None
    except StreamDropped as exc:
        _abort(pool, conn)
        raise UpstreamError("upstream_error", f"the graph's frontend failed: {exc}") from None
    except BaseException:
        _abort(pool, conn)
        raise
    return Response(pool, conn)


def _abort(pool: _Pool, conn: Connection | None) -> None:
    if conn is not None:
        pool.busy.discard(conn)
        conn.close()
    pool.slots.release()


async def read_all(response: Response, limit: int) -> bytes:
    """A non-streamed answer (errors, ``stream: false``, the model list), at most ``limit``
    bytes. Releases the connection to the pool."""
    out = bytearray()
    try:
        while chunk := await response.read():
            out += chunk
            if len(out) > limit:
                raise UpstreamError("upstream_error", "the frontend's answer is larger than the proxy relays")
    except StreamTimeout:
        raise UpstreamError("upstream_timeout", "the graph's frontend stopped answering mid-reply") from None
    except StreamDropped:
        raise UpstreamError("upstream_error", "the graph's frontend dropped the reply (StreamDropped)") from None
    finally:
        response.release()
    return bytes(out)
