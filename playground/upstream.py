"""The one module that talks HTTP to a graph's frontend (httpx).

One ``httpx.AsyncClient`` per process, created lazily on first use: HTTP/1.1 keep-alive to
every frontend, so a chat does not pay a TCP handshake. A client's connections belong to the
event loop that opened them, so the client is re-created if it is first used from another
loop (only tests do that; uvicorn runs one loop per process).

About keep-alive and TTFT: the dynamo-offline notes report that on a reused connection the
Dynamo 1.6.1 frontend sends the first token ~35 ms late (Nagle's algorithm on its accepted
sockets against the client's delayed ACK; fixed upstream by ai-dynamo/dynamo#14643, which
sets TCP_NODELAY), and that our side's TCP_NODELAY (anyio sets it) does not help; only a fresh
connection would. ``PLAYGROUND_UPSTREAM_KEEPALIVE=0`` opens one per chat. bench/proxy.py
measures both: on this machine's mocker graph direct-fresh was no faster than direct, and
fresh upstream connections cost the proxy TTFT, so keep-alive stays the default."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
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


class BadEndpoint(ValueError):
    """A deployment's endpoint is not an http(s) URL we are willing to call."""


def chat_url(endpoint: str) -> str:
    """The chat-completions URL of a frontend whose base URL is ``endpoint`` (as the runtime
    wrote it on the Deployment). Refuses anything but a plain http(s) URL: no credentials, no
    query or fragment."""
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
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}{CHAT_PATH}"


@dataclass
class _Pool:
    client: httpx.AsyncClient
    loop: asyncio.AbstractEventLoop


_pool: _Pool | None = None


def client() -> httpx.AsyncClient:
    global _pool
    loop = asyncio.get_running_loop()
    if _pool is None or _pool.loop is not loop:
        keepalive = settings.PLAYGROUND_UPSTREAM_KEEPALIVE
        max_connections = settings.PLAYGROUND_UPSTREAM_MAX_CONNECTIONS
        _pool = _Pool(
            httpx.AsyncClient(
                http1=True,
                http2=False,
                trust_env=False,  # never route a graph's traffic through an environment proxy
                follow_redirects=False,
                limits=httpx.Limits(max_connections=max_connections,
                                    max_keepalive_connections=max_connections if keepalive else 0,
                                    keepalive_expiry=30.0),
            ),
            loop,
        )
    return _pool.client


async def close() -> None:
    """Close the pooled client (tests, shutdown hooks)."""
    global _pool
    if _pool is not None and _pool.loop is asyncio.get_running_loop():
        await _pool.client.aclose()
    _pool = None


def _timeout() -> httpx.Timeout:
    # connect: a frontend that is down must answer within a second, not hang a spinner.
    # read: the idle timeout between two reads of the stream (and before the headers).
    return httpx.Timeout(connect=settings.PLAYGROUND_CONNECT_TIMEOUT, read=settings.PLAYGROUND_IDLE_TIMEOUT,
                         write=settings.PLAYGROUND_CONNECT_TIMEOUT, pool=settings.PLAYGROUND_CONNECT_TIMEOUT)


async def open_chat(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    """Send the request and wait for the response headers; the body is left to stream.
    The caller must ``aclose()`` the response."""
    send_headers = {"content-type": "application/json",
                    # aiter_raw() relays the bytes as they come: they must not be compressed.
                    "accept-encoding": "identity"}
    send_headers.update({k: v for k, v in headers.items() if k in FORWARDED_HEADERS})
    request = client().build_request("POST", url, content=body, headers=send_headers, timeout=_timeout())
    try:
        return await client().send(request, stream=True)
    except httpx.ConnectTimeout:
        raise UpstreamError("upstream_unavailable",
                            "the graph's frontend did not accept a connection in time") from None
    except httpx.PoolTimeout:
        raise UpstreamError("upstream_busy", "too many streams to this graph's frontend are open") from None
    except httpx.ConnectError as exc:
        raise UpstreamError("upstream_unavailable", f"the graph's frontend is not reachable ({exc})") from None
    except httpx.ReadTimeout:
        raise UpstreamError("upstream_timeout", "the graph's frontend accepted the request but did not answer "
                                                "within the idle timeout") from None
    except httpx.HTTPError as exc:
        raise UpstreamError("upstream_error", f"the graph's frontend failed: {exc.__class__.__name__}") from None


async def read_all(response: httpx.Response, limit: int) -> bytes:
    """A non-streamed answer (errors, ``stream: false``), at most ``limit`` bytes."""
    out = bytearray()
    async for chunk in response.aiter_raw():
        out += chunk
        if len(out) > limit:
            raise UpstreamError("upstream_error", "the frontend's answer is larger than the proxy relays")
    return bytes(out)
