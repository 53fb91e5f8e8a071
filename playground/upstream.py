"""The one module that talks HTTP to a graph's frontend (aiohttp).

Why aiohttp: measured side by side (proxy-spike notes, and bench/proxy.py's earlier runs),
httpx costs about twice the CPU per relayed stream and its pool stalls under 64 concurrent
streams; aiohttp relays the same bytes for half the CPU.

One ``aiohttp.ClientSession`` per process, created lazily on first use: HTTP/1.1 keep-alive to
every frontend, so a chat does not pay a TCP handshake. A session's connections belong to the
event loop that opened them, so it is re-created if first used from another loop (only tests
do that; uvicorn runs one loop per process).

About keep-alive and TTFT: on a reused connection the Dynamo 1.6.1 frontend sends the first
token late when it follows the headers closely (Nagle against delayed ACK; fixed upstream by
ai-dynamo/dynamo#14643). ``PLAYGROUND_UPSTREAM_KEEPALIVE=0`` opens one connection per chat;
bench/proxy.py measured fresh connections to cost more than they save, so keep-alive stays."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from django.conf import settings

CHAT_PATH = "/v1/chat/completions"
# What we forward from the caller's request; nothing else (no cookies, no Authorization).
FORWARDED_HEADERS = ("accept", "user-agent")


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
    session: aiohttp.ClientSession
    loop: asyncio.AbstractEventLoop


_pool: _Pool | None = None


def session() -> aiohttp.ClientSession:
    global _pool
    loop = asyncio.get_running_loop()
    if _pool is None or _pool.loop is not loop or _pool.session.closed:
        if _pool is not None and _pool.loop is not loop:
            _discard(_pool)
        keepalive = settings.PLAYGROUND_UPSTREAM_KEEPALIVE
        connector = aiohttp.TCPConnector(limit=settings.PLAYGROUND_UPSTREAM_MAX_CONNECTIONS, limit_per_host=0,
                                         keepalive_timeout=30.0, force_close=not keepalive,
                                         enable_cleanup_closed=False, ttl_dns_cache=60)
        _pool = _Pool(aiohttp.ClientSession(connector=connector, trust_env=False,  # never an environment proxy
                                            auto_decompress=False, skip_auto_headers=("User-Agent",),
                                            raise_for_status=False), loop)
    return _pool.session


def _discard(pool: _Pool) -> None:
    """Drop a session of another (finished) event loop without awaiting anything on it."""
    connector = pool.session.connector
    pool.session.detach()
    if connector is not None:
        with contextlib.suppress(Exception):
            connector._close()  # closes its transports now, without awaiting on the dead loop


async def close() -> None:
    """Close the pooled session (tests, shutdown hooks)."""
    global _pool
    if _pool is not None and _pool.loop is asyncio.get_running_loop():
        await _pool.session.close()
    _pool = None


def _timeout() -> aiohttp.ClientTimeout:
    # connect: a frontend that is down must answer within a second, not hang a spinner (it
    # includes the wait for a free pooled connection). sock_read: the idle timeout between two
    # reads of the stream, and before the headers.
    connect = settings.PLAYGROUND_CONNECT_TIMEOUT
    return aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=connect,
                                 sock_read=settings.PLAYGROUND_IDLE_TIMEOUT)


async def request(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> aiohttp.ClientResponse:
    """Send the request and wait for the response headers; the body is left to stream.
    The caller must ``release()`` (read to the end) or ``close()`` (abandon) the response."""
    send_headers = {"accept-encoding": "identity"}  # relayed as they come: never compressed
    if body is not None:
        send_headers["content-type"] = "application/json"
    for name in FORWARDED_HEADERS:
        value = headers.get(name)
        if value:
            send_headers[name] = value
    try:
        return await session().request(method, url, data=body, headers=send_headers, timeout=_timeout(),
                                       allow_redirects=False)
    except aiohttp.ConnectionTimeoutError:
        raise UpstreamError("upstream_unavailable", "the graph's frontend did not accept a connection in time "
                                                    "(down, or too many streams to it are open)") from None
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamError("upstream_unavailable",
                            f"the graph's frontend is not reachable ({exc.os_error.strerror or exc})") from None
    except (aiohttp.SocketTimeoutError, TimeoutError):
        raise UpstreamError("upstream_timeout", "the graph's frontend accepted the request but did not answer "
                                                "within the idle timeout") from None
    except aiohttp.ClientError as exc:
        raise UpstreamError("upstream_error", f"the graph's frontend failed: {exc.__class__.__name__}") from None


async def read_all(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """A non-streamed answer (errors, ``stream: false``, the model list), at most ``limit``
    bytes. Releases the connection to the pool."""
    out = bytearray()
    try:
        async for chunk in response.content.iter_any():
            out += chunk
            if len(out) > limit:
                raise UpstreamError("upstream_error", "the frontend's answer is larger than the proxy relays")
    except (aiohttp.SocketTimeoutError, TimeoutError):
        raise UpstreamError("upstream_timeout", "the graph's frontend stopped answering mid-reply") from None
    except aiohttp.ClientError as exc:
        raise UpstreamError("upstream_error", f"the graph's frontend dropped the reply ({exc.__class__.__name__})"
                            ) from None
    finally:
        response.release()
    return bytes(out)
