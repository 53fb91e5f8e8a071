"""An ASGI entry point that serves the playground's streaming endpoint outside Django's
middleware stack, and everything else through it.

Why: every ``MiddlewareMixin`` middleware in settings.MIDDLEWARE runs its hooks through
``sync_to_async(thread_sensitive=True)``, i.e. on one shared thread, twice per request; under
concurrent streams those hops queue (proxy-spike.md measured +3.5 ms TTFT at c=1 and +51 ms
at c=16 for four of them; bench/proxy.py measures ours). The chat endpoint needs none of
them: proxy.chat_completions authenticates itself (token, or session cookie plus CSRF), and
sets the one security header that matters for it.

Serve ``playground.asgi:application`` instead of ``controlplane.asgi:application``, or wrap
the project's app: ``application = route_streams(get_asgi_application())``."""

from __future__ import annotations

import os
import re

from django.core.asgi import get_asgi_application
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

STREAM_PATH = re.compile(r"^/api/playground/[-a-zA-Z0-9_]+/v1/chat/completions$")


class StreamHandler(ASGIHandler):
    """Django's ASGI handler (URL resolution, request signals, disconnect handling) with no
    middleware at all."""

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        get_response = self._get_response_async if is_async else self._get_response
        self._middleware_chain = convert_exception_to_response(get_response)


def route_streams(django_app):
    """``django_app`` for every request but the chat endpoint, which goes to a StreamHandler."""
    streams = StreamHandler()

    async def application(scope, receive, send):
        if scope["type"] == "http" and STREAM_PATH.match(scope.get("path", "")):
            await streams(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return application


application = route_streams(get_asgi_application())
