"""Input the database cannot hold is the caller's error, not ours: a 400, never a 500."""

from __future__ import annotations

from django.db import DataError
from django.http import HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError

from core.untrusted import QueryParameterError, text_problem

MESSAGE = "the request holds characters the server cannot store or look up (NUL bytes)"
SSO_CALLBACK = "/auth/oidc/callback/"  # accounts/urls.py, name "sso-callback"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _first_problem(params) -> str | None:
    """'name: why' for the first key or value of a QueryDict that cannot be stored."""
    for key, values in params.lists():
        for text in (key, *values):
            problem = text_problem(text) if isinstance(text, str) else None
            if problem:
                return f"{key!r}: {problem}"
    return None


class RejectUnstorableInputMiddleware:
    """PostgreSQL refuses NUL bytes in text; a query string or form field carrying one would
    otherwise turn a harmless lookup (``?graph=...``) or a form post into a server error. JSON
    and YAML bodies are checked where they are parsed (core/untrusted.py)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path:
            return JsonResponse({"detail": MESSAGE}, status=400)
        problem = _first_problem(request.GET)
        if problem:
            if request.path == SSO_CALLBACK:
                # A person's browser came back from the identity provider: its failure page, not JSON.
                from accounts.sso_views import STALE, _failure

                return _failure(request, "stale", STALE, record=False)
            return JsonResponse({"detail": f"query parameter {problem}"}, status=400)
        return self.get_response(request)

    def process_view(self, request, view, args, kwargs):
        # A urlencoded body stays readable after parsing; a multipart one is checked once
        # CsrfViewMiddleware has parsed it (reading it here would consume the stream of a view
        # that reads the body itself). Django's form fields refuse NUL in what is left.
        parsed = request.content_type == FORM_TYPES[0] or hasattr(request, "_post")
        if request.method == "POST" and request.content_type in FORM_TYPES and parsed:
            try:
                problem = _first_problem(request.POST)
            except MultiPartParserError:
                return None  # malformed: the view's own form reading answers it (too large: 400 as is)
            if problem:
                return JsonResponse({"detail": f"form field {problem}"}, status=400)
        return None

    def process_exception(self, request, exception):
        if isinstance(exception, QueryParameterError):
            # Pages: a 400 that names the parameter (Django's own 400 page says only "Bad Request").
            return HttpResponseBadRequest(f"Bad request: {exception}", content_type="text/plain; charset=utf-8")
        if isinstance(exception, DataError):
            return JsonResponse({"detail": MESSAGE if "NUL" in str(exception) else
                                 "the request holds a value the database cannot store"}, status=400)
        return None
