"""API-wide behaviour: errors always come back as JSON with a clear message, never a 500
for bad input."""

import re

from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import Http404
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.unavailable import RETRY_AFTER_SECONDS, dependency_down, detail
from core.errors import UNPROCESSABLE, Refused
from core.untrusted import QueryParameterError, query_int


def exception_handler(exc, context):
    down = dependency_down(exc)
    if down is not None:  # the database or broker is down: 503 with Retry-After, never a 500
        return Response({"detail": detail(down), "unavailable": down}, status=503,
                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if isinstance(exc, Refused):  # every refusal, of every app: one status per kind, set on the class
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, QueryParameterError):
        return Response({exc.name: [exc.message]}, status=400)
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": "the request body is too large"}, status=400)
    if isinstance(exc, DataError):
        # PostgreSQL refuses NUL bytes in text, even in a lookup: the caller's input, not a bug.
        return Response({"detail": "the request holds a value the database cannot store or look up "
                                   "(such as a NUL byte)"}, status=400)
    if isinstance(exc, ValidationError) and _only(exc.get_codes(), UNPROCESSABLE):
        # A document of the stated shape whose content the rules refuse (core.errors.Unprocessable).
        return Response(exc.detail, status=422)
    if isinstance(exc, Http404):
        exc = Http404(_not_found(str(exc), getattr(context.get("view"), "kwargs", None) or {}))
    return drf_exception_handler(exc, context)


def _only(codes, code: str) -> bool:
    """Every leaf of a ValidationError's codes is ``code``."""
    if isinstance(codes, dict):
        return bool(codes) and all(_only(value, code) for value in codes.values())
    if isinstance(codes, list):
        return bool(codes) and all(_only(value, code) for value in codes)
    return codes == code


_NO_MATCH = re.compile(r"^No (\w+) matches the given query\.$")


def _not_found(message: str, kwargs: dict) -> str:
    """Django's "No Graph matches the given query." as what was asked for: "no graph with name
    'nosuch'"."""
    found = _NO_MATCH.match(message)
    if found is None or not kwargs:
        return message
    what = re.sub(r"(?<!^)(?=[A-Z])", " ", found.group(1)).lower()
    def shown(value) -> str:
        text = str(value)[:200]
        return text if text.isdigit() else repr(text)

    return f"no {what} with " + ", ".join(f"{'id' if key == 'pk' else key} {shown(value)}"
                                          for key, value in kwargs.items())


class Pagination(PageNumberPagination):
    """DRF's page numbers, read like every other integer query parameter: ``?page=abc`` or a
    30-digit page is a 400 naming ``page``; a page past the end is still a 404."""

    def get_page_number(self, request, paginator):
        return query_int(request.query_params, self.page_query_param, default=1, strict=True)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["schema"]["minimum"] = 1
        return parameters
