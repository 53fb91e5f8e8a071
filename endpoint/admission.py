"""Who is calling the OpenAI endpoint, may they use this graph, where is its frontend, and
which limits apply.

Looking that up takes a token or session query, the user's groups, the graph's deployment and
policy and the caller's limits: on the hot path that would be a thread hop plus four or five
queries per chat. So a successful admission is remembered in this process for
PLAYGROUND_ADMISSION_TTL seconds (0: never), keyed by a hash of the credential and the graph;
the hot path then runs no query and never leaves the event loop. Refusals are never
remembered. Within the TTL a revoked token, a changed role or a moved endpoint still admits
(deleting a token, changing a policy or a limit forgets at once in this process; other
processes follow within the TTL). A caller that keeps calling never waits for a lookup: once
half the TTL has passed, a request is served from memory while the admission is looked up
again in the background (gateway._admit); a refusal then forgets it at once. CSRF is checked
on every session request, remembered or not.

Tokens are resolved by ONE function, ``token_owner``: the only place that knows how API tokens
are stored."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from importlib import import_module

from django.conf import settings
from django.contrib import auth
from django.core.exceptions import DisallowedHost
from django.middleware.csrf import CsrfViewMiddleware

from .access import ChatRefused, ChatTarget, chat_target

MAX_REMEMBERED = 10_000


@dataclass(frozen=True)
class Limits:
    """What one admitted caller may do: ``subject`` names the counters (a user or a token)."""

    subject: str
    requests_per_minute: int
    concurrent_streams: int


@dataclass(frozen=True)
class Admission:
    user_id: int
    target: ChatTarget
    limits: Limits


# (credential hash, graph name) -> (expires at, admission). Read and written from event-loop
# and request threads alike; single dict operations are atomic.
_remembered: dict[tuple[str, str], tuple[float, Admission]] = {}


def forget() -> None:
    """Drop every remembered admission (after a policy, limit or token change; tests)."""
    _remembered.clear()


def credential_key(authorization: str | None, session_key: str | None) -> str | None:
    """A hash of what authenticates the request: the Authorization header, else the session
    cookie. The caller's secret itself is not kept."""
    if authorization:
        return "h:" + hashlib.sha256(authorization.encode()).hexdigest()
    if session_key:
        return "s:" + hashlib.sha256(session_key.encode()).hexdigest()
    return None


def recall(key: str | None, graph_name: str, *, now: float | None = None) -> Admission | None:
    return recall_with_expiry(key, graph_name, now=now)[0]


def recall_with_expiry(key: str | None, graph_name: str, *, now: float | None = None
                       ) -> tuple[Admission | None, float]:
    """The remembered admission and the seconds it has left (0 when there is none)."""
    if key is None:
        return None, 0.0
    hit = _remembered.get((key, graph_name))
    if hit is None:
        return None, 0.0
    left = hit[0] - (time.monotonic() if now is None else now)
    if left <= 0:
        _remembered.pop((key, graph_name), None)
        return None, 0.0
    return hit[1], left


def drop(key: str | None, graph_name: str) -> None:
    _remembered.pop((key, graph_name), None)


def remember(key: str | None, graph_name: str, admission: Admission) -> None:
    ttl = settings.PLAYGROUND_ADMISSION_TTL
    if key is None or ttl <= 0:
        return
    if len(_remembered) >= MAX_REMEMBERED:
        _remembered.clear()  # crude, and rare: a process serving 10,000 distinct callers
    _remembered[(key, graph_name)] = (time.monotonic() + ttl, admission)


# --- tokens: the one lookup ----------------------------------------------------------------------

def token_id(key: str) -> str:
    """A stable, non-secret name of a token (what a per-token limit is stored under): the key's
    first characters that knox keeps in clear to find the row (``ApiToken.token_key``)."""
    from knox.settings import CONSTANTS

    return key[:CONSTANTS.TOKEN_KEY_LENGTH]


def token_owner(key: str):
    """(user, token id) for a valid API token ``key``, else None. Synchronous (database).
    Hashing, expiry and revocation are decided by accounts.tokens.authenticate_key."""
    from accounts.tokens import authenticate_key

    user = authenticate_key(key)
    if user is None:
        return None
    return user, token_id(key)


def token_choices() -> list[tuple[str, str]]:
    """Every API token as (token id, label), for the admin's per-token limit form."""
    from accounts.models import ApiToken

    return [(t.token_key, f"{t.user.username} · {t.name} · {t.prefix}… · created {t.created:%Y-%m-%d %H:%M}")
            for t in ApiToken.objects.select_related("user").order_by("user__username", "created")]


# --- the lookups (synchronous: run them in a thread) --------------------------------------------

def limits_for(user_id: int, token: str | None) -> Limits:
    from .models import ApiLimit

    rows = {row.token_id: row for row in ApiLimit.objects.filter(user_id=user_id, token_id__in=["", token or ""])}
    row = rows.get(token) if token else None
    subject = f"t:{token}" if row is not None else f"u:{user_id}"
    row = row or rows.get("")
    rate = row.requests_per_minute if row and row.requests_per_minute is not None else None
    streams = row.concurrent_streams if row and row.concurrent_streams is not None else None
    return Limits(subject, settings.PLAYGROUND_RATE_PER_MINUTE if rate is None else rate,
                  settings.PLAYGROUND_MAX_CONCURRENT_STREAMS if streams is None else streams)


def parse_authorization(header: str) -> str:
    """The key of ``Token <key>`` (DRF's scheme) or ``Bearer <key>`` (what OpenAI's clients
    send). Raises ChatRefused."""
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() not in ("token", "bearer") or not key:
        raise ChatRefused(401, "invalid_token", "send Authorization: Token <key> (or Bearer <key>)")
    return key


def admit_token(authorization: str, graph_name: str) -> Admission:
    """A token caller: who, may they use ``graph_name``, with which limits. Or ChatRefused."""
    found = token_owner(parse_authorization(authorization))
    if found is None:
        raise ChatRefused(401, "invalid_token", "the token is not valid")
    user, token = found
    return Admission(user.pk, chat_target(user, graph_name), limits_for(user.pk, token))


def _session(request):
    if not hasattr(request, "session"):  # the gateway serves this view without the middleware
        engine = import_module(settings.SESSION_ENGINE)
        request.session = engine.SessionStore(request.COOKIES.get(settings.SESSION_COOKIE_NAME))
    return request.session


def admit_session(request, graph_name: str) -> Admission:
    """A browser caller (session cookie, a Django request): as admit_token."""
    _session(request)
    user = auth.get_user(request)
    if not user.is_authenticated:
        raise ChatRefused(401, "not_authenticated", "sign in, or send Authorization: Token <key>")
    return Admission(user.pk, chat_target(user, graph_name), limits_for(user.pk, None))


# --- CSRF ----------------------------------------------------------------------------------------

class _CSRFCheck(CsrfViewMiddleware):
    def _reject(self, request, reason):
        return reason


def csrf_needed(authorization: str | None, cookies: dict) -> bool:
    """Session callers carry ambient credentials and must send the CSRF token; token callers
    need not (DRF's rule). No session cookie: no ambient credential to forge (the caller just
    gets 401)."""
    return not authorization and settings.SESSION_COOKIE_NAME in cookies


def enforce_csrf(request) -> None:
    """The site's own CSRF check (cookie and X-CSRFToken header, Origin/Referer), run on this
    request. Pure unless CSRF_USE_SESSIONS, which reads the session (then run it in a thread)."""
    if settings.CSRF_USE_SESSIONS:
        _session(request)
    check = _CSRFCheck(lambda _request: None)
    check.process_request(request)
    try:
        reason = check.process_view(request, None, (), {})
    except DisallowedHost as exc:  # the Origin check reads the Host, which no middleware vetted here
        raise ChatRefused(400, "invalid_host", str(exc)) from None
    if reason:
        raise ChatRefused(403, "csrf_failed", f"CSRF check failed: {reason}")
