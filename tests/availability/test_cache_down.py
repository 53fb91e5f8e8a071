# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The cache (Redis, which holds the playground's and the gateways' counters in production) down,
for real: a redis-server of the test's own, stopped (refused) or paused with SIGSTOP (it accepts
and never answers). The gateway authorizer never answers 2xx then, and neither it nor the relay
answers a bare 500 or hangs: a 503 that names the cache, with Retry-After, within the cache's
timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import httpx
import pytest

import availability as unavailable
from controlplane.environment import cache_from_url
from endpoint import authorize
from tests.playground_fixtures import (  # noqa: F401
    _fresh_limits,
    chat_body,
    free_port,
    make_graph,
    routed_server,
    tokens,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True)]
TIMEOUT = 0.5  # CACHE_TIMEOUT for these tests: a paused Redis is down after this long


@pytest.fixture
def redis_cache(tmp_path, settings, monkeypatch):
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    wait_for(lambda: _pings(redis, port), timeout=20)
    monkeypatch.setenv("CACHE_TIMEOUT", str(TIMEOUT))
    before = settings.CACHES
    settings.CACHES = {"default": cache_from_url(f"redis://127.0.0.1:{port}/0")}
    assert settings.CACHES["default"]["OPTIONS"]["socket_timeout"] == TIMEOUT
    yield proc
    settings.CACHES = before  # before the other fixtures' teardown clears "the" cache
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(10)


def _pings(redis, port: int) -> bool:
    try:
        return redis.Redis(port=port, socket_timeout=1).ping()
    except redis.exceptions.ConnectionError:
        return False


def _down(proc, how: str) -> None:
    if how == "paused":
        os.kill(proc.pid, signal.SIGSTOP)
    else:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize("how", ["stopped", "paused"])
def test_the_authorizer_refuses_with_503_when_the_counters_cache_is_down(redis_cache, users, tokens, how):
    make_graph("cd-a", "m", "http://127.0.0.1:9", user=users["admin"])
    headers = {"authorization": f"Bearer {tokens['operator']}"}
    assert asyncio.run(authorize.authorize("cd-a", headers)).status == 200  # up: allowed, counted in Redis
    _down(redis_cache, how)
    from endpoint import counting

    counting.reset()  # this process's view of the counts: with it gone, the next request counts in line
    started = time.monotonic()
    reply = asyncio.run(authorize.authorize("cd-a", headers))
    took = time.monotonic() - started
    assert reply.status == 503
    headers_out = dict(reply.headers)
    assert headers_out["x-auth-status"] == "503" and headers_out["retry-after"] == str(unavailable.RETRY_AFTER_SECONDS)
    assert "the cache (Redis) is unavailable" in reply.body.decode()
    assert took < 10 * TIMEOUT + 5  # bounded by the cache's timeout, not by how long Redis stays paused


@pytest.mark.parametrize("how", ["stopped", "paused"])
def test_the_relay_answers_503_naming_the_cache_never_a_bare_500(redis_cache, routed_server, users, tokens, how):
    make_graph("cd-b", "m", "http://127.0.0.1:9", user=users["admin"])
    _down(redis_cache, how)
    with httpx.Client(timeout=30) as client:
        reply = client.post(f"{routed_server.url}/api/playground/cd-b/v1/chat/completions", json=chat_body("m"),
                            headers={"Authorization": f"Bearer {tokens['operator']}"})
    assert reply.status_code == 503, reply.text
    assert reply.headers["retry-after"] == str(unavailable.RETRY_AFTER_SECONDS)
    error = reply.json()["error"]
    assert error["type"] == "service_unavailable" and "the cache (Redis) is unavailable" in error["message"]


def test_a_cache_error_anywhere_else_is_a_503_page_or_json(redis_cache, settings, client_for):
    """The 500 handler's rule (controlplane/unavailable.py): a Redis error is a dependency down."""
    import redis

    assert unavailable.dependency_down(redis.exceptions.ConnectionError("refused")) == "the cache (Redis)"
    assert unavailable.dependency_down(redis.exceptions.TimeoutError("timed out")) == "the cache (Redis)"
    assert unavailable.dependency_down(redis.exceptions.ResponseError("WRONGTYPE")) is None  # a bug, not an outage


@pytest.mark.parametrize("where", ["admission", "counting"])
@pytest.mark.parametrize("error", ["bug", "database"])
def test_the_authorizer_never_answers_2xx_when_anything_behind_it_raises(users, tokens, monkeypatch, where, error):
    """Whatever raises behind the authorizer (a bug, the database gone), it refuses."""
    from django.db import OperationalError

    from endpoint import counting, gateway

    make_graph("cd-c", "m", "http://127.0.0.1:9", user=users["admin"])
    headers = {"authorization": f"Bearer {tokens['operator']}"}

    async def fail(*args, **kwargs):
        raise RuntimeError("a bug") if error == "bug" else OperationalError("server closed the connection")

    monkeypatch.setattr(gateway if where == "admission" else counting, "admit" if where == "admission"
                        else "acquire", fail)
    reply = asyncio.run(authorize.authorize("cd-c", headers))
    assert reply.status == 503 and dict(reply.headers)["x-auth-status"] == "503"
    if error == "database":
        assert "the database is unavailable" in reply.body.decode()
    assert asyncio.run(authorize.authorize("cd-c", {})).status == 401
    # a key that is not one: refused (401 once checked, 503 while it cannot be), never 2xx
    assert asyncio.run(authorize.authorize("cd-c", {"authorization": "Bearer nope"})).status == \
        (503 if where == "admission" else 401)
