"""The OpenAI-compatible endpoint of every serving graph, ``/api/playground/{graph}/v1/...``:
``chat/completions`` and ``completions`` (POST, streamed or not) and ``models`` (GET), passed
through to the graph's frontend. The browser's chat and API clients (token or session) use it.

This module decides what to answer (``handle``: a Call in, a Reply out) and relays a stream
(``relay``); two front ends send it: endpoint.asgi (what controlplane.asgi serves for these
paths, outside Django's middleware stack: the hot path) and proxy.py (Django views, for any
other server and the test client). The hot path is kept small on purpose: no query once the
caller's admission is remembered (admission.py), no thread hop when the cache is in memory, the
SSE bytes relayed exactly as they arrive (no parsing, no re-encoding), nothing per chunk beyond
stamping the first one.

Every error, the proxy's own or the frontend's, answers in OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``.

A frontend is not trusted (any operator picks its image) and is served on our origin (issue #42:
its ``text/html`` ran script as the admin who opened it): only JSON and ``text/event-stream`` are
relayed (anything else is a 502), every Reply carries ``HARDENING``, and the session is taken
only on the chat page's CSRF-checked POSTs, never on a navigation's GET."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from core import untrusted
from telemetry import instruments

from . import admission, counting, limits, upstream
from .access import ChatRefused
from .answers import (
    JSON,
    SSE,
    Reply,
    down_reply,
    error_body,
    error_reply,
    media_type,
    openai_error,
    stream_error,
    terminate,
)

log = logging.getLogger(__name__)

MAX_ANSWER_BODY = 4 * 1024 * 1024  # a non-streamed answer relayed whole (errors, stream: false)
ROUTES = {"chat/completions": "POST", "completions": "POST", "models": "GET"}
@dataclass
class Call:
    """One request, as either front end saw it. ``headers`` have lower-case names."""

    method: str
    graph: str
    route: str  # a key of ROUTES
    headers: dict[str, str]
    body: bytes
    secure: bool
    cookies: dict[str, str]
    django_request: Callable  # () -> HttpRequest, built only for session callers (CSRF, session)
    started: float = field(default_factory=time.perf_counter)


# --- limits (counting.py: no I/O on the hot path) ------------------------------------------------

async def _acquire(lim: admission.Limits) -> limits.Refusal | None:
    return await counting.acquire(lim.subject, lim.requests_per_minute, lim.concurrent_streams)


async def release(subject: str) -> None:
    counting.release(subject)  # no I/O: in memory, or written by counting's flush


# --- who is asking -----------------------------------------------------------------------------

async def admit(call: Call) -> admission.Admission:
    """Who is asking and where to (remembered for a few seconds), and the CSRF check for
    session callers. Raises ChatRefused."""
    authorization = call.headers.get("authorization")
    # The session is the chat page's credential, for its POSTs (CSRF-checked below); on a GET it
    # would be a navigation's ambient credential (issue #42): not accepted there.
    cookies = call.cookies if ROUTES[call.route] == "POST" else {}
    session_key = None if authorization else cookies.get(settings.SESSION_COOKIE_NAME)
    # CSRF first: a forged cross-site request learns nothing, not even whether the graph serves.
    if admission.csrf_needed(authorization, cookies):
        request = call.django_request()
        if settings.CSRF_USE_SESSIONS:
            await sync_to_async(admission.enforce_csrf)(request)
        else:
            admission.enforce_csrf(request)
    key = admission.credential_key(authorization, session_key)
    admitted, left = admission.recall_with_expiry(key, call.graph)
    if admitted is None:
        if not authorization and not session_key:
            if call.cookies.get(settings.SESSION_COOKIE_NAME):
                raise ChatRefused(401, "not_authenticated", f"{call.route} takes an API key, not the browser's "
                                  "session: send Authorization: Token <key> (or Bearer <key>)")
            raise ChatRefused(401, "not_authenticated", "sign in, or send Authorization: Token <key>")
        # One lookup per caller and graph at a time: sixteen streams of one script that start
        # together wait for the same lookup instead of queueing sixteen on the sync thread.
        pending = _lookups.get((key, call.graph))
        if pending is None:
            pending = asyncio.get_running_loop().create_task(sync_to_async(_lookup(call, authorization))())
            _lookups[(key, call.graph)] = pending
            pending.add_done_callback(lambda _task, k=(key, call.graph): _lookups.pop(k, None))
        admitted = await asyncio.shield(pending)  # a caller that leaves must not cancel the others' lookup
        admission.remember(key, call.graph, admitted)
    elif left < settings.PLAYGROUND_ADMISSION_TTL / 2 and (key, call.graph) not in _refreshing:
        _refreshing.add((key, call.graph))
        _background.add(asyncio.get_running_loop().create_task(_refresh(call, authorization, key)))
    return admitted


_lookups: dict[tuple[str | None, str], asyncio.Task] = {}  # (credential key, graph) -> its lookup in flight
_refreshing: set[tuple[str, str]] = set()  # (credential key, graph) being looked up again now
_background: set[asyncio.Task] = set()  # strong references: a pending task must not be collected


def _lookup(call: Call, authorization: str | None) -> Callable[[], admission.Admission]:
    """The (synchronous, database) admission of ``call``'s caller, ready to run in a thread."""
    if authorization:
        return functools.partial(_in_database, admission.admit_token, authorization, call.graph)
    return functools.partial(_in_database, admission.admit_session, call.django_request(), call.graph)


def _in_database(admit: Callable[..., admission.Admission], *args) -> admission.Admission:
    """``admit(*args)`` as a request would run it: this path has no request_started/finished
    signals, so without close_old_connections a connection the database cut (a failover)
    stayed in the thread and failed every later lookup. A database that is down is a 503.
    (Inside a transaction, a test's, the connection is the transaction's to keep.)"""
    release = not connection.in_atomic_block
    if release:
        close_old_connections()
    try:
        return admit(*args)
    except (OperationalError, InterfaceError):
        raise ChatRefused(503, "service_unavailable",
                          "the database is unavailable: try again in a few seconds") from None
    finally:
        if release:
            close_old_connections()


async def _refresh(call: Call, authorization: str | None, key: str) -> None:
    """Look a remembered admission up again off the hot path; a refusal forgets it at once."""
    try:
        admitted = await sync_to_async(_lookup(call, authorization))()
        admission.remember(key, call.graph, admitted)
    except ChatRefused:
        admission.drop(key, call.graph)
    except Exception:  # a database hiccup: keep serving until the TTL ends, then look up in line
        log.warning("looking an admission up again failed", exc_info=True)
    finally:
        _refreshing.discard((key, call.graph))
        _background.discard(asyncio.current_task())


# --- the request body --------------------------------------------------------------------------

def _parse(body: bytes, route: str) -> dict:
    """Validate a completion request before anything else is spent on it. Raises ChatRefused."""
    try:
        payload = untrusted.load_json(body.decode("utf-8"))  # bounded depth and numbers, storable text
    except untrusted.UntrustedInputError as exc:
        raise ChatRefused(400, "invalid_request_error", str(exc)) from None
    except (ValueError, UnicodeDecodeError):
        raise ChatRefused(400, "invalid_request_error", "the body is not JSON") from None
    if not isinstance(payload, dict):
        raise ChatRefused(400, "invalid_request_error", "the body must be a JSON object")
    if route == "chat/completions":
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ChatRefused(400, "invalid_request_error", "messages must be a non-empty list")
    else:
        prompt = payload.get("prompt")
        if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt)):
            raise ChatRefused(400, "invalid_request_error", "prompt must be a string or a non-empty list")
    cap = settings.PLAYGROUND_MAX_TOKENS
    for name in ("max_tokens", "max_completion_tokens"):
        value = payload.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ChatRefused(400, "invalid_request_error", f"{name} must be a positive integer")
        if value > cap:
            raise ChatRefused(400, "invalid_request_error", f"{name} may be at most {cap} here")
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


def server_timing(proxy_s: float, upstream_s: float) -> str:
    """Our own time (before the upstream call and after its headers) and the wait for them."""
    return f"proxy;dur={proxy_s * 1000:.2f}, upstream;dur={upstream_s * 1000:.2f}"


# --- the call ----------------------------------------------------------------------------------

async def handle(call: Call) -> Reply:
    """What to answer ``call`` with. A streamed Reply holds a stream slot and the upstream
    response: the front end must relay it and then ``await finish(reply)``."""
    reply = await _handle(call)
    instruments.count_request(call.route, reply.status)
    return reply


async def _handle(call: Call) -> Reply:
    method = ROUTES[call.route]
    if call.method != method:
        return error_reply(405, "method_not_allowed", f"{method} to this endpoint", ("allow", method))
    if settings.SECURE_SSL_REDIRECT and not call.secure:
        # SecurityMiddleware would redirect; this path runs without it, and a POST cannot
        # follow a redirect with its body anyway.
        return error_reply(403, "https_required", "use https")
    try:
        # Who may ask comes before what is asked: an anonymous or forged request learns
        # nothing about the body's validity.
        admitted = await admit(call)
        payload = _parse(call.body, call.route) if method == "POST" else None
    except ChatRefused as exc:
        return error_reply(exc.status, exc.kind, exc.message)
    base = admitted.target.base
    if payload is None:
        return await _models(call, base)
    try:
        refusal = await _acquire(admitted.limits)  # from here on, a stream slot is held
    except Exception as exc:  # the counters' cache down: a limit that cannot be counted is not waived
        down = down_reply(exc)
        if down is None:
            raise
        return down
    if refusal is not None:
        return error_reply(429, "rate_limited", refusal.message, ("retry-after", str(refusal.retry_after)))
    subject = admitted.limits.subject
    response = None
    try:
        send_body = _upstream_body(payload, call.body, admitted.target.model)
        sent = time.perf_counter()
        response = await upstream.request("POST", f"{base}/v1/{call.route}", send_body, call.headers)
        answered = time.perf_counter()
        status, content_type = response.status, response.headers.get("content-type", JSON)
        streamed = status == 200 and media_type(content_type) == SSE
        if not streamed:  # an error from the frontend, or stream: false
            content = await upstream.read_all(response, MAX_ANSWER_BODY)
            response = None
    except upstream.UpstreamError as exc:
        await _abandon(response, subject)
        return error_reply(exc.status, exc.kind, exc.message)
    except BaseException:  # cancelled (the client went away) or a bug: never leak the slot
        await _abandon(response, subject)
        raise
    proxy_s = (sent - call.started) + (time.perf_counter() - answered)
    instruments.observe_added(proxy_s)
    headers = [("server-timing", server_timing(proxy_s, answered - sent))]
    if streamed:
        headers += [("content-type", SSE), ("cache-control", "no-cache"),
                    ("x-accel-buffering", "no")]  # nginx and friends: do not buffer the stream
        instruments.stream_opened()
        return Reply(200, headers, upstream=response, subject=subject, sent=sent)
    await release(subject)
    return _answer(status, content_type, content, headers)


def _answer(status: int, content_type: str, content: bytes, headers: list[tuple[str, str]]) -> Reply:
    """The frontend's whole answer, as JSON only: an error in OpenAI's shape, a success only
    when the frontend labelled it JSON (never a document a browser would render)."""
    if status >= 400:
        return Reply(status, [("content-type", JSON), *headers], openai_error(status, content))
    if 200 <= status < 300 and media_type(content_type) == JSON:
        return Reply(status, [("content-type", JSON), *headers], content)
    shown = media_type(content_type)[:100] or "no content type"
    message = (f"the graph's frontend answered HTTP {status} with {shown}, not an answer an OpenAI endpoint gives "
               f"({JSON}, or {SSE} for a stream)")
    return Reply(502, [("content-type", JSON), *headers],
                 json.dumps(error_body("upstream_error", message, 502)).encode())


async def _models(call: Call, base: str) -> Reply:
    """The frontend's own model list (what it will accept as ``model``)."""
    try:
        response = await upstream.request("GET", f"{base}/v1/models", None, call.headers)
        status, content_type = response.status, response.headers.get("content-type", JSON)
        content = await upstream.read_all(response, MAX_ANSWER_BODY)
    except upstream.UpstreamError as exc:
        return error_reply(exc.status, exc.kind, exc.message)
    return _answer(status, content_type, content, [])


async def _abandon(response: upstream.Response | None, subject: str) -> None:
    try:
        if response is not None:
            response.close()  # closes its connection: the frontend cancels the request
    finally:
        await release(subject)


async def finish(reply: Reply, *, complete: bool) -> None:
    """After a streamed Reply: give the connection back (or drop it) and the stream slot."""
    try:
        if complete:
            reply.upstream.release()
        else:
            reply.upstream.close()
    finally:
        instruments.stream_closed()
        await release(reply.subject)


def finish_sync(reply: Reply) -> None:
    """finish(complete=False) from synchronous code: for a stream that was never relayed (a
    client gone before the first byte), where the relay's own ``finally`` never runs."""
    try:
        reply.upstream.close()
    finally:
        instruments.stream_closed()
        counting.release(reply.subject)


async def relay(reply: Reply, gone: Callable[[], bool] = lambda: False):
    """The one relay of a streamed Reply: the frontend's bytes as they arrive, unparsed. A stall
    longer than the idle timeout, or a frontend that drops the stream, ends it with an
    OpenAI-shaped error event (unless the client is ``gone``). The caller must ``aclose()`` it:
    its ``finally`` gives the connection and the stream slot back."""
    complete = False
    last = b"\n\n"
    try:
        try:
            last = await reply.upstream.read()
            instruments.observe_upstream_ttft(time.perf_counter() - reply.sent)
            while last:
                yield last
                chunk = await reply.upstream.read()
                if not chunk:
                    break
                last = chunk
            complete = True
        except upstream.STREAM_ERRORS as exc:
            if not gone():
                yield terminate(last) + stream_error(exc)
    finally:
        await finish(reply, complete=complete and not gone())
