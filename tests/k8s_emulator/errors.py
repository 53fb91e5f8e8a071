"""Kubernetes ``Status`` objects and the exception that carries them through the emulator."""

from __future__ import annotations

import json
from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

DEFAULT_MESSAGES = {
    401: "Unauthorized",
    403: "forbidden",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing "
    "the request",
}


def status_body(code: int, message: str | None = None, reason: str | None = None,
                details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``v1 Status`` failure object as the API server returns it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message if message is not None else DEFAULT_MESSAGES.get(code, "error"),
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


class ApiError(Exception):
    """Raised anywhere in the emulator; the server turns it into a Status response."""

    def __init__(self, code: int, message: str | None = None, reason: str | None = None,
                 details: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
        self.code = code
        self.body = status_body(code, message, reason, details)
        self.headers = headers or {}
        super().__init__(f"{code} {self.body['reason']}: {self.body['message']}")

    def to_json(self) -> bytes:
        return json.dumps(self.body).encode()


def qualified(plural: str, group: str) -> str:
    """``dynamographdeployments.nvidia.com`` or ``pods`` (the form used in messages)."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, f'{qualified(plural, group)} "{name}" not found', "NotFound",
                    _details(plural, group, name))


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(409, f'{qualified(plural, group)} "{name}" already exists', "AlreadyExists",
                    _details(plural, group, name))


def conflict(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        "Conflict", _details(plural, group, name))


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid with ``details.causes``; the message lists ``field: message`` as the server does."""
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    kind_q = f"{kind}.{group}" if group else kind
    details = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, f'{kind_q} "{name}" is invalid: {joined}', "Invalid", details)


def cause(reason: str, message: str, field: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def _details(plural: str, group: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details
