"""The project's ASGI entry point, what every way of starting it serves (``make up``, the
Dockerfile, deploy/kustomize): two paths outside Django's request handling and middleware,
everything else through it.

* ``/api/playground/{graph}/v1/...``, the OpenAI endpoint: playground.asgi (why: see there).
* ``/metrics``, the control plane's own Prometheus metrics: controlplane.telemetry.exposition.

``django_application`` is plain Django (the same paths then go through playground.proxy's
views): for tests, and for comparing the two in bench/proxy.py."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_application = get_asgi_application()

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
    await django_application(scope, receive, send)
