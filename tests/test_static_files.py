"""Static files under the ASGI server (uvicorn, the full middleware stack): the whole file,
ranges and conditional requests as WhiteNoise serves them, and no "StreamingHttpResponse must
consume synchronous iterators" warning on each one."""

from __future__ import annotations

import warnings
from pathlib import Path

import httpx
import pytest

from tests.playground_fixtures import AsgiServer

ROOT = Path(__file__).resolve().parents[1]
ASSET = "js/app.js"


@pytest.fixture
def server(db):
    srv = AsgiServer().start()
    yield srv
    srv.stop()


def test_static_files_stream_asynchronously_under_asgi(server):
    body = (ROOT / "static" / ASSET).read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with httpx.Client(base_url=server.url, timeout=10) as client:
            whole = client.get(f"/static/{ASSET}")
            part = client.get(f"/static/{ASSET}", headers={"Range": "bytes=10-19"})
            again = client.get(f"/static/{ASSET}", headers={"If-None-Match": whole.headers.get("etag", "")})
            head = client.head(f"/static/{ASSET}")
    assert whole.status_code == 200
    assert whole.content == body
    assert int(whole.headers["content-length"]) == len(body)
    assert part.status_code == 206 and part.content == body[10:20]
    assert again.status_code == 304 and again.content == b""
    assert head.status_code == 200 and head.content == b""
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "StreamingHttpResponse" in m], messages


def test_the_test_client_still_gets_the_file(client):
    response = client.get(f"/static/{ASSET}")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == (ROOT / "static" / ASSET).read_bytes()
