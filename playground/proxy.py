"""``POST /api/playground/{graph}/v1/chat/completions``: the OpenAI-compatible pass-through to
a graph's frontend. The browser's chat and API clients (token or session) both use it.

The hot path is kept small on purpose: no DRF, no
thread hop at all once the caller's admission is remembered (admission.py), and the SSE bytes
relayed exactly as they arrive (``aiter_raw``: no parsing, no re-encoding). playground.asgi
serves it outside the middleware stack. A client that goes away cancels the view's task (Django ≥ 5 on ASGI); the
relay's ``finally`` then closes the upstream response, which closes its connection, and the
frontend cancels the request."""

from __future__ import annotations

import json
import time

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from graphs import untrusted

from . import admission, limits, upstream
from .access import ChatRefused

MAX_ERROR_BODY = 4 * 1024 * 1024  # a non-streamed answer relayed whole (errors, stream: false)


def error_body(kind: str, message: str, status: int) -> dict:
    """OpenAI's error shape, which its clients and ours know how to show."""
    return {"error": {"message": message, "type": kind, "code": status}}


def error_response(status: int, kind: str, message: str, **headers: str) -> JsonResponse:
    response = JsonResponse(error_body(kind, message, status), status=status)
    response["X-Content-Type-Options"] = "nosniff"
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def sse_error(kind: str, message: str, status: int) -> bytes:
    return b"data: " + json.dumps(error_body(kind, message, status)).encode() + b"\n\n"


# --- limits: in the event loop when the cache is memory, else in a pool thread ------------------

def _cache_in_memory() -> bool:
    # LocMem is a dict behind a lock: microseconds, fine on the event loop. A network cache
    # (Redis) would block the loop, so it gets a pool thread (not the thread-sensitive one the
    # middleware and the ORM queue on).
    return isinstance(caches["default"], LocMemCache)


async def _acquire(user_id: int) -> limits.Refusal | None:
    if _cache_in_memory():
        return limits.acquire(user_id)
    return await sync_to_async(limits.acquire, thread_sensitive=False)(user_id)


async def _release(user_id: int) -> None:
    if _cache_in_memory():
        limits.release(user_id)
    else:
        await sync_to_async(limits.release, thread_sensitive=False)(user_id)


async def _admit(request, graph: str) -> admission.Admission:
    """Who is asking and where to (remembered for a few seconds, see admission.py), and the
    CSRF check for session callers. Raises ChatRefused."""
    # CSRF first: a forged cross-site request learns nothing, not even whether the graph serves.
    if admission.csrf_needed(request):
        if settings.CSRF_USE_SESSIONS:
            await sync_to_async(admission.enforce_csrf)(request)
        else:
            admission.enforce_csrf(request)
    key = admission.credential(request)
    admitted = admission.recall(key, graph)
    if admitted is None:
        admitted = await sync_to_async(admission.admit)(request, graph)
        admission.remember(key, graph, admitted)
    return admitted


# --- the request body --------------------------------------------------------------------------

def _parse(body: bytes) -> dict:
    """Validate the chat request before anything else is spent on it. Raises ChatRefused (400)."""
    try:
        payload = untrusted.load_json(body.decode("utf-8"))
    except untrusted.UntrustedInputError as exc:
        raise ChatRefused(400, "invalid_request_error", str(exc)) from None
    except (ValueError, UnicodeDecodeError):
        raise ChatRefused(400, "invalid_request_error", "the body is not JSON") from None
    if not isinstance(payload, dict):
        raise ChatRefused(400, "invalid_request_error", "the body must be a JSON object")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ChatRefused(400, "invalid_request_error", "messages must be a non-empty list")
    cap = settings.PLAYGROUND_MAX_TOKENS
    for field in ("max_tokens", "max_completion_tokens"):
        value = payload.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ChatRefused(400, "invalid_request_error", f"{field} must be a positive integer")
        if value > cap:
            raise ChatRefused(400, "invalid_request_error", f"{field} may be at most {cap} here")
    return payload


def _upstream_body(payload: dict, body: bytes, model: str) -> bytes:
    """The caller's own bytes, unless ``model`` or a ``max_tokens`` bound must be filled in."""
    changed = False
    if payload.get("max_tokens") is None and payload.get("max_completion_tokens") is None:
        payload["max_tokens"] = settings.PLAYGROUND_MAX_TOKENS
        changed = True
    if not payload.get("model"):
        payload["model"] = model
        changed = True
    return json.dumps(payload).encode() if changed else body


# --- the view ----------------------------------------------------------------------------------

def _server_timing(proxy_s: float, upstream_s: float) -> str:
    """Our own time (before the upstream call and after its headers) and the wait for them."""
    return f"proxy;dur={proxy_s * 1000:.2f}, upstream;dur={upstream_s * 1000:.2f}"


def _too_large(limit: int) -> JsonResponse:
    return error_response(413, "request_too_large", f"the request is larger than {limit} bytes")


@csrf_exempt  # session callers are CSRF-checked in _admit; token callers need not be
async def chat_completions(request, graph: str):
    started = time.perf_counter()
    if request.method != "POST":
        return error_response(405, "method_not_allowed", "POST a chat completion request", Allow="POST")
    if settings.SECURE_SSL_REDIRECT and not request.is_secure():
        # SecurityMiddleware would redirect; playground.asgi runs without it, and a POST
        # cannot follow a redirect with its body anyway.
        return error_response(403, "https_required", "use https")
    limit = settings.PLAYGROUND_MAX_PROMPT_BYTES
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        return _too_large(limit)
    try:
        body = request.body
    except RequestDataTooBig:
        return _too_large(limit)
    if len(body) > limit:
        return _too_large(limit)
    try:
        # Who may ask comes before what is asked: an anonymous or forged request learns
        # nothing about the body's validity.
        admitted = await _admit(request, graph)
        payload = _parse(body)
    except ChatRefused as exc:
        return error_response(exc.status, exc.kind, exc.message)
    refusal = await _acquire(admitted.user_id)  # from here on, a stream slot is held
    if refusal is not None:
        return error_response(429, "rate_limited", refusal.message, Retry_After=str(refusal.retry_after))

    upstream_response = None
    try:
        send_body = _upstream_body(payload, body, admitted.target.model)
        sent = time.perf_counter()
        upstream_response = await upstream.open_chat(admitted.target.url, send_body, dict(request.headers.items()))
        answered = time.perf_counter()
        content_type = upstream_response.headers.get("content-type", "application/json")
        streamed = upstream_response.status_code == 200 and content_type.startswith("text/event-stream")
        if not streamed:  # an error from the frontend, or stream: false
            content = await upstream.read_all(upstream_response, MAX_ERROR_BODY)
    except upstream.UpstreamError as exc:
        await _cleanup(upstream_response, admitted.user_id)
        status = 504 if exc.kind == "upstream_timeout" else 503 if exc.kind == "upstream_busy" else 502
        return error_response(status, exc.kind, exc.message)
    except BaseException:  # cancelled (the client went away) or a bug: never leak the slot
        await _cleanup(upstream_response, admitted.user_id)
        raise

    if streamed:
        response = StreamingHttpResponse(_relay(upstream_response, admitted.user_id), content_type=content_type)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx and friends: do not buffer the stream
    else:
        await _cleanup(upstream_response, admitted.user_id)
        response = HttpResponse(content, status=upstream_response.status_code, content_type=content_type)
    response["Server-Timing"] = _server_timing((sent - started) + (time.perf_counter() - answered), answered - sent)
    response["X-Content-Type-Options"] = "nosniff"  # SecurityMiddleware's, which playground.asgi skips
    return response


async def _cleanup(upstream_response: httpx.Response | None, user_id: int) -> None:
    try:
        if upstream_response is not None:
            await upstream_response.aclose()
    finally:
        await _release(user_id)


async def _relay(upstream_response: httpx.Response, user_id: int):
    """Yield the frontend's bytes as they arrive. A stall longer than the idle timeout, or a
    frontend that drops the stream, ends it with an OpenAI-shaped error event."""
    last = b"\n\n"
    try:
        try:
            async for chunk in upstream_response.aiter_raw():
                last = chunk
                yield chunk
        except httpx.ReadTimeout:
            idle = settings.PLAYGROUND_IDLE_TIMEOUT
            yield _terminate(last) + sse_error("upstream_timeout", f"the graph's frontend sent nothing for {idle:g} s",
                                               504)
        except httpx.HTTPError as exc:
            yield _terminate(last) + sse_error("upstream_error", f"the graph's frontend dropped the stream "
                                                                 f"({exc.__class__.__name__})", 502)
    finally:
        await _cleanup(upstream_response, user_id)


def _terminate(last: bytes) -> bytes:
    """Blank lines that end a partly relayed event, so that the error event stands alone."""
    return b"" if last.endswith(b"\n\n") else b"\n\n"
