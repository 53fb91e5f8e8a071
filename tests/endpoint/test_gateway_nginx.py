# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The gateway path for real: Debian's nginx (scripts/services.sh nginx) with
deploy/gateway/nginx.conf in front of a real Dynamo frontend, asking the control plane
(controlplane.asgi under uvicorn) about every request with auth_request. And the authorization
endpoint itself, as Envoy's ext_authz would call it."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.gateway_fixtures import NginxGateway
from tests.playground_fixtures import (  # noqa: F401
    RecordingRelay,
    _fresh_limits,
    chat_body,
    dechunk,
    dynamo_graph,
    free_port,
    make_graph,
    read_sse,
    routed_server,
    tokens,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True)]
AUTHORIZE = "/api/gateway/authorize/{graph}/v1/chat/completions"


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
    return error


def authorizations(server) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    from telemetry import instruments

    instruments.flush()
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return {(s.labels["key"], s.labels["outcome"]): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "controlplane_gateway_authorizations_total"}


# --- the endpoint, as Envoy ext_authz calls it (its status and body reach the client) ----------

def test_the_authorization_endpoint_answers_from_keys_roles_and_limits(routed_server, users, tokens, settings):
    from accounts.models import ApiToken
    from endpoint.admission import token_id
    from endpoint.services import api_limit_set

    make_graph("gw-a", "model-a", "http://127.0.0.1:9", user=users["admin"])
    url = routed_server.url + AUTHORIZE.format(graph="gw-a")
    before = authorizations(routed_server)
    allowed = httpx.post(url, headers=bearer(tokens["operator"]))
    assert allowed.status_code == 200 and allowed.headers["x-auth-status"] == "200"
    assert allowed.headers["x-auth-user"] == str(users["operator"].pk)
    assert openai_error(httpx.get(url, headers=bearer("not-a-key")), 401)["type"] == "invalid_token"
    assert openai_error(httpx.get(url), 401)["type"] == "not_authenticated"
    assert openai_error(httpx.get(url, headers=bearer(tokens["viewer"])), 403)["type"] == "permission_denied"
    missing = httpx.get(routed_server.url + AUTHORIZE.format(graph="no-such"), headers=bearer(tokens["operator"]))
    assert "no graph named 'no-such'" in openai_error(missing, 404)["message"]

    api_limit_set(user=users["admin"], requests_per_minute=2, concurrent_streams=None)
    if time.time() % 60 > 55:  # the three requests must fall in one rate window
        time.sleep(60.5 - time.time() % 60)
    answers = [httpx.get(url, headers=bearer(tokens["admin"])) for _ in range(3)]
    assert [a.status_code for a in answers[:2]] == [200, 200]
    error = openai_error(answers[2], 429)
    assert error["type"] == "rate_limited" and "more than 2 requests in a minute" in error["message"]
    assert 1 <= int(answers[2].headers["retry-after"]) <= 60
    # For nginx, which cannot pass a 429 of its subrequest on: the same answer in two headers.
    assert answers[2].headers["x-auth-status"] == "429"
    assert json.loads(answers[2].headers["x-auth-error"]) == answers[2].json()

    after = authorizations(routed_server)
    admin_key = token_id(tokens["admin"])
    assert ApiToken.objects.filter(token_key=admin_key).exists()

    def grew(key, outcome):
        return after.get((key, outcome), 0) - before.get((key, outcome), 0)

    assert grew(admin_key, "allow") == 2 and grew(admin_key, "rate_limited") == 1
    assert grew(token_id(tokens["operator"]), "allow") == 1
    assert grew(token_id(tokens["viewer"]), "forbidden") == 1
    assert grew("unknown", "unauthenticated") == 2  # a random key never becomes a series of its own


# --- nginx auth_request in front of a real frontend ----------------------------------------------

@pytest.fixture
def gateway(routed_server, dynamo_graph, users):
    """nginx before a recording relay before the session's real frontend, for graph gw-test."""
    relay = RecordingRelay(dynamo_graph.port).start()
    make_graph("gw-test", dynamo_graph.model, dynamo_graph.endpoint, user=users["admin"])
    nginx = NginxGateway(frontend=f"127.0.0.1:{relay.port}", controlplane=f"127.0.0.1:{routed_server.port}",
                         graph="gw-test").start()
    yield nginx, relay
    nginx.stop()
    relay.stop()


@pytest.mark.dynamo
def test_through_nginx_a_valid_key_streams_byte_for_byte(gateway, dynamo_graph, tokens):
    nginx, relay = gateway
    body = chat_body(dynamo_graph.model, max_tokens=32, ignore_eos=True)
    with httpx.Client(timeout=30) as client:
        reading = read_sse(client, nginx.url + "/v1/chat/completions", body, headers=bearer(tokens["operator"]))
    assert reading.status == 200, reading.raw
    _head, upstream_body = dechunk(bytes(relay.received))
    assert reading.raw == upstream_body  # what the frontend sent nginx is what the client got
    assert reading.events[-1] == "[DONE]"
    assert len(reading.content_arrivals()) == 32


@pytest.mark.dynamo
def test_through_nginx_a_revoked_key_is_refused_within_the_admission_ttl(gateway, dynamo_graph, users, tokens,
                                                                        settings):
    from accounts.models import ApiToken
    from accounts.tokens import token_revoke
    from endpoint.admission import token_id

    settings.PLAYGROUND_ADMISSION_TTL = 1.0
    nginx, _relay = gateway
    url = nginx.url + "/v1/chat/completions"
    body = chat_body(dynamo_graph.model, max_tokens=2, stream=False)
    assert httpx.post(url, json=body, headers=bearer(tokens["operator"]), timeout=30).status_code == 200
    token_revoke(token=ApiToken.objects.get(token_key=token_id(tokens["operator"])))
    refused, _ = wait_for(lambda: (r := httpx.post(url, json=body, headers=bearer(tokens["operator"]), timeout=30)
                                   ).status_code == 401 and r, timeout=settings.PLAYGROUND_ADMISSION_TTL + 2,
                          interval=0.1)
    assert openai_error(refused, 401)["type"] == "invalid_token"
    assert openai_error(httpx.post(url, json=body, timeout=30), 401)["type"] == "not_authenticated"


@pytest.mark.dynamo
def test_through_nginx_a_key_over_its_limit_gets_429_in_openais_shape(gateway, dynamo_graph, users, tokens):
    from endpoint.services import api_limit_set

    nginx, _relay = gateway
    api_limit_set(user=users["operator"], requests_per_minute=2, concurrent_streams=None)
    url = nginx.url + "/v1/chat/completions"
    body = chat_body(dynamo_graph.model, max_tokens=2, stream=False)
    if time.time() % 60 > 55:
        time.sleep(60.5 - time.time() % 60)
    answers = [httpx.post(url, json=body, headers=bearer(tokens["operator"]), timeout=30) for _ in range(3)]
    assert [a.status_code for a in answers[:2]] == [200, 200]
    error = openai_error(answers[2], 429)
    assert error["type"] == "rate_limited" and "more than 2 requests in a minute" in error["message"]
    assert 1 <= int(answers[2].headers["retry-after"]) <= 60
    # The official SDK raises its own exception with the message intact.
    import openai

    client = openai.OpenAI(base_url=nginx.url + "/v1", api_key=tokens["operator"], max_retries=0)
    with pytest.raises(openai.RateLimitError, match="more than 2 requests in a minute"):
        client.chat.completions.create(model=dynamo_graph.model, messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=2)


@pytest.mark.dynamo
def test_through_nginx_the_control_plane_down_means_503_never_an_open_door(dynamo_graph, tokens, users):
    nginx = NginxGateway(frontend=f"127.0.0.1:{dynamo_graph.port}", controlplane=f"127.0.0.1:{free_port()}",
                         graph="gw-test").start()
    try:
        for headers in (bearer(tokens["operator"]), {}):
            response = httpx.post(nginx.url + "/v1/chat/completions", headers=headers, timeout=30,
                                  json=chat_body(dynamo_graph.model, max_tokens=2, stream=False))
            assert openai_error(response, 503)["type"] == "authorization_unavailable"
    finally:
        nginx.stop()
