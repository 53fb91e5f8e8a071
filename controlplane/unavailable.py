"""A dependency that is down is a 503, never a 500: the answer says what is down and when to
try again (``Retry-After``), as JSON under /api/ and as a page elsewhere.

Two places see such an error: the API's exception handler (controlplane/api.py) for DRF views,
and the 500 handler (controlplane/urls.py) for everything else, pages and middleware alike (a
session or user lookup fails before any view runs). Neither answer touches the database: the
page is rendered without a request, so no context processor asks for the user."""

from __future__ import annotations

import logging
import sys

from django.http import HttpResponse, JsonResponse
from django.template import loader

from availability import RETRY_AFTER_SECONDS, dependency_down, detail

__all__ = ["RETRY_AFTER_SECONDS", "dependency_down", "detail", "error_handler", "unavailable"]

log = logging.getLogger(__name__)


def unavailable(request, what: str) -> HttpResponse:
    log.warning("%s %s: %s is unavailable", request.method, request.path, what)
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": detail(what), "unavailable": what}, status=503)
    else:
        page = loader.get_template("503.html").render({"what": what, "retry": RETRY_AFTER_SECONDS})
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def error_handler(fallback):
    """A 500 handler that answers 503 when the error being handled is a dependency's."""

    def handler(request, *args, **kwargs):
        what = dependency_down(sys.exc_info()[1])
        if what is not None:
            return unavailable(request, what)
        return fallback(request, *args, **kwargs)

    return handler
