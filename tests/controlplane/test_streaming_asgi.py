"""Streaming responses under the ASGI server (uvicorn, the full middleware stack): static files
(whole, ranges, conditional, HEAD) and file downloads arrive intact, without the "StreamingHttpResponse
must consume synchronous iterators" warning for each one."""

from __future__ import annotations

import warnings
from pathlib import Path

import httpx
import pytest

from benchmarks.models import BenchmarkRun
from tests import factories
from tests.playground_fixtures import AsgiServer

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
ASSET = "js/app.js"


@pytest.fixture
def server():
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


def test_a_file_download_streams_asynchronously_under_asgi(server, users, tmp_path):
    from accounts.tokens import token_create

    graph = factories.graph("logs")
    log = tmp_path / "aiperf.log"
    log.write_bytes(b"aiperf line\n" * 20_000)  # several chunks
    run = BenchmarkRun.objects.create(graph=graph, profile="custom", params={}, state="failed", log_path=str(log))
    token = "Token " + token_create(user=users["viewer"], name="streaming", via="system")[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        response = httpx.get(f"{server.url}/api/benchmarks/runs/{run.pk}/log/", headers={"Authorization": token},
                             timeout=10)
    assert response.status_code == 200
    assert response.content == log.read_bytes()
    assert not [str(w.message) for w in caught if "StreamingHttpResponse" in str(w.message)]


def test_the_test_client_still_gets_the_file(client):
    response = client.get(f"/static/{ASSET}")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == (ROOT / "static" / ASSET).read_bytes()
