"""The OpenAI endpoint as a bare ASGI application: what controlplane.asgi serves for
``/api/playground/{graph}/v1/...``, outside Django's request handling and middleware.

Why: every ``MiddlewareMixin`` middleware runs its hooks through
``sync_to_async(thread_sensitive=True)``, i.e. on one shared thread, twice per request; under
concurrent streams those hops queue (the proxy spike measured +3.5 ms TTFT at c=1 and +51 ms at
c=16 for four of them), and Django's own request object and handler cost about 1 ms and a
third of the proxy's CPU more than a bare ASGI app. This endpoint needs none of it:
gateway.handle authenticates itself (token, or session cookie plus CSRF on a Django request
built only for those callers) and sets the one security header that matters for it.

Served by uvicorn as it ships (what every way of starting the product runs), or any ASGI
server: ``_relay`` sends each arrival from the frontend as one ASGI message, as it comes."""

from __future__ import annotations

import asyncio
import io
import re

from django.conf import settings
from django.http import parse_cookie

from . import answers, authorize, gateway

PATH = re.compile(r"^/api/playground/([-a-zA-Z0-9_]+)/v1/(chat/completions|completions|models)$")
OTHER = re.compile(r"^/api/playground/[^/]+/v1(/.*)?$")  # the rest of the OpenAI API: not served


def match(path: str) -> re.Match | None:
    return PATH.match(path)


async def serve_authorize(scope, receive, send, found: re.Match) -> None:
    """The gateways' authorization endpoint (endpoint.authorize): any method, no body read."""
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    await _send(send, await authorize.authorize(found.group(1), headers))


async def not_served(scope, receive, send) -> bool:
    """An OpenAI-shaped 404 for the parts of the OpenAI API a graph does not serve (instead of
    the site's HTML 404 page), so that SDKs show a message. False if ``scope`` is not one."""
    if not OTHER.match(scope["path"]):
        return False
    await _send(send, answers.error_reply(404, "not_found", f"{scope['path']} is not served: a graph serves "
                                                            "GET v1/models, POST v1/chat/completions and "
                                                            "POST v1/completions"))
    return True


async def serve(scope, receive, send, found: re.Match) -> None:
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    body = await _read_body(receive, headers)
    if body is None:
        await _send(send, answers.too_large())
        return
    cookies = parse_cookie(headers["cookie"]) if "cookie" in headers and "authorization" not in headers else {}
    call = gateway.Call(scope["method"], found.group(1), found.group(2), headers, body, _secure(scope, headers),
                        cookies, lambda: _django_request(scope, body))
    try:
        reply = await gateway.handle(call)
    except Exception as exc:
        # A dependency down (the database, the cache, var/ full: bench/faults.py): a 503 that
        # names it, with Retry-After, never a bare 500 from the server.
        reply = answers.down_reply(exc)
        if reply is None:
            raise
    if reply.upstream is None:
        await _send(send, reply)
    else:
        await _relay(reply, send, receive, scope)


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


def _head(reply: answers.Reply, *extra: tuple[str, str]) -> dict:
    return {"type": "http.response.start", "status": reply.status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (*reply.headers, *extra)]}


async def _send(send, reply: answers.Reply) -> None:
    await send(_head(reply, ("content-length", str(len(reply.body)))))
    await send({"type": "http.response.body", "body": reply.body})


async def _relay(reply: answers.Reply, send, receive, scope) -> None:
    """Relay the stream (gateway.relay), one ``send`` per arrival from the frontend. The head
    waits for the first bytes (the frontend's own head has come: the reply is a stream) so that
    an early failure can still become an error event. A client that goes away is noticed by a
    task waiting on ``receive``: it closes the upstream response, which closes its connection,
    and the frontend cancels the request.

    HTTP/1.0 has no chunked framing, and a server can only frame a body of unknown length for
    such a client by closing the connection, which not every server does: so an HTTP/1.0
    client gets the whole stream at its end, with a Content-Length. What is held for it is
    bounded (gateway.MAX_ANSWER_BODY): a frontend that streams on and on, as a hostile one
    may, gets a 502 for it, not the process's memory."""
    state = {"gone": False}

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        state["gone"] = True
        reply.upstream.close()

    watcher = asyncio.get_running_loop().create_task(watch())
    chunks = gateway.relay(reply, lambda: state["gone"])
    try:
        if scope.get("http_version") == "1.0":
            parts, size = [], 0
            async for chunk in chunks:
                parts.append(chunk)
                size += len(chunk)
                if size > gateway.MAX_ANSWER_BODY:
                    state["gone"] = True  # the relay stops reading; the frontend's request is cancelled
                    reply.upstream.close()
                    await _send(send, answers.error_reply(
                        502, "upstream_too_large", f"the graph's frontend streamed more than "
                        f"{gateway.MAX_ANSWER_BODY} bytes: an HTTP/1.0 client gets a stream whole, so it is "
                        "bounded; use HTTP/1.1 to stream it"))
                    return
            if not state["gone"]:
                body = b"".join(parts)
                await send(_head(reply, ("content-length", str(len(body)))))
                await send({"type": "http.response.body", "body": body})
            return
        started = False
        async for chunk in chunks:
            if state["gone"]:
                break
            if not started:
                await send(_head(reply))
                started = True
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if not state["gone"]:
            if not started:
                await send(_head(reply))
            await send({"type": "http.response.body", "body": b""})
    finally:
        watcher.cancel()
        await chunks.aclose()
