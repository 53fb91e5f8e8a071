"""``dynamo-cp login``: get an API token through the browser, where the person signs in the way
they always do (single sign-on or a local account), and store it in the config file (0600).

The CLI listens on a loopback port (the standard library's HTTP server, for one request), opens
``<url>/account/tokens/cli/?port=…&state=…`` in the browser, and waits. The page asks the
person to confirm, makes the token and hands it back in a form POST to that port, so the key
never appears in a URL. ``state`` is a one-time secret: only the browser this command opened
can answer it."""

from __future__ import annotations

import hmac
import secrets
import socket
import time
import webbrowser
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlencode

from . import config, exits
from .exits import CliError
from .output import say
from .wait import seconds

MAX_BODY = 4096
DONE_PAGE = (b"<!doctype html><meta charset=utf-8><title>dynamo-cp</title>"
             b"<p>dynamo-cp has its token. You can close this tab.</p>")


def add_parsers(sub, common) -> None:
    p = sub.add_parser("login", parents=[common],
                       help="make an API token in the browser and store it in the config file (mode 0600)")
    p.add_argument("--name", default=socket.gethostname(), help="what the token is for (default: this host's name)")
    p.add_argument("--no-browser", action="store_true", help="print the URL to open instead of opening a browser")
    p.add_argument("--login-timeout", type=seconds, default=300.0,
                   help="seconds to wait for the browser (default 300)")


class _Listener(HTTPServer):
    """One loopback HTTP server that accepts the one POST carrying ``state``."""

    def __init__(self, state: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.token = ""


class _Handler(BaseHTTPRequestHandler):
    server: _Listener

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if self.path != "/" or not 0 < length <= MAX_BODY:
            self.send_error(400, "not a token hand-over")
            return
        form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
        state, token = form.get("state", [""])[0], form.get("token", [""])[0]
        if not hmac.compare_digest(state, self.server.state) or not token:
            self.send_error(403, "this is not the sign-in this dynamo-cp started")
            return
        self.server.token = token
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(DONE_PAGE)))
        self.end_headers()
        self.wfile.write(DONE_PAGE)

    def log_message(self, format, *args):
        pass  # nothing on stderr but our own messages


def run(args) -> int:
    url = config.resolve_url(url=args.url, config=args.config)
    state = secrets.token_urlsafe(32)
    listener = _Listener(state)
    listener.timeout = 0.5
    try:
        port = listener.server_address[1]
        page = f"{url}/account/tokens/cli/?{urlencode({'port': port, 'state': state, 'name': args.name})}"
        if args.no_browser or not webbrowser.open(page):
            say(f"open this page in a browser signed in to the control plane:\n  {page}")
        else:
            say(f"opened the browser: confirm there (if it did not open, visit {page})")
        deadline = time.monotonic() + args.login_timeout
        while not listener.token:
            if time.monotonic() > deadline:
                raise CliError(exits.TIMEOUT, f"no token came from the browser in {args.login_timeout:g} s: "
                                              f"run `dynamo-cp login` again")
            listener.handle_request()
    finally:
        listener.server_close()
    path = config.write(config.config_path(args.config), {"url": url, "token": listener.token})
    say(f"logged in to {url}: the token is stored in {path} (readable by you only)")
    return exits.OK
