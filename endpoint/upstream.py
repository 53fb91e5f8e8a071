"""The one module that talks HTTP to a graph's frontend: aiohttp, one pooled ClientSession per
event loop (the server runs one loop per process), keep-alive on.

Why aiohttp: the proxy measurements (shared/notes on the proxy spike) found it relaying a
stream for half the CPU of httpx, whose pool also stalled under 64 concurrent streams; Open
WebUI relays OpenAI streams with it too. The body is read with ``content.readany()``: whatever
bytes have arrived, as they arrive, never parsed or re-encoded (``auto_decompress`` is off and
``accept-encoding: identity`` is sent, so the bytes are the frontend's own).

About keep-alive and TTFT: on a reused connection the Dynamo 1.6.1 frontend sends the first
token late when it follows the headers closely (Nagle against delayed ACK; fixed upstream by
ai-dynamo/dynamo#14643). ``PLAYGROUND_UPSTREAM_KEEPALIVE=0`` opens one connection per chat."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import aiohttp
from django.conf import settings

CHAT_PATH = "/v1/chat/completions"
# What we forward from the caller's request; nothing else (no cookies, no Authorization).
FORWARDED_HEADERS = ("accept", "user-agent")


class StreamTimeout(TimeoutError):
    """The frontend sent nothing for PLAYGROUND_IDLE_TIMEOUT seconds mid-reply."""


class StreamDropped(ConnectionError):
    """The frontend closed or broke the connection mid-reply."""


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


_session: aiohttp.ClientSession | None = None
_session_loop: asyncio.AbstractEventLoop | None = None  # the loop _session belongs to


def session() -> aiohttp.ClientSession:
    """This event loop's session (created on first use; re-created if first used from another
    loop: only tests run several)."""
    global _session, _session_loop
    loop = asyncio.get_running_loop()
    if _session is None or _session.closed or _session_loop is not loop:
        _session_loop = loop
        connector = aiohttp.TCPConnector(limit=settings.PLAYGROUND_UPSTREAM_MAX_CONNECTIONS,
                                         force_close=not settings.PLAYGROUND_UPSTREAM_KEEPALIVE,
                                         keepalive_timeout=30)
        _session = aiohttp.ClientSession(connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent",),
                                         timeout=aiohttp.ClientTimeout(total=None))
    return _session


async def close() -> None:
    """Close the pooled connections (tests, the server's shutdown)."""
    global _session
    if _session is not None and not _session.closed and _session_loop is asyncio.get_running_loop():
        await _session.close()
    _session = None


class Response:
    """A frontend's answer: ``status`` and ``headers`` (lower-case names) once ``request``
    returns, the body to ``read`` chunk by chunk. ``release()`` after reading it to the end
    gives the connection back; ``close()`` abandons it (the connection closes: the frontend
    cancels the request)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.headers.items()}

    async def read(self) -> bytes:
        """The bytes that have arrived (waiting for some), b"" at the end of the body."""
        try:
            async with asyncio.timeout(settings.PLAYGROUND_IDLE_TIMEOUT):
                return await self._response.content.readany()
        except TimeoutError:
            raise StreamTimeout(f"nothing from the frontend for {settings.PLAYGROUND_IDLE_TIMEOUT:g} s") from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise StreamDropped(str(exc) or exc.__class__.__name__) from None

    async def iter_any(self):
        while chunk := await self.read():
            yield chunk

    def release(self) -> None:
        self._response.release()

    def close(self) -> None:
        self._response.close()


NO_CONNECTION = "the graph's frontend did not accept a connection in time (down, or too many streams to it are open)"


async def request(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Response:
    """Send the request and wait for the response headers; the body is left to stream.
    The caller must ``release()`` (read to the end) or ``close()`` (abandon) the response."""
    sent = {"accept-encoding": "identity"}  # relayed as they come
    if body is not None:
        sent["content-type"] = "application/json"
    for name in FORWARDED_HEADERS:
        value = headers.get(name)
        if value:
            sent[name] = value
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.PLAYGROUND_CONNECT_TIMEOUT,
                                    connect=settings.PLAYGROUND_CONNECT_TIMEOUT,
                                    sock_read=settings.PLAYGROUND_IDLE_TIMEOUT)
    try:
        response = await session().request(method, url, data=body, headers=sent, timeout=timeout,
                                           allow_redirects=False)
    except aiohttp.ConnectionTimeoutError:
        raise UpstreamError("upstream_unavailable", NO_CONNECTION) from None
    except TimeoutError:
        raise UpstreamError("upstream_timeout", "the graph's frontend accepted the request but did not answer "
                                                "within the idle timeout") from None
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamError("upstream_unavailable",
                            f"the graph's frontend is not reachable ({exc.os_error.strerror or exc})") from None
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise UpstreamError("upstream_error", f"the graph's frontend failed: {exc or exc.__class__.__name__}") from None
    return Response(response)


async def read_all(response: Response, limit: int) -> bytes:
    """A non-streamed answer (errors, ``stream: false``, the model list), at most ``limit``
    bytes. Releases the connection to the pool."""
    out = bytearray()
    try:
        while chunk := await response.read():
            out += chunk
            if len(out) > limit:
                response.close()
                raise UpstreamError("upstream_error", "the frontend's answer is larger than the proxy relays")
    except StreamTimeout:
        response.close()
        raise UpstreamError("upstream_timeout", "the graph's frontend stopped answering mid-reply") from None
    except StreamDropped:
        response.close()
        raise UpstreamError("upstream_error", "the graph's frontend dropped the reply (StreamDropped)") from None
    response.release()
    return bytes(out)
