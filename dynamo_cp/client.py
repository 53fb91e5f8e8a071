"""The one module that speaks HTTP to the control plane: httpx underneath, our exit codes
(dynamo_cp.exits) on top. Every error message says what the server said."""

from __future__ import annotations

import json as jsonlib
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

from . import exits
from .config import Settings
from .exits import CliError

USER_AGENT = "dynamo-cp/0.1"
STATUS_CODES = {400: exits.INVALID, 401: exits.AUTH, 403: exits.AUTH, 404: exits.NOT_FOUND, 409: exits.CONFLICT,
                413: exits.INVALID, 415: exits.INVALID, 422: exits.INVALID}


def error_lines(body: Any, prefix: str = "") -> list[str]:
    """A DRF error body as lines "field: message"; manifest findings as "severity: path: message (fix)"."""
    if isinstance(body, dict) and isinstance(body.get("findings"), list):
        return [finding_line(f) for f in body["findings"] if isinstance(f, dict)]
    if isinstance(body, dict):
        lines = []
        for key, value in body.items():
            here = f"{prefix}{key}" if key not in ("detail", "non_field_errors") else prefix.rstrip(".")
            for line in error_lines(value, f"{here}." if here else ""):
                lines.append(line)
        return lines
    if isinstance(body, list):
        return [line for item in body for line in error_lines(item, prefix)]
    text = str(body)
    label = prefix.rstrip(".")
    return [f"{label}: {text}" if label else text]


def finding_line(f: dict) -> str:
    line = f"{f.get('severity', 'error')}: {f.get('path') or '(manifest)'}: {f.get('message', '')}"
    return line + (f" (fix: {f['fix']})" if f.get("fix") else "")


class Client:
    def __init__(self, settings: Settings, *, timeout: float = 30.0, transport: httpx.BaseTransport | None = None):
        self.base = settings.url
        self.http = httpx.Client(base_url=settings.url, timeout=timeout, transport=transport, follow_redirects=False,
                                 headers={"Authorization": f"Token {settings.token}", "Accept": "application/json",
                                          "User-Agent": USER_AGENT, "X-Controlplane-Client": "cli"})

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, json: Any = None, content: bytes | None = None,
                content_type: str | None = None, params: dict | None = None, accept: str | None = None
                ) -> httpx.Response:
        headers = {}
        if json is not None:  # serialised here: httpx would raise on NaN or infinity
            try:
                content = jsonlib.dumps(json, allow_nan=False).encode()
            except ValueError:
                raise CliError(exits.USAGE, "a value is not a finite number (NaN or infinity): "
                                            "JSON cannot carry it") from None
            json, content_type = None, content_type or "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
        params = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        try:
            response = self.http.request(method, path, json=json, content=content, params=params, headers=headers)
        except httpx.TimeoutException:
            raise CliError(exits.UNAVAILABLE, f"{self.base}: no answer in time ({method} {path})") from None
        except httpx.HTTPError as exc:
            raise CliError(exits.UNAVAILABLE, f"cannot reach the control plane at {self.base}: {exc}") from None
        if response.is_success:
            return response
        raise self._error(response)

    def _error(self, response: httpx.Response) -> CliError:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        lines = error_lines(body) if body is not None else []
        if status in (401, 403):
            reason = lines[0] if lines else response.reason_phrase
            hint = ("check the token (it may be wrong, expired or revoked)" if status == 401
                    else "your role may not do this")
            return CliError(exits.AUTH, f"{status} {response.reason_phrase}: {reason} ({hint})")
        if 300 <= status < 400:
            return CliError(exits.UNAVAILABLE, f"{self.base} redirected to {response.headers.get('location')}: "
                                               "is the URL the control plane's, with the right scheme?")
        code = STATUS_CODES.get(status, exits.UNAVAILABLE if status >= 500 else exits.INVALID)
        if not lines:
            lines = [response.text[:300].strip() or response.reason_phrase]
        head, *rest = lines
        return CliError(code, f"{status} {response.reason_phrase}: {head}", details=rest)

    def get(self, path: str, **kw) -> Any:
        return self.request("GET", path, **kw).json()

    def post(self, path: str, **kw) -> Any:
        response = self.request("POST", path, **kw)
        return response.json() if response.content else None

    def delete(self, path: str) -> None:
        self.request("DELETE", path)

    def pages(self, path: str, params: dict | None = None, limit: int = 10_000) -> list:
        """Every row of a paginated list, following ``next`` (page numbers or a cursor: the
        query of the next link is asked of the same path, so a proxy's host in it does not matter)."""
        rows: list = []
        query = dict(params or {})
        while len(rows) < limit:
            body = self.get(path, params=query)
            if isinstance(body, list):
                return body
            rows.extend(body.get("results", []))
            if not body.get("next"):
                break
            query = dict(parse_qsl(urlsplit(body["next"]).query, keep_blank_values=True))
        return rows
