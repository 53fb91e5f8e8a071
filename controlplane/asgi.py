"""The project's ASGI entry point, what every way of starting it serves (``make up``, the
Dockerfile, deploy/kustomize): two paths outside Django's request handling and middleware,
everything else through it.

* ``/api/playground/{graph}/v1/...``, the OpenAI endpoint: endpoint.asgi (why: see there).
* ``/api/gateway/authorize/{graph}/...``, what a cluster's gateway asks before it passes a
  request to a graph's frontend: endpoint.authorize.
* ``/metrics``, the control plane's own Prometheus metrics: telemetry.exposition.

Everything else (pages, the REST API, static files) is Django through its WSGI handler, run
in a fixed pool of threads by a2wsgi. Every view of the product is synchronous, and Django's
ASGI handler serves a synchronous view in a new thread per request (a fresh single-thread
executor for each request's context) with extra hops between the event loop and that thread
for the request signals and the body: measured over HTTP (wrk, one connection, one worker),
``/healthz`` went from 440 to 930 requests per second, i.e. about 1.1 ms of CPU per request
that every page paid (bench/pages_http.py has the page figures).

Two pools, and a view says which it needs (availability/waiting.py). Pages that only read the
database run one at a time per process (``WEB_THREADS``, 1): they are CPU-bound Python, the GIL
runs one thread at a time anyway, and several threads only share the core and wait for the GIL
after every query (measured with wrk, 8 connections, 2 processes: a graph page's p95 went from
about 0.1 s at one thread to 0.5-1.4 s at four or eight). Requests that wait on something else
(Prometheus for the metrics pages and the Planner timeline, a cluster's API server, a download
or a static file a slow client reads) go to a pool of their own (``WEB_WAITING_THREADS``, 8), so
that a slow Prometheus or client never holds up the pages. So do the requests that wait on a Git
host (a repository's "Sync now", page and API) and on the identity provider (single sign-on's
login, callback and logout): a Git host or an IdP that does not answer once froze every page,
the API, /healthz and the break-glass login for as long as git or the provider's timeout lasted.

``django_application`` is plain Django under its ASGI handler (the same paths then go through
endpoint.proxy's views): for tests, and for comparing the two in bench/proxy.py."""

import functools
import gc
import os

from a2wsgi import WSGIMiddleware
from asgiref.sync import iscoroutinefunction
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_application = get_asgi_application()
from django.conf import settings  # noqa: E402
from django.urls import Resolver404, resolve  # noqa: E402

from availability import database  # noqa: E402 - after Django's setup
from availability.waiting import Wait, wait_of  # noqa: E402

_django_wsgi = get_wsgi_application()
pages_application = WSGIMiddleware(_django_wsgi, workers=int(os.environ.get("WEB_THREADS", "1")))
waiting_application = WSGIMiddleware(_django_wsgi, workers=int(os.environ.get("WEB_WAITING_THREADS", "8")))
STATIC = settings.STATIC_URL
# An async view (a graph page's stream of status changes, graphs.live) runs in no pool at all.
ASYNC = Wait("nothing: an async view, on the event loop")


@functools.lru_cache(maxsize=4096)
def _wait_of(path: str) -> Wait | None:
    """Where the view at ``path`` runs, as the view says itself: ``ASYNC`` for an async view, which
    Django's ASGI handler runs on the event loop (it holds no thread for as long as it lasts);
    what it waits on (availability/waiting.py); None for a page that only reads the database, or
    a path nothing serves."""
    try:
        view = resolve(path).func
    except Resolver404:
        return None
    return ASYNC if iscoroutinefunction(view) else wait_of(view)


def _waits(scope, wait: Wait | None) -> bool:
    if scope["path"].startswith(STATIC):  # a file a slow client reads (WhiteNoise serves it before any view)
        return True
    if wait is None:
        return False
    return not wait.htmx_only or any(name == b"hx-request" for name, _ in scope["headers"])

from endpoint import asgi as endpoint_asgi  # noqa: E402
from endpoint import authorize  # noqa: E402
from telemetry import exposition  # noqa: E402  (after Django is set up)


async def _lifespan(receive, send) -> None:
    """Startup marks the process as a web server: a person waits on each of its queries, so a
    database that does not answer is a 503 soon (availability/database.py). Shutdown unmarks it
    and closes the OpenAI endpoint's pooled upstream connections."""
    from endpoint import upstream

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            database.serve_web()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            database.serve_web(False)
            await upstream.close()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] == "http":
        path = scope["path"]
        if path.startswith("/api/playground/"):
            found = endpoint_asgi.match(path)
            if found is not None:
                await endpoint_asgi.serve(scope, receive, send, found)
                return
            if await endpoint_asgi.not_served(scope, receive, send):
                return
        elif path.startswith("/api/gateway/authorize/") and (found := authorize.match(path)) is not None:
            await endpoint_asgi.serve_authorize(scope, receive, send, found)
            return
        elif path == "/metrics":
            await exposition.serve(scope, receive, send)
            return
        wait = _wait_of(path)
        if wait is ASYNC:
            await django_application(scope, receive, send)
            return
        await (waiting_application if _waits(scope, wait) else pages_application)(scope, receive, send)
        return
    await django_application(scope, receive, send)  # websocket: refused by Django's handler


# Everything loaded so far (Django, the apps, the URL map, the CRD schemas: about 190,000
# objects) lives as long as the process. Left to the collector, each full collection walks all
# of it: 76 ms, measured on a page request's thread, every few thousand requests, which is a
# page's p99. Frozen, the collections walk only what requests left behind.
gc.collect()
gc.freeze()
