"""Streaming responses handed to the ASGI server as asynchronous iterators.

A streaming response with a synchronous iterator (WhiteNoise's static files, FileResponse
downloads of benchmark artifacts and logs) can only be consumed by Django's ASGI handler by
reading it whole in a worker thread, and Django warns "StreamingHttpResponse must consume
synchronous iterators" for each one: for static files, on every asset the browser loads. This
middleware, first in MIDDLEWARE, gives such responses an asynchronous iterator under ASGI (a
file read in 64 KiB chunks off the event loop) and leaves them as they are under WSGI (the
test client, the Django dev server)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest

CHUNK = 64 * 1024
_END = object()


async def _file_chunks(file, size: int = CHUNK):
    read = sync_to_async(file.read, thread_sensitive=False)
    while chunk := await read(size):
        yield chunk


async def _iterate(iterator):
    step = sync_to_async(lambda: next(iterator, _END), thread_sensitive=False)
    while (chunk := await step()) is not _END:
        yield chunk


class AsyncStreamingMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if isinstance(request, ASGIRequest) and getattr(response, "streaming", False) and not response.is_async:
            # FileResponse keeps its file open until response.close() (its closer is registered).
            file = getattr(response, "file_to_stream", None)
            chunks = _file_chunks(file) if file is not None else _iterate(iter(response.streaming_content))
            response.streaming_content = chunks
        return response
