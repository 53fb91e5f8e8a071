"""Static files (WhiteNoise) served to ASGI requests without the thread round trip.

WhiteNoise streams a file through a synchronous iterator. Django's ASGI handler can only
consume one by reading the whole file in a worker thread, and it warns "StreamingHttpResponse
must consume synchronous iterators" on every such response, that is on every static file the
browser loads. Under ASGI this middleware hands the same file over as an asynchronous iterator;
under WSGI (the test client, the Django dev server) it serves WhiteNoise's response unchanged."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from whitenoise.middleware import WhiteNoiseMiddleware

CHUNK = 64 * 1024  # static assets here are tens of KB: one or two reads each


async def _chunks(file, size: int = CHUNK):
    if file is None:  # HEAD, 304: no body
        return
    read = sync_to_async(file.read, thread_sensitive=False)
    while chunk := await read(size):
        yield chunk


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    @staticmethod
    def serve(static_file, request):
        response = WhiteNoiseMiddleware.serve(static_file, request)
        # file_to_stream: the open file (None for HEAD and 304, which have no body). The
        # response still closes it when it is done (FileResponse registered its closer).
        if isinstance(request, ASGIRequest):
            response.streaming_content = _chunks(getattr(response, "file_to_stream", None))
        return response
