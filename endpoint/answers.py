"""What the OpenAI endpoint answers (endpoint/gateway.py decides which): a Reply, every one
carrying ``HARDENING``, and every error in OpenAI's shape ``{"error": {"message", "type",
"param", "code"}}``, the endpoint's own or the frontend's, in a body or as a stream's last event."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from django.conf import settings

import availability

from . import upstream

log = logging.getLogger(__name__)

JSON = "application/json"
SSE = "text/event-stream"
# On every answer of this endpoint, whichever front end sends it (endpoint.asgi runs outside
# the middleware that would add some of these).
HARDENING = (("x-content-type-options", "nosniff"),
             ("content-security-policy", "default-src 'none'; sandbox; frame-ancestors 'none'"),
             ("x-frame-options", "DENY"))
_HARDENED = {name for name, _ in HARDENING}


def error_body(kind: str, message: str, status: int) -> dict:
    """OpenAI's error shape, which its SDKs and our page know how to show."""
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def sse_error(kind: str, message: str, status: int) -> bytes:
    return b"data: " + json.dumps(error_body(kind, message, status)).encode() + b"\n\n"


@dataclass
class Reply:
    """What to send. With ``upstream`` set, its body streams after ``body`` (empty), and the
    stream slot of ``subject`` is released when it ends (``finish``)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    upstream: upstream.Response | None = None
    subject: str | None = None
    sent: float = 0.0  # when the upstream request went out (perf_counter)

    def __post_init__(self) -> None:
        self.headers = [(k, v) for k, v in self.headers if k not in _HARDENED] + list(HARDENING)


def media_type(content_type: str) -> str:
    """``text/html; charset=utf-8`` -> ``text/html``."""
    return content_type.split(";", 1)[0].strip().lower()


def error_reply(status: int, kind: str, message: str, *extra: tuple[str, str]) -> Reply:
    if status == 503 and not any(name == "retry-after" for name, _ in extra):
        extra = (*extra, ("retry-after", str(availability.RETRY_AFTER_SECONDS)))
    return Reply(status, [("content-type", JSON), *extra], json.dumps(error_body(kind, message, status)).encode())


def down_reply(exc: BaseException) -> Reply | None:
    """The 503 for a dependency that is down (the database, the cache, a full disk), naming it;
    None when ``exc`` is another error."""
    what = availability.dependency_down(exc)
    if what is None:
        return None
    log.warning("a gateway request met %s down: %s", what, exc)
    return error_reply(503, "service_unavailable", availability.detail(what))


def too_large() -> Reply:
    limit = settings.PLAYGROUND_MAX_PROMPT_BYTES
    return error_reply(413, "request_too_large", f"the request is larger than {limit} bytes")


def openai_error(status: int, content: bytes) -> bytes:
    """The frontend's error answer in OpenAI's shape (it is, or it is wrapped)."""
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return content
    if isinstance(data, dict):
        message = data.get("message") or data.get("error") or data.get("detail") or json.dumps(data)
        kind = data.get("type") if isinstance(data.get("type"), str) else "upstream_error"
    else:
        message, kind = content.decode("utf-8", "replace").strip() or f"HTTP {status}", "upstream_error"
    return json.dumps(error_body(kind, str(message)[:2000], status)).encode()


def terminate(last: bytes) -> bytes:
    """Blank lines that end a partly relayed event, so that an error event stands alone."""
    return b"" if last.endswith(b"\n\n") else b"\n\n"


def stream_error(exc: BaseException) -> bytes:
    """The SSE error event that ends a stream the frontend stalled or dropped."""
    if isinstance(exc, TimeoutError):
        idle = settings.PLAYGROUND_IDLE_TIMEOUT
        return sse_error("upstream_timeout", f"the graph's frontend sent nothing for {idle:g} s", 504)
    return sse_error("upstream_error", f"the graph's frontend dropped the stream ({exc.__class__.__name__})", 502)
