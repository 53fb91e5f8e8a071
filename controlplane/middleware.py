"""Input the database cannot hold is the caller's error, not ours: a 400, never a 500."""

from __future__ import annotations

from django.db import DataError
from django.http import JsonResponse

MESSAGE = "the request holds characters the server cannot store or look up (NUL bytes)"


class RejectUnstorableInputMiddleware:
    """PostgreSQL refuses NUL bytes in text; a query string carrying one would otherwise turn
    a harmless lookup (``?graph=...``) into a server error."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any("\x00" in key or any("\x00" in v for v in values)
                                         for key, values in request.GET.lists()):
            return JsonResponse({"detail": MESSAGE}, status=400)
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, DataError):
            return JsonResponse({"detail": MESSAGE if "NUL" in str(exception) else
                                 "the request holds a value the database cannot store"}, status=400)
        return None
