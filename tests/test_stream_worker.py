# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The stream worker (controlplane.handoff): served as every way of starting the product serves
it (controlplane.serve with two page workers), a real Dynamo graph's chats through the official
OpenAI SDK end up on the one stream worker, pages stay with the page workers, a keep-alive
connection that turns to the OpenAI endpoint midway is handed over with the part of the request
not yet read, and a stream worker that dies is replaced without a chat lost."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import time

import openai
import pytest
from django.conf import settings

from controlplane import serve
from tests.playground_fixtures import (  # noqa: F401
    _fresh_limits,
    chat_graph,
    dynamo_graph,
    free_port,
    tokens,
)
from tests.test_operation_faults import _database_url
from tests.test_serve import healthy, serving, start, stop, stream_worker_of, workers_of

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]
CHAT = "/api/playground/pg-test/v1/chat/completions"


@pytest.fixture
def product(chat_graph, tokens):
    """controlplane.serve --workers 2 on the test database: (port, its process)."""
    with serving(env={"DATABASE_URL": _database_url(), "CONTROLPLANE_VAR_DIR": str(settings.VAR_DIR)}) as served:
        yield served


def holders(port: int) -> dict[int, int]:
    """client port -> pid of the process holding the server side of that connection."""
    out = subprocess.run(["ss", "-Htnp", "state", "established", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    held = {}
    for line in out.splitlines():
        fields = line.split()
        peer = int(fields[3].rsplit(":", 1)[1])
        pid = int(line.split("pid=", 1)[1].split(",", 1)[0])
        held[peer] = pid
    return held


def chat_over(conn: http.client.HTTPConnection, token: str, model: str, *, split: bool = False) -> str:
    """A streamed chat on ``conn``; with ``split`` the body follows the head a moment later (the
    stream worker must read it from the socket itself). The text streamed."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
                       "stream": True, "ignore_eos": True}).encode()
    conn.putrequest("POST", CHAT)
    for name, value in (("Authorization", f"Bearer {token}"), ("Content-Type", "application/json"),
                        ("Content-Length", str(len(body)))):
        conn.putheader(name, value)
    if split:
        conn.endheaders()
        time.sleep(0.3)
        conn.send(body)
    else:
        conn.endheaders(body)
    answer = conn.getresponse()
    assert answer.status == 200, answer.read()[:300]
    text = ""
    for line in answer.read().decode().splitlines():
        if line.startswith("data: {"):
            choices = json.loads(line[6:]).get("choices") or [{}]
            text += choices[0].get("delta", {}).get("content") or ""
    return text


def test_chats_through_the_sdk_are_relayed_by_the_stream_worker_and_pages_by_the_page_workers(
        product, dynamo_graph, tokens):
    port, proc = product
    streams, pages = stream_worker_of(proc), workers_of(proc)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/api/playground/pg-test/v1", api_key=tokens["operator"],
                           max_retries=0, timeout=30)
    assert [m.id for m in client.models.list().data] == [dynamo_graph.model]
    assert set(holders(port).values()) == {streams}  # the SDK keeps that connection
    page = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    page.request("GET", "/healthz")
    assert page.getresponse().read() == b'{"status": "ok"}'
    assert holders(port)[page.sock.getsockname()[1]] in pages
    for _ in range(3):
        # The SDK closes a stream's connection once it has read [DONE] (before the reply's last
        # chunk): each chat comes on a new connection, and each is handed over.
        stream = client.chat.completions.create(
            model=dynamo_graph.model, messages=[{"role": "user", "content": "Hello"}], max_tokens=40, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        chunks = [next(stream)]
        held = holders(port)
        assert held.pop(page.sock.getsockname()[1]) in pages
        assert set(held.values()) == {streams}, (held, streams)
        chunks += list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].usage.completion_tokens == 40
    page.close()
    client.close()


def test_a_kept_alive_connection_is_handed_over_with_the_body_it_has_not_yet_read(product, dynamo_graph, tokens):
    port, proc = product
    streams, pages = stream_worker_of(proc), workers_of(proc)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b'{"status": "ok"}'
    mine = conn.sock.getsockname()[1]
    assert holders(port)[mine] in pages
    assert chat_over(conn, tokens["operator"], dynamo_graph.model, split=True)
    assert holders(port)[mine] == streams
    # The connection lives on in the stream worker, whatever it asks next.
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b'{"status": "ok"}'
    assert chat_over(conn, tokens["operator"], dynamo_graph.model)
    assert conn.sock.getsockname()[1] == mine  # the same connection all along
    conn.close()


def test_a_stream_worker_that_dies_is_replaced_and_the_chats_meanwhile_are_answered(product, dynamo_graph, tokens):
    port, proc = product
    time.sleep(max(0.0, proc.began + serve.EARLY_EXIT_SECONDS + 1 - time.monotonic()))  # past the start-up window
    victim = stream_worker_of(proc)
    os.kill(victim, signal.SIGKILL)
    answered = []
    for _ in range(3):  # while the supervisor starts another: queued for it, or relayed by a page worker
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        answered.append(chat_over(conn, tokens["operator"], dynamo_graph.model))
        conn.close()
    assert all(answered)
    deadline = time.monotonic() + 30
    while stream_worker_of(proc) in (None, victim) and time.monotonic() < deadline:
        time.sleep(0.2)
    replacement = stream_worker_of(proc)
    assert replacement not in (None, victim)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    assert chat_over(conn, tokens["operator"], dynamo_graph.model)
    assert holders(port)[conn.sock.getsockname()[1]] == replacement
    conn.close()


def test_without_the_stream_worker_the_page_workers_relay_the_streams(chat_graph, dynamo_graph, tokens):
    port = free_port()
    proc = start(port, "--workers", "2", "--no-stream-worker",
                 env={"DATABASE_URL": _database_url(), "CONTROLPLANE_VAR_DIR": str(settings.VAR_DIR)})
    try:
        healthy(port)
        assert stream_worker_of(proc) is None
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        assert chat_over(conn, tokens["operator"], dynamo_graph.model)
        assert holders(port)[conn.sock.getsockname()[1]] in workers_of(proc)
        conn.close()
    finally:
        stop(proc)
