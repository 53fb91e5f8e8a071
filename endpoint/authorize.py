"""The authorization endpoint for a cluster's gateway: ``/api/gateway/authorize/{graph}[/...]``,
what nginx ``auth_request``, ingress-nginx ``auth-url`` and Envoy ``ext_authz`` (Envoy Gateway's
SecurityPolicy ``extAuth``) ask before they pass a request to a graph's frontend. The token
stream then goes from the gateway to the frontend; the control plane only answers this.

Answered from the same API keys, roles and per-key limits as the OpenAI endpoint, through the
same in-memory admission cache (admission.py: no query once a key is remembered, a revoked key
refused within PLAYGROUND_ADMISSION_TTL): 200 allow, 401 a missing, unknown or revoked key, 403
a role that may not use the graph, 404 no such graph, 429 over the key's requests per minute,
each refusal in OpenAI's error shape. Envoy passes a refusal's status and body to the client as
they are. nginx turns every status of its subrequest but 2xx, 401 and 403 into a 500, so each
answer also carries ``x-auth-status`` and ``x-auth-error`` (the body, one line) for the nginx
configuration to answer with (deploy/gateway/nginx.conf); without them (the control plane
unreachable) it answers 503, never passing the request.

Streams open at once are not counted here: a gateway does not say when a stream ends."""

from __future__ import annotations

import json
import re

import availability
from telemetry import instruments

from . import admission, answers, counting, gateway, limits
from .access import ChatRefused

PATH = re.compile(r"^/api/gateway/authorize/([-a-zA-Z0-9_]+)(?:/.*)?$")


def match(path: str) -> re.Match | None:
    return PATH.match(path)


def _key_label(authorization: str | None, status: int) -> str:
    """What /metrics counts an answer under: the key's non-secret id (``ApiToken.token_key``)
    once the key is known to be valid; "unknown" for a missing or refused key, so that random
    keys cannot grow the number of series."""
    if not authorization or status in (401, 503):
        return "unknown"
    return admission.token_id(authorization.partition(" ")[2].strip())


def _reply(status: int, kind: str, message: str, *extra: tuple[str, str]) -> answers.Reply:
    reply = answers.error_reply(status, kind, message, *extra)
    reply.headers += [("x-auth-status", str(status)), ("x-auth-error", reply.body.decode())]
    return reply


async def _count(subject: str, rate: int) -> limits.Refusal | None:
    """Count one request of ``subject`` against its requests per minute, the same counter the
    relay counts on (one limit per key, whichever way its requests go), without I/O far from
    the limit (counting.py). The stream slot this takes is given back at once: a gateway does
    not say when a stream ends."""
    refusal = await counting.acquire(subject, rate, UNCOUNTED_STREAMS)
    if refusal is None:
        counting.release(subject)
    return refusal


UNCOUNTED_STREAMS = 1 << 30


async def authorize(graph: str, headers: dict[str, str]) -> answers.Reply:
    """The answer to one gateway's question about one request (its headers). Every error path
    is a refusal (401, 403, 404, 429 or 503), never a 2xx."""
    authorization = headers.get("authorization")
    if not authorization:
        return _answered(authorization, _reply(401, "not_authenticated", "send Authorization: Bearer <key>"))
    call = gateway.Call("GET", graph, "models", headers, b"", True, {}, lambda: None)
    try:
        admitted = await gateway.admit(call)
        refusal = await _count(admitted.limits.subject, admitted.limits.requests_per_minute)
    except ChatRefused as exc:
        reply = _reply(exc.status, exc.kind, exc.message)
    except Exception as exc:  # the database or the cache is down, or a bug: refuse, never open the door
        what = availability.dependency_down(exc)
        if what is None:
            gateway.log.exception("authorizing a gateway request failed")
        reply = _reply(503, "authorization_unavailable", "the control plane cannot check keys right now"
                       + (f": {what} is unavailable" if what else ""))  # error_reply adds Retry-After
    else:
        if refusal is not None:
            reply = _reply(429, "rate_limited", refusal.message, ("retry-after", str(refusal.retry_after)))
        else:
            reply = answers.Reply(200, [("x-auth-status", "200"), ("x-auth-user", str(admitted.user_id)),
                                        ("content-type", "application/json")], json.dumps({"allow": True}).encode())
    return _answered(authorization, reply)


def _answered(authorization: str | None, reply: answers.Reply) -> answers.Reply:
    instruments.count_authorization(_key_label(authorization, reply.status), reply.status)
    return reply
