"""The OpenAI endpoint as a bare ASGI application: what controlplane.asgi serves for
``/api/playground/{graph}/v1/...``, outside Django's request handling and middleware.

Why: every ``MiddlewareMixin`` middleware runs its hooks through
``sync_to_async(thread_sensitive=True)``, i.e. on one shared thread, twice per request; under
concurrent streams those hops queue (the proxy spike measured +3.5 ms TTFT at c=1 and +51 ms at
c=16 for four of them), and Django's own request object and handler cost about 1 ms and a
third of the proxy's CPU more than a bare ASGI app. This endpoint needs none of it:
gateway.handle authenticates itself (token, or session cookie plus CSRF on a Django request
built only for those callers) and sets the one security header that matters for it.

Served by uvicorn (what every way of starting the product runs), the relay sends the reply's
head and first bytes through ASGI and then hands the rest to the upstream connection's
``pipe`` (playground/wire.py): each arrival from the frontend is written to the client's
transport as one HTTP/1.1 chunk from the upstream protocol's own callback, with no task
wake-up, future or ASGI message per chunk (measured in bench/proxy.py: that machinery was most
of the endpoint's CPU per streamed chunk). uvicorn lends its transport and flow control through
its ``send`` (the request's RequestResponseCycle, uvicorn pinned in pyproject.toml); under any
other server, or a reply with a Content-Length, each wake-up does one ``send`` of every byte
that has arrived by then (a chunk, or several that arrived together: never a byte held back).
The first bytes are stamped (upstream TTFT). A
client that goes away is told by the HTTP protocol (controlplane.handoff.Noticing, what
controlplane.serve gives uvicorn), or under any other protocol noticed by a small task waiting
on ``receive``: either closes the upstream response, which closes its connection, and the
frontend cancels the request."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import time

from django.conf import settings
from django.http import parse_cookie

from telemetry import instruments

from . import gateway
from .upstream import STREAM_ERRORS

PATH = re.compile(r"^/api/playground/([-a-zA-Z0-9_]+)/v1/(chat/completions|completions|models)$")
OTHER = re.compile(r"^/api/playground/[^/]+/v1(/.*)?$")  # the rest of the OpenAI API: not served


def match(path: str) -> re.Match | None:
    return PATH.match(path)


async def not_served(scope, receive, send) -> bool:
    """An OpenAI-shaped 404 for the parts of the OpenAI API a graph does not serve (instead of
    the site's HTML 404 page), so that SDKs show a message. False if ``scope`` is not one."""
    if not OTHER.match(scope["path"]):
        return False
    await _send(send, gateway.error_reply(404, "not_found", f"{scope['path']} is not served: a graph serves "
                                                            "GET v1/models, POST v1/chat/completions and "
                                                            "POST v1/completions"))
    return True


async def serve(scope, receive, send, found: re.Match) -> None:
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    body = await _read_body(receive, headers)
    if body is None:
        await _send(send, gateway.too_large())
        return
    cookies = parse_cookie(headers["cookie"]) if "cookie" in headers and "authorization" not in headers else {}
    call = gateway.Call(scope["method"], found.group(1), found.group(2), headers, body, _secure(scope, headers),
                        cookies, lambda: _django_request(scope, body))
    reply = await gateway.handle(call)
    if reply.upstream is None:
        await _send(send, reply)
    else:
        await _relay(reply, send, receive)


async def _read_body(receive, headers: dict[str, str]) -> bytes | None:
    """The request body, or None when it is larger than PLAYGROUND_MAX_PROMPT_BYTES."""
    limit = settings.PLAYGROUND_MAX_PROMPT_BYTES
    try:
        if int(headers.get("content-length") or 0) > limit:
            return None
    except ValueError:
        pass
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body"):
        return body if len(body) <= limit else None
    parts = [body]
    size = len(body)
    while message.get("more_body"):
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if size > limit:
            return None
    return b"".join(parts)


def _secure(scope, headers: dict[str, str]) -> bool:
    if scope.get("scheme") == "https":
        return True
    proxy_header = settings.SECURE_PROXY_SSL_HEADER
    if proxy_header:
        name, expected = proxy_header
        value = headers.get(name.removeprefix("HTTP_").replace("_", "-").lower(), "")
        return value.split(",")[0].strip() == expected
    return False


def _django_request(scope, body: bytes):
    """A Django request for what only Django knows how to do: sessions and the CSRF check."""
    from django.core.handlers.asgi import ASGIRequest

    request = ASGIRequest(scope, io.BytesIO(body))
    request._body = body
    return request


def _head(reply: gateway.Reply) -> dict:
    return {"type": "http.response.start", "status": reply.status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]}


async def _send(send, reply: gateway.Reply) -> None:
    reply.headers.append(("content-length", str(len(reply.body))))
    await send(_head(reply))
    await send({"type": "http.response.body", "body": reply.body})


def _cycle(send):
    """uvicorn's RequestResponseCycle behind ``send``, or None under any other server."""
    cycle = getattr(send, "__self__", None)
    if type(cycle).__name__ != "RequestResponseCycle" or not type(cycle).__module__.startswith("uvicorn.protocols"):
        return None
    return cycle


def _noticing(cycle):
    """The client connection's protocol when it calls ``on_lost`` (controlplane.handoff.Noticing),
    else None."""
    if cycle is None:
        return None
    protocol = cycle.transport.get_protocol()
    return protocol if hasattr(protocol, "on_lost") else None


def _lent_transport(cycle) -> tuple | None:
    """(transport, flow control) of the client's connection when the reply goes out in chunks,
    which the relay may then write itself; None otherwise."""
    if cycle is None or cycle.chunked_encoding is not True or cycle.response_complete or cycle.disconnected:
        return None
    return cycle.transport, cycle.flow


class _Gathered:
    """What uvicorn writes while it stands in for the client's transport (``_together``)."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)


@contextlib.contextmanager
def _together(cycle):
    """The reply's head and its first bytes, which uvicorn writes one ``send`` each, leave in
    one write: one segment through loopback and one wake-up of the client, for one syscall and
    no socket option set and unset. uvicorn's sends only ``write`` to the transport they hold
    (httptools_impl, pinned): it holds this gatherer meanwhile."""
    if cycle is None:
        yield
        return
    transport, gathered = cycle.transport, _Gathered()
    cycle.transport = gathered
    try:
        yield
    finally:
        cycle.transport = transport
        if gathered.parts and not transport.is_closing():
            transport.write(b"".join(gathered.parts))


async def _relay(reply: gateway.Reply, send, receive) -> None:
    """Relay the frontend's bytes as they arrive. A stall longer than the idle timeout, or a
    frontend that drops the stream, ends it with an OpenAI-shaped error event. The head waits
    for the first bytes (the frontend's own head has come: the reply is a stream) and leaves
    with them."""
    upstream = reply.upstream
    state = {"gone": False}

    def lost() -> None:
        state["gone"] = True
        upstream.close()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        lost()

    cycle = _cycle(send)
    # The client's going away: told by the protocol (controlplane.handoff.Noticing, what
    # controlplane.serve runs), else noticed by a task waiting on ``receive``.
    protocol = _noticing(cycle)
    if protocol is not None:
        watcher = None
        if cycle.disconnected:  # gone before the reply began
            lost()
        else:
            protocol.on_lost = lost
    else:
        watcher = asyncio.get_running_loop().create_task(watch())
    complete = False
    last = b"\n\n"
    lent = None
    started = False
    try:
        read = upstream.read
        try:
            last = await read()
            instruments.observe_upstream_ttft(time.perf_counter() - reply.sent)
            with _together(cycle):
                await send(_head(reply))
                started = True
                if last:
                    await send({"type": "http.response.body", "body": last, "more_body": True})
            if last:
                lent = _lent_transport(cycle)
                if lent is not None:
                    last = await upstream.pipe(*lent, end=True) or last
                else:
                    while last := await read():
                        await send({"type": "http.response.body", "body": last, "more_body": True})
            complete = True
        except STREAM_ERRORS as exc:
            if lent is not None:
                last = upstream.tail() or last
            if not state["gone"]:
                if not started:
                    await send(_head(reply))
                await send({"type": "http.response.body", "body": gateway.terminate(last) + gateway.stream_error(exc),
                            "more_body": True})
        if not state["gone"]:
            if lent is not None and upstream.ended():
                # The pipe wrote the last chunk with the frontend's last bytes: uvicorn only
                # has to finish the reply (keep-alive, access log), not write one.
                cycle.chunked_encoding = False
            await send({"type": "http.response.body", "body": b""})
    finally:
        if watcher is None:
            if protocol.on_lost is lost:
                protocol.on_lost = None
        else:
            watcher.cancel()
        await gateway.finish(reply, complete=complete and not state["gone"])
