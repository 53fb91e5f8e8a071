"""The OpenAI endpoint as Django views, for servers that do not go through controlplane.asgi's
router (another ASGI or WSGI server, the test client). controlplane.asgi serves the same paths
with endpoint.asgi, outside the middleware stack: both answer through gateway.handle.

A client that goes away cancels the view's task (Django >= 5 on ASGI); the relay's ``finally``
then closes the upstream response, which closes its connection, and the frontend cancels."""

from __future__ import annotations

import asyncio

from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from . import answers, gateway


def _response(reply: answers.Reply):
    if reply.upstream is None:
        response = HttpResponse(reply.body, status=reply.status)
    else:
        state = {"started": False}
        response = StreamingHttpResponse(_relay(reply, state), status=reply.status)
        # Django closes the response even when it never iterated it (the client left first):
        # then the relay's finally never runs, and this gives the slot and connection back, on
        # the event loop that owns the connection (close() runs in a worker thread).
        loop = asyncio.get_running_loop()
        response._resource_closers.append(
            lambda: None if state["started"] else loop.call_soon_threadsafe(gateway.finish_sync, reply))
    for name, value in reply.headers:
        response[name] = value
    return response


async def _relay(reply: answers.Reply, state: dict):
    state["started"] = True
    chunks = gateway.relay(reply)
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        await chunks.aclose()


async def _serve(request, graph: str, route: str):
    try:
        body = request.body
    except RequestDataTooBig:
        return _response(answers.too_large())
    if len(body) > gateway.settings.PLAYGROUND_MAX_PROMPT_BYTES:
        return _response(answers.too_large())
    headers = {name.lower(): value for name, value in request.headers.items()}
    call = gateway.Call(request.method, graph, route, headers, body, request.is_secure(), request.COOKIES,
                        lambda: request)
    return _response(await gateway.handle(call))


@csrf_exempt  # session callers are CSRF-checked by the gateway; token callers need not be
async def chat_completions(request, graph: str):
    return await _serve(request, graph, "chat/completions")


@csrf_exempt
async def completions(request, graph: str):
    return await _serve(request, graph, "completions")


@csrf_exempt
async def models(request, graph: str):
    return await _serve(request, graph, "models")
