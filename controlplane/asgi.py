"""The project's ASGI entry point, what every way of starting it serves (``make up``, the
Dockerfile, deploy/kustomize): two paths outside Django's request handling and middleware,
everything else through it.

* ``/api/playground/{graph}/v1/...``, the OpenAI endpoint: playground.asgi (why: see there).
* ``/metrics``, the control plane's own Prometheus metrics: controlplane.telemetry.exposition.

Everything else (pages, the REST API, static files) is Django through its WSGI handler, run
in a fixed pool of threads by a2wsgi. Every view of the product is synchronous, and Django's
ASGI handler serves a synchronous view in a new thread per request (a fresh single-thread
executor for each request's context) with extra hops between the event loop and that thread
for the request signals and the body: measured over HTTP (wrk, one connection, one worker),
``/healthz`` went from 440 to 930 requests per second, i.e. about 1.1 ms of CPU per request
that every page paid (bench/pages_http.py has the page figures).

``django_application`` is plain Django under its ASGI handler (the same paths then go through
playground.proxy's views): for tests, and for comparing the two in bench/proxy.py."""

import os

from a2wsgi import WSGIMiddleware
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_application = get_asgi_application()
# Threads per process for pages: requests beyond it wait in the pool's queue (the GIL lets
# one run at a time anyway; a few threads overlap database and Prometheus waits).
_PAGE_THREADS = int(os.environ.get("WEB_THREADS", "8"))
pages_application = WSGIMiddleware(get_wsgi_application(), workers=_PAGE_THREADS)

from controlplane.telemetry import exposition  # noqa: E402  (after Django is set up)
from playground import asgi as playground_asgi  # noqa: E402


async def _lifespan(receive, send) -> None:
    """Startup needs nothing; shutdown closes the OpenAI endpoint's pooled upstream connections."""
    from playground import upstream

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
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
            found = playground_asgi.match(path)
            if found is not None:
                await playground_asgi.serve(scope, receive, send, found)
                return
            if await playground_asgi.not_served(scope, receive, send):
                return
        elif path == "/metrics":
            await exposition.serve(scope, receive, send)
            return
    if scope["type"] == "http":
        await pages_application(scope, receive, send)
        return
    await django_application(scope, receive, send)  # websocket: refused by Django's handler
