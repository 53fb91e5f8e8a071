"""Who is calling the chat endpoint, may they chat with this graph, and where is its frontend.

Looking that up takes a token or session query, the user's groups and the graph's deployment
and policy: on the hot path that is a thread hop plus three or four queries per chat (with
PostgreSQL under ASGI and no pool, a new connection each time), which bench/proxy.py showed to
be most of the proxy's own time. So a successful admission is remembered in this process for
PLAYGROUND_ADMISSION_TTL seconds (0: never), keyed by a hash of the credential and the graph.
Refusals are never remembered. Within the TTL a revoked token, a changed role or a moved
endpoint still admits; a policy change through ``services.policy_set`` forgets at once (in
this process). CSRF is checked on every session request, remembered or not."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from importlib import import_module

from django.conf import settings
from django.contrib import auth
from django.middleware.csrf import CsrfViewMiddleware

from accounts.tokens import authenticate_key

from .access import ChatRefused, ChatTarget, chat_target

MAX_REMEMBERED = 10_000


@dataclass(frozen=True)
class Admission:
    user_id: int
    target: ChatTarget


# (credential hash, graph name) -> (expires at, admission). Read and written from event-loop
# and request threads alike; single dict operations are atomic.
_remembered: dict[tuple[str, str], tuple[float, Admission]] = {}


def forget() -> None:
    """Drop every remembered admission (after a policy change; tests)."""
    _remembered.clear()


def credential(request) -> str | None:
    """A hash of what authenticates the request: the Authorization header, else the session
    cookie. The caller's secret itself is not kept."""
    header = request.headers.get("Authorization", "")
    if header:
        return "h:" + hashlib.sha256(header.encode()).hexdigest()
    session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    if session_key:
        return "s:" + hashlib.sha256(session_key.encode()).hexdigest()
    return None


def recall(key: str | None, graph_name: str, *, now: float | None = None) -> Admission | None:
    if key is None:
        return None
    hit = _remembered.get((key, graph_name))
    if hit is None:
        return None
    if hit[0] <= (time.monotonic() if now is None else now):
        _remembered.pop((key, graph_name), None)
        return None
    return hit[1]


def remember(key: str | None, graph_name: str, admission: Admission) -> None:
    ttl = settings.PLAYGROUND_ADMISSION_TTL
    if key is None or ttl <= 0:
        return
    if len(_remembered) >= MAX_REMEMBERED:
        _remembered.clear()  # crude, and rare: a process serving 10,000 distinct callers
    _remembered[(key, graph_name)] = (time.monotonic() + ttl, admission)


# --- the lookups (synchronous: run them in a thread) --------------------------------------------

def _session(request):
    if not hasattr(request, "session"):  # playground.asgi serves this view without the middleware
        engine = import_module(settings.SESSION_ENGINE)
        request.session = engine.SessionStore(request.COOKIES.get(settings.SESSION_COOKIE_NAME))
    return request.session


def _authenticate(request):
    header = request.headers.get("Authorization", "")
    if header:
        # "Token <key>" (DRF's scheme) or "Bearer <key>" (what OpenAI's clients send).
        scheme, _, key = header.partition(" ")
        key = key.strip()
        if scheme.lower() not in ("token", "bearer") or not key:
            raise ChatRefused(401, "invalid_token", "send Authorization: Token <key> (or Bearer <key>)")
        user = authenticate_key(key)
        if user is None:
            raise ChatRefused(401, "invalid_token", "the token is not valid (unknown, expired or revoked)")
        return user
    _session(request)
    user = auth.get_user(request)
    if not user.is_authenticated:
        raise ChatRefused(401, "not_authenticated", "sign in, or send Authorization: Token <key>")
    return user


def admit(request, graph_name: str) -> Admission:
    """Authenticate the caller and find the graph they may chat with, or ChatRefused."""
    user = _authenticate(request)
    return Admission(user.pk, chat_target(user, graph_name))


# --- CSRF ----------------------------------------------------------------------------------------

class _CSRFCheck(CsrfViewMiddleware):
    def _reject(self, request, reason):
        return reason


def csrf_needed(request) -> bool:
    """Session callers carry ambient credentials and must send the CSRF token; token callers
    need not (DRF's rule)."""
    # No session cookie: no ambient credential to forge; the caller just gets 401.
    return not request.headers.get("Authorization") and settings.SESSION_COOKIE_NAME in request.COOKIES


def enforce_csrf(request) -> None:
    """The site's own CSRF check (cookie and X-CSRFToken header, Origin/Referer), run on this
    request. Pure unless CSRF_USE_SESSIONS, which reads the session (then run it in a thread)."""
    if settings.CSRF_USE_SESSIONS:
        _session(request)
    check = _CSRFCheck(lambda _request: None)
    check.process_request(request)
    reason = check.process_view(request, None, (), {})
    if reason:
        raise ChatRefused(403, "csrf_failed", f"CSRF check failed: {reason}")
