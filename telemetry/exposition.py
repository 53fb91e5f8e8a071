"""``GET /metrics``: the Prometheus text format, served by controlplane.asgi outside the
middleware stack (no session, no CSRF, no HTTPS redirect: a scraper speaks plain HTTP to the
pod).

Protected by a bearer token: with METRICS_TOKEN set (deploy/ mounts it from the Secret),
a scrape must send ``Authorization: Bearer <token>``; without it, only loopback clients are
answered (``make up``'s own Prometheus and the operator's shell). deploy/kustomize's
ServiceMonitor sends the token.

The values of every process (several uvicorn workers, the Celery worker in ``make up``) are
summed by prometheus-client's MultiProcessCollector; gauges of processes that died are
dropped first."""

from __future__ import annotations

import hmac
import os
import re
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings

from telemetry import instruments  # (sets PROMETHEUS_MULTIPROC_DIR before prometheus_client loads)

from .scrape import StateCollector

LOOPBACK = ("127.0.0.1", "::1")
_LIVE_FILE = re.compile(r"^gauge_live\w+_(\d+)\.db$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _forget_dead_processes(path: str) -> None:
    from prometheus_client import multiprocess

    pids = {int(m.group(1)) for m in map(_LIVE_FILE.match, os.listdir(path)) if m}
    for pid in pids:
        if pid != os.getpid() and not _alive(pid):
            multiprocess.mark_process_dead(pid, path)


def render() -> tuple[bytes, str]:
    """The exposition of every process's values plus the state read at scrape time."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

    path = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    Path(path).mkdir(parents=True, exist_ok=True)
    instruments.flush()  # this process's own, now; the others' within instruments.FLUSH_SECONDS
    _forget_dead_processes(path)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)
    registry.register(StateCollector())
    return generate_latest(registry), CONTENT_TYPE_LATEST


def refusal(scope, headers: dict[bytes, bytes]) -> tuple[int, str] | None:
    """Why this scrape is refused, or None."""
    token = settings.METRICS_TOKEN
    if not token:
        client = (scope.get("client") or ("", 0))[0]
        if client in LOOPBACK:
            return None
        return 403, ("/metrics answers loopback clients only unless METRICS_TOKEN is set "
                     "(then send it as a bearer token)")
    scheme, _, sent = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(sent.strip().encode(), token.encode()):
        return 401, "send Authorization: Bearer <METRICS_TOKEN>"
    return None


async def serve(scope, receive, send) -> None:
    headers = dict(scope["headers"])
    if scope["method"] not in ("GET", "HEAD"):
        status, body, content_type = 405, b"GET /metrics\n", "text/plain; charset=utf-8"
    elif (refused := refusal(scope, headers)) is not None:
        status, body, content_type = refused[0], refused[1].encode() + b"\n", "text/plain; charset=utf-8"
    else:
        status = 200
        body, content_type = await sync_to_async(render)()
    head = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff")]
    if status == 401:
        head.append((b"www-authenticate", b'Bearer realm="metrics"'))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
