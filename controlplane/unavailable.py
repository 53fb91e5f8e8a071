"""A dependency that is down is a 503, never a 500: the answer says what is down and when to
try again (``Retry-After``), as JSON under /api/ and as a page elsewhere.

Two places see such an error: the API's exception handler (controlplane/api.py) for DRF views,
and the 500 handler (controlplane/urls.py) for everything else, pages and middleware alike (a
session or user lookup fails before any view runs). Neither answer touches the database: the
page is rendered without a request, so no context processor asks for the user."""

from __future__ import annotations

import errno
import logging
import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.template import loader
from kombu.exceptions import OperationalError as BrokerError

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5


def dependency_down(exc: BaseException | None) -> str | None:
    """The name of the dependency whose failure ``exc`` is, or None when it is another error.
    A database error that is not about the connection (a bad query) is not one of these:
    Django raises those as ProgrammingError, IntegrityError or DataError."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return "the database"
    if isinstance(exc, BrokerError):
        return "the task broker"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        # The var/ folder (metrics files, runtime and benchmark folders) is full: nothing this
        # request could do is lost by refusing it, and it works again once space is freed.
        return "disk space under the control plane's var/ folder"
    return None


def detail(what: str) -> str:
    return (f"{what} is unavailable: the control plane cannot answer this request now. Nothing was changed; "
            f"try again in {RETRY_AFTER_SECONDS} seconds.")


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
