"""Readiness probes of the local runtime's processes, over loopback HTTP (http.client: no
proxies): a frontend is ready when it lists its model, a worker when its system server's
/health answers 200. Django-free."""

from __future__ import annotations

import contextlib
import http.client
import json

from ..processes import LOOPBACK


def http_get(port: int, path: str, *, timeout: float = 0.5) -> tuple[int, bytes] | None:
    """GET on loopback, no proxies (http.client ignores *_proxy); None when nothing answers."""
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read(1 << 20)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def probe_frontend(port: int, model: str, *, timeout: float = 0.5) -> bool:
    """Ready when /v1/models lists the model (the frontend answers 200 long before that)."""
    result = http_get(port, "/v1/models", timeout=timeout)
    if not result or result[0] != 200:
        return False
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return any(m.get("id") == model for m in json.loads(result[1]).get("data", []))
    return False


def probe_worker(system_port: int, *, timeout: float = 0.5) -> bool:
    """Ready when the system server's /health answers 200 (its "generate" endpoint is up)."""
    result = http_get(system_port, "/health", timeout=timeout)
    return bool(result and result[0] == 200)
