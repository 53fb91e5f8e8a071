"""A stand-in for what Prometheus scrapes: a loopback HTTP server answering each GET with
Prometheus's text format, as a frontend, a DCGM exporter or a test's exposition would."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTENT_TYPE = "text/plain; version=0.0.4"


def exposition_server(text: Callable[[str], str | None]) -> ThreadingHTTPServer:
    """Serves ``text(path)`` (404 where it gives None) on a free loopback port, from a thread of
    its own; ``server.shutdown()`` stops it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            answer = text(self.path)
            if answer is None:
                self.send_error(404)
                return
            body = answer.encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
