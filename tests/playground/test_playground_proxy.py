# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The proxy against a real Dynamo 1.6.1 graph (frontend + mocker prefill and decode workers),
served by uvicorn: the SSE relay is byte for byte and chunk by chunk, the client can time the
reply from arrival times, a client that goes away cancels the frontend's request, stream
limits hold, and stalls end with an error event."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

from tests.playground_fixtures import (  # noqa: F401
    CHAT,
    RecordingRelay,
    _fresh_limits,
    asgi_server,
    chat_body,
    chat_graph,
    dechunk,
    dynamo_graph,
    gauges,
    make_graph,
    read_sse,
    routed_server,
    tokens,
    wait_for,
)
from tests.playground_timing import server_breakdown, summarise

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]


def auth(tokens, role="operator") -> dict:
    return {"Authorization": f"Token {tokens[role]}"}


def shape(event: str) -> object:
    """An event with what differs per request blanked out: ids, timestamps, generated text,
    worker ids and timings (the mocker does not honour ``seed``). Keys and types stay."""
    if event == "[DONE]":
        return event

    def blank(value, key=""):
        if isinstance(value, dict):
            return {k: blank(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [blank(v) for v in value]
        if key in ("id", "created", "content", "prefill_worker_id", "decode_worker_id") or isinstance(value, float):
            return type(value).__name__
        if key == "request_received_ms":
            return "int"
        return value

    return blank(json.loads(event))


def test_a_streamed_reply_is_relayed_byte_for_byte(asgi_server, dynamo_graph, tokens, users):
    """What the frontend sent the proxy (recorded by a TCP relay between them) is exactly
    what the client received."""
    relay = RecordingRelay(dynamo_graph.port).start()
    try:
        make_graph("pg-relay", dynamo_graph.model, f"http://127.0.0.1:{relay.port}", user=users["admin"])
        body = chat_body(dynamo_graph.model, max_tokens=48, ignore_eos=True, seed=1234,
                         nvext={"extra_fields": ["worker_id", "timing"]})
        with httpx.Client(timeout=30) as client:
            reading = read_sse(client, asgi_server.url + CHAT.format(graph="pg-relay"), body,
                               headers=auth(tokens))
        assert reading.status == 200
        head, upstream_body = dechunk(bytes(relay.received))
    finally:
        relay.stop()
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    assert reading.raw == upstream_body
    assert reading.events[-1] == "[DONE]"
    assert reading.headers["content-type"] == "text/event-stream"
    assert reading.headers["cache-control"] == "no-cache"


def test_a_proxied_stream_has_the_shape_and_event_count_of_a_direct_one(asgi_server, dynamo_graph, chat_graph,
                                                                         tokens):
    """The same request (ignore_eos, same seed) directly and through the proxy: the same
    sequence of event shapes. The mocker's random tokens sometimes include partial UTF-8
    byte tokens that the detokenizer merges, so the number of content events may differ by
    a few; every other event must match one for one."""
    body = chat_body(dynamo_graph.model, max_tokens=32, ignore_eos=True, seed=1234,
                     nvext={"extra_fields": ["worker_id", "timing"]})
    with httpx.Client(timeout=30) as client:
        direct = read_sse(client, dynamo_graph.endpoint + "/v1/chat/completions", body)
        proxied = read_sse(client, asgi_server.url + CHAT.format(graph="pg-test"), body, headers=auth(tokens))
    d_events, p_events = [shape(e) for e in direct.events], [shape(e) for e in proxied.events]
    d_usage, p_usage = json.loads(direct.events[-2])["usage"], json.loads(proxied.events[-2])["usage"]
    assert d_usage["completion_tokens"] == p_usage["completion_tokens"] == 32
    assert d_usage["prompt_tokens"] == p_usage["prompt_tokens"]
    # content events + finish + usage + [DONE], on both sides
    assert abs(len(d_events) - len(p_events)) <= 3
    assert d_events[-3:] == p_events[-3:]  # finish chunk (with nvext.timing), usage chunk, [DONE]
    d_content = {json.dumps(e, sort_keys=True) for e in d_events[1:-3]}
    p_content = {json.dumps(e, sort_keys=True) for e in p_events[1:-3]}
    assert d_content == p_content  # every content chunk has one shape, the same on both sides
    assert d_events[0] == p_events[0]  # the first carries the role


def test_the_reply_arrives_chunk_by_chunk_and_is_timed_from_arrival_times(asgi_server, dynamo_graph,
                                                                          chat_graph, tokens):
    body = chat_body(dynamo_graph.model, max_tokens=40, ignore_eos=True,
                     nvext={"extra_fields": ["worker_id", "timing"]})
    with httpx.Client(timeout=30) as client:
        reading = read_sse(client, asgi_server.url + CHAT.format(graph="pg-test"), body, headers=auth(tokens))
    finish = json.loads(reading.events[-3])
    usage = json.loads(reading.events[-2])["usage"]
    server = server_breakdown(finish["nvext"]["timing"])
    arrivals = reading.content_arrivals()
    timing = summarise(0.0, arrivals, usage["completion_tokens"])
    # Not buffered: the reads are spread over the decode, not one burst at the end.
    assert len(reading.reads) >= len(arrivals) // 2
    assert arrivals[-1] - arrivals[0] >= 0.5 * server["decode_ms"]
    # The client's numbers agree with the frontend's own: the first token cannot reach us
    # before the frontend produced it, and the decode rate is the decode workers'.
    assert timing["ttft_ms"] >= server["ttft_ms"] - 1.0
    expected_itl = server["decode_ms"] / (usage["completion_tokens"] - 1)
    assert 0.5 * expected_itl <= timing["itl_mean_ms"] <= 2.0 * expected_itl
    assert timing["tokens_per_s"] == pytest.approx(1000 / timing["itl_mean_ms"] * (usage["completion_tokens"] - 1)
                                                   / (len(arrivals) - 1), rel=0.35)
    assert finish["nvext"]["worker_id"]["prefill_worker_id"] != finish["nvext"]["worker_id"]["decode_worker_id"]
    assert server["queue_ms"] is not None and server["prefill_ms"] > 0


def test_nvext_on_a_streamed_reply_workers_on_every_chunk_timing_only_on_the_finish_chunk(
        asgi_server, dynamo_graph, chat_graph, tokens):
    """How Dynamo 1.6.1 reports nvext when streaming (the UI relies on it)."""
    body = chat_body(dynamo_graph.model, max_tokens=6, nvext={"extra_fields": ["worker_id", "timing"]})
    with httpx.Client(timeout=30) as client:
        reading = read_sse(client, asgi_server.url + CHAT.format(graph="pg-test"), body, headers=auth(tokens))
    chunks = [json.loads(e) for e in reading.events[:-1]]
    *content, finish, usage = chunks
    assert content and all("worker_id" in c["nvext"] and "timing" not in c["nvext"] for c in content)
    assert finish["choices"][0]["finish_reason"] == "length"
    assert set(finish["nvext"]["timing"]) >= {"request_received_ms", "prefill_wait_time_ms", "prefill_time_ms",
                                              "ttft_ms", "total_time_ms", "kv_transfer_estimated_latency_ms"}
    assert "nvext" not in usage and usage["choices"] == []


def test_proxied_responses_carry_server_timing(asgi_server, dynamo_graph, chat_graph, tokens):
    with httpx.Client(timeout=30) as client:
        streamed = client.post(asgi_server.url + CHAT.format(graph="pg-test"), headers=auth(tokens),
                               json=chat_body(dynamo_graph.model, max_tokens=2))
        whole = client.post(asgi_server.url + CHAT.format(graph="pg-test"), headers=auth(tokens),
                            json=chat_body(dynamo_graph.model, max_tokens=2, stream=False))
    for response in (streamed, whole):
        assert response.status_code == 200
        metrics = dict(part.strip().split(";dur=") for part in response.headers["server-timing"].split(","))
        assert float(metrics["proxy"]) >= 0 and float(metrics["upstream"]) > 0
        assert response.headers["x-content-type-options"] == "nosniff"
    assert whole.json()["object"] == "chat.completion"
    assert whole.json()["usage"]["completion_tokens"] == 2


def test_the_model_and_a_max_tokens_bound_are_filled_in_when_missing(asgi_server, dynamo_graph, chat_graph,
                                                                     tokens, settings):
    settings.PLAYGROUND_MAX_TOKENS = 3
    body = {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    with httpx.Client(timeout=30) as client:
        response = client.post(asgi_server.url + CHAT.format(graph="pg-test"), headers=auth(tokens), json=body)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == dynamo_graph.model
    assert response.json()["usage"]["completion_tokens"] == 3


def test_an_error_from_the_frontend_is_relayed_with_its_status_in_openais_shape(asgi_server, dynamo_graph,
                                                                                chat_graph, tokens):
    body = chat_body("no-such-model", max_tokens=2)
    with httpx.Client(timeout=30) as client:
        direct = client.post(dynamo_graph.endpoint + "/v1/chat/completions", json=body)
        response = client.post(asgi_server.url + CHAT.format(graph="pg-test"), headers=auth(tokens), json=body)
    assert direct.status_code == 404 and "error" not in direct.json()  # the 1.6.1 frontend's own shape
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["message"] == direct.json()["message"] == "Model not found"
    assert error["code"] == 404 and error["param"] is None and isinstance(error["type"], str)


def test_a_client_that_goes_away_cancels_the_frontends_request(
        asgi_server, dynamo_graph, chat_graph, tokens):
    _client_goes_away(asgi_server, dynamo_graph, tokens)


def _client_goes_away(asgi_server, dynamo_graph, tokens) -> None:
    assert wait_for(lambda: all(v == 0 for v in gauges(dynamo_graph.endpoint).values()), timeout=5)
    body = chat_body(dynamo_graph.model, max_tokens=2000, ignore_eos=True)
    client = httpx.Client(timeout=30)
    response = client.send(client.build_request("POST", asgi_server.url + CHAT.format(graph="pg-test"),
                                                headers=auth(tokens), json=body), stream=True)
    chunks = response.iter_raw()
    for _ in range(5):
        next(chunks)
    wait_for(lambda: gauges(dynamo_graph.endpoint)["dynamo_frontend_inflight_requests"] == 1, timeout=2)
    response.close()  # mid-body: the connection is closed, not returned to the pool
    client.close()
    # 2,000 tokens at the mocker's pace take over 10 s: done within 5 s means cancelled, not finished.
    # How soon it is cancelled is a figure for bench/, not a rule here.
    wait_for(lambda: all(v == 0 for v in gauges(dynamo_graph.endpoint).values()), timeout=5)


def test_concurrent_streams_are_limited_per_user_with_retry_after(asgi_server, dynamo_graph, chat_graph,
                                                                 tokens, settings):
    settings.PLAYGROUND_MAX_CONCURRENT_STREAMS = 1
    url = asgi_server.url + CHAT.format(graph="pg-test")
    long_body = chat_body(dynamo_graph.model, max_tokens=400, ignore_eos=True)
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", url, headers=auth(tokens), json=long_body) as first:
            assert first.status_code == 200
            chunks = first.iter_raw()  # keep it: a dropped iterator closes the connection
            next(chunks)
            second = client.post(url, headers=auth(tokens), json=chat_body(dynamo_graph.model, max_tokens=2))
            assert second.status_code == 429
            assert second.headers["retry-after"] == "1"
            other_user = client.post(url, headers=auth(tokens, "admin"),
                                     json=chat_body(dynamo_graph.model, max_tokens=2))
            assert other_user.status_code == 200
        # The slot comes back when the stream ends, even if the client left early.
        wait_for(lambda: client.post(url, headers=auth(tokens), json=chat_body(dynamo_graph.model, max_tokens=2)
                                     ).status_code == 200, timeout=2, interval=0.05)


def test_a_stall_mid_stream_ends_with_an_error_event_after_the_idle_timeout(asgi_server, dynamo_graph,
                                                                          chat_graph, tokens, settings):
    """The real frontend, frozen with SIGSTOP mid-stream."""
    settings.PLAYGROUND_IDLE_TIMEOUT = 0.5
    frontend = dynamo_graph.supervisor.status("frontend").pid
    url = asgi_server.url + CHAT.format(graph="pg-test")
    body = chat_body(dynamo_graph.model, max_tokens=2000, ignore_eos=True)
    raw = b""
    with httpx.Client(timeout=10) as client, client.stream("POST", url, headers=auth(tokens), json=body) as response:
        try:
            for chunk in response.iter_raw():
                raw += chunk
                if raw.count(b"\n\n") == 3:
                    os.kill(frontend, signal.SIGSTOP)
                    stopped_at = time.monotonic()
        finally:
            os.kill(frontend, signal.SIGCONT)
        ended = time.monotonic() - stopped_at
    last = raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"data: {")
    error = json.loads(last[6:])["error"]
    assert error["type"] == "upstream_timeout" and error["code"] == 504
    assert ended >= 0.4  # the idle timeout (0.5 s) fired, not the stream's end
    # Every relayed event is whole: the error event stands on its own.
    assert all(block.startswith(b"data: ") for block in raw.strip(b"\n").split(b"\n\n"))
    wait_for(lambda: all(v == 0 for v in gauges(dynamo_graph.endpoint).values()), timeout=5)


def test_a_browser_session_chats_with_its_csrf_token_and_not_without(asgi_server, dynamo_graph, chat_graph, users):
    """Session auth on the streaming path is the view's own (endpoint.asgi runs it without
    the session, auth or CSRF middleware): cookie plus CSRF token, as the page sends them."""
    from django.conf import settings
    from django.test import Client

    from tests.conftest import PASSWORD

    browser = Client()
    assert browser.login(username="operator", password=PASSWORD)
    browser.get("/playground/")
    cookies = {settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value,
               settings.CSRF_COOKIE_NAME: browser.cookies[settings.CSRF_COOKIE_NAME].value}
    url = asgi_server.url + CHAT.format(graph="pg-test")
    body = chat_body(dynamo_graph.model, max_tokens=2)
    with httpx.Client(timeout=30, cookies=cookies) as client:
        refused = client.post(url, json=body)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "csrf_failed"
        forged = client.post(url, json=body, headers={"X-CSRFToken": "x" * 32})
        assert forged.status_code == 403
        accepted = client.post(url, json=body, headers={"X-CSRFToken": cookies[settings.CSRF_COOKIE_NAME]})
        assert accepted.status_code == 200 and accepted.text.endswith("data: [DONE]\n\n")
    with httpx.Client(timeout=30, cookies={settings.SESSION_COOKIE_NAME: "not-a-session"}) as client:
        # A session cookie without the CSRF token is refused before the session is even read.
        assert client.post(url, json=body).status_code == 403
    with httpx.Client(timeout=30) as client:
        assert client.post(url, json=body).status_code == 401


def test_the_products_entry_point_serves_the_endpoint_outside_djangos_middleware(asgi_server, dynamo_graph,
                                                                                  chat_graph, tokens):
    """controlplane.asgi:application (what make up, the Dockerfile and deploy/ run) answers
    these paths itself, with the endpoint's own security headers (answers.HARDENING) either way."""
    with httpx.Client(timeout=30) as client:
        reply = client.post(asgi_server.url + CHAT.format(graph="pg-test"), headers=auth(tokens),
                            json=chat_body(dynamo_graph.model, max_tokens=2))
        page = client.get(asgi_server.url + "/login/")
    assert reply.status_code == 200 and reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["x-frame-options"] == "DENY"
    assert reply.headers["content-security-policy"] == "default-src 'none'; sandbox; frame-ancestors 'none'"
    assert "x-frame-options" in page.headers  # every other page still goes through the middleware


def test_a_steady_callers_admission_is_looked_up_again_in_the_background_and_a_refusal_applies(
        routed_server, users, tokens, settings):
    """Past half its TTL a remembered admission is still served, and looked up again off the
    hot path: a user deactivated meanwhile is refused well before the TTL runs out."""
    from django.contrib.auth.models import User

    from tests.playground_fixtures import free_port, make_graph

    settings.PLAYGROUND_ADMISSION_TTL = 10
    make_graph("pg-down", "m", f"http://127.0.0.1:{free_port()}", user=users["admin"])
    url = routed_server.url + CHAT.format(graph="pg-down")
    with httpx.Client(timeout=10) as client:
        def chat() -> int:
            return client.post(url, headers=auth(tokens), json=chat_body("m")).status_code

        assert chat() == 502  # admitted (looked up); the frontend is down
        started = time.monotonic()
        User.objects.filter(username="operator").update(is_active=False)  # no signal: only a lookup sees it
        assert chat() == 502  # remembered, less than half the TTL old: no lookup
        time.sleep(5.1)
        assert chat() == 502  # still remembered; now looked up again in the background...
        wait_for(lambda: chat() == 401, timeout=3, interval=0.1)  # ...which refuses it
        assert time.monotonic() - started < 10  # before the TTL would have


def test_a_session_request_with_a_host_the_site_does_not_serve_is_refused_not_a_500(routed_server, users):
    """The endpoint runs outside the middleware that vets the Host header; the CSRF check that
    reads it must still answer a clear 4xx."""
    from django.conf import settings
    from django.test import Client

    from tests.conftest import PASSWORD
    from tests.playground_fixtures import free_port, make_graph

    make_graph("pg-down", "m", f"http://127.0.0.1:{free_port()}", user=users["admin"])
    browser = Client()
    assert browser.login(username="operator", password=PASSWORD)
    browser.get("/playground/")
    csrf = browser.cookies[settings.CSRF_COOKIE_NAME].value
    cookies = {settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value,
               settings.CSRF_COOKIE_NAME: csrf}
    with httpx.Client(timeout=10, cookies=cookies) as client:
        reply = client.post(routed_server.url + CHAT.format(graph="pg-down"), json=chat_body("m"),
                            headers={"Host": "evil.example", "X-CSRFToken": csrf, "Origin": "http://evil.example"})
    assert reply.status_code in (400, 403), reply.text
    assert reply.json()["error"]["type"] in ("invalid_host", "csrf_failed")


def test_an_http_1_0_client_gets_a_body_it_can_read_without_chunked_framing(routed_server, dynamo_graph,
                                                                          chat_graph, tokens):
    """HTTP/1.0 has no chunked framing: the reply comes whole, with its length."""
    import socket

    body = json.dumps(chat_body(dynamo_graph.model, max_tokens=8, ignore_eos=True)).encode()
    head = (f"POST {CHAT.format(graph='pg-test')} HTTP/1.0\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Token {tokens['operator']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    raw = b""
    with socket.create_connection(("127.0.0.1", routed_server.port), timeout=30) as sock:
        sock.sendall(head + body)
        while data := sock.recv(65536):
            raw += data
    status_and_headers, _, content = raw.partition(b"\r\n\r\n")
    lines = status_and_headers.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert lines[0].split()[1] == "200", raw[:600]  # a refusal says why in its body
    assert "transfer-encoding" not in headers
    assert int(headers["content-length"]) == len(content)
    assert content.startswith(b"data: {") and content.endswith(b"data: [DONE]\n\n")
    assert sum(1 for e in content.split(b"\n\n") if b'"content"' in e) >= 8
