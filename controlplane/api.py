"""API-wide behaviour: errors always come back as JSON with a clear message, never a 500
for bad input."""

from rest_framework.views import exception_handler as drf_exception_handler

from graphs.errors import ManifestError


def exception_handler(exc, context):
    if isinstance(exc, ManifestError):
        from rest_framework.response import Response

        return Response(exc.as_dict(), status=400)
    return drf_exception_handler(exc, context)
