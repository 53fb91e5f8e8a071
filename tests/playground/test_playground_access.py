# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The playground's proxy endpoint, up to the upstream call: who may chat (session or token,
per role and per-graph policy), CSRF for sessions, request limits (413/400/429), where the
upstream URL comes from, and a frontend that is down. No Dynamo here: a graph "served" on a
closed loopback port shows that a request was admitted (502 from the proxy) without one."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client

from controlplane.environment import cache_from_url
from endpoint import limits
from endpoint.upstream import BadEndpoint, chat_url
from tests.conftest import PASSWORD
from tests.playground_fixtures import CHAT, _fresh_limits, chat_body, free_port, make_graph, tokens  # noqa: F401

URL = CHAT.format(graph="pg-down")


@pytest.fixture
def down_graph(users):
    """A graph whose frontend is down: nothing listens on its port."""
    return make_graph("pg-down", "test-model", f"http://127.0.0.1:{free_port()}", user=users["admin"])


def post(client, body: dict | bytes, url: str = URL, **extra):
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", **extra)


def token_header(tokens, role) -> dict:
    return {"HTTP_AUTHORIZATION": f"Token {tokens[role]}"}


# --- who may chat -------------------------------------------------------------------------------

@pytest.mark.parametrize(("role", "status"), [("operator", 502), ("admin", 502), ("viewer", 403), ("norole", 403)])
def test_operators_and_admins_may_chat_viewers_and_roleless_users_may_not(client_for, down_graph, role, status):
    response = post(client_for(role), chat_body("test-model"))
    assert response.status_code == status, response.content
    assert response.json()["error"]["type"] == ("upstream_unavailable" if status == 502 else "permission_denied")


def test_a_viewer_may_chat_once_an_admin_opens_the_graph_to_viewers(client_for, down_graph):
    viewer = client_for("viewer")
    assert post(viewer, chat_body("test-model")).status_code == 403
    admin = client_for("admin")
    response = admin.post("/playground/policies/", {"graph": "pg-down", "viewers_may_chat": "on"})
    assert response.status_code == 302
    assert post(viewer, chat_body("test-model")).status_code == 502  # admitted; the frontend is down
    admin.post("/playground/policies/", {"graph": "pg-down"})
    assert post(viewer, chat_body("test-model")).status_code == 403


def test_only_admins_may_edit_policies(client_for, down_graph):
    for role in ("viewer", "operator"):
        assert client_for(role).post("/playground/policies/", {"graph": "pg-down", "viewers_may_chat": "on"}
                                     ).status_code == 403
    from endpoint.models import PlaygroundPolicy

    assert not PlaygroundPolicy.objects.exists()


def test_anonymous_callers_get_401(client_for, down_graph):
    response = post(client_for(None), chat_body("test-model"))
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "not_authenticated"


def test_a_token_authenticates_as_token_or_bearer(users, tokens, down_graph):
    client = Client()
    assert post(client, chat_body("test-model"), **token_header(tokens, "operator")).status_code == 502
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {tokens['operator']}"}  # what OpenAI's clients send
    assert post(client, chat_body("test-model"), **bearer).status_code == 502
    assert post(client, chat_body("test-model"), **token_header(tokens, "viewer")).status_code == 403


def test_a_bad_token_is_refused_even_with_a_valid_session(client_for, down_graph):
    response = post(client_for("operator"), chat_body("test-model"), HTTP_AUTHORIZATION="Token nope")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "invalid_token"


def test_a_session_post_needs_the_csrf_token_and_a_token_post_does_not(users, tokens, down_graph):
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="operator", password=PASSWORD)
    client.get("/playground/")  # sets the CSRF cookie
    response = post(client, chat_body("test-model"))
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "csrf_failed"
    csrf = client.cookies["csrftoken"].value
    assert post(client, chat_body("test-model"), HTTP_X_CSRFTOKEN=csrf).status_code == 502
    api = Client(enforce_csrf_checks=True)
    assert post(api, chat_body("test-model"), **token_header(tokens, "operator")).status_code == 502


# --- where the upstream URL comes from ----------------------------------------------------------

@pytest.mark.parametrize("endpoint", ["file:///etc/passwd", "ftp://127.0.0.1:21", "gopher://x", "127.0.0.1:8000",
                                      "http://user:pw@127.0.0.1:8000", "http://127.0.0.1:8000/?x=1",
                                      "http://", "http://127.0.0.1:99999"])
def test_anything_but_a_plain_http_url_is_refused_as_an_endpoint(endpoint):
    with pytest.raises(BadEndpoint):
        chat_url(endpoint)


def test_the_chat_url_keeps_a_path_prefix_and_ipv6_hosts():
    assert chat_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1/chat/completions"
    assert chat_url("https://fe.example.test/prefix/") == "https://fe.example.test/prefix/v1/chat/completions"
    assert chat_url("http://[::1]:8000") == "http://[::1]:8000/v1/chat/completions"


def test_a_graph_with_a_non_http_endpoint_answers_502_and_calls_nothing(client_for, users):
    make_graph("pg-file", "test-model", "file:///etc/passwd", user=users["admin"])
    response = post(client_for("operator"), chat_body("test-model"), url=CHAT.format(graph="pg-file"))
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "bad_endpoint"


def test_the_request_cannot_choose_the_upstream(client_for, down_graph):
    """Hosts, URLs or headers in the request change nothing: the graph's endpoint is down, so
    any answer but 502 would mean the proxy went somewhere else."""
    body = chat_body("test-model", base_url="http://127.0.0.1:1/", endpoint="http://127.0.0.1:1/")
    response = post(client_for("operator"), body, HTTP_X_FORWARDED_HOST="evil.example.test",
                    HTTP_X_UPSTREAM="http://127.0.0.1:1/")
    assert response.status_code == 502


@pytest.mark.parametrize(("state", "active", "endpoint", "status"), [
    ("failed", True, "http://127.0.0.1:9", 503), ("deleting", True, "http://127.0.0.1:9", 503),
    ("ready", False, "http://127.0.0.1:9", 503), ("ready", True, "", 503)])
def test_a_graph_that_is_not_serving_answers_503(client_for, users, state, active, endpoint, status):
    make_graph("pg-off", "test-model", endpoint, user=users["admin"], state=state, active=active)
    response = post(client_for("operator"), chat_body("test-model"), url=CHAT.format(graph="pg-off"))
    assert response.status_code == status
    assert response.json()["error"]["type"] == "graph_not_serving"


def test_an_unknown_graph_answers_404(client_for, users):
    assert post(client_for("operator"), chat_body("m"), url=CHAT.format(graph="nope")).status_code == 404


def test_only_post_is_allowed(client_for, down_graph):
    response = client_for("operator").get(URL)
    assert response.status_code == 405
    assert response["Allow"] == "POST"


# --- limits -------------------------------------------------------------------------------------

def test_a_request_larger_than_the_limit_answers_413(client_for, down_graph, settings):
    settings.PLAYGROUND_MAX_PROMPT_BYTES = 2000
    body = chat_body("test-model")
    body["messages"][0]["content"] = "x" * 2100
    response = post(client_for("operator"), body)
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"
    body["messages"][0]["content"] = "x" * 100
    assert post(client_for("operator"), body).status_code == 502


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_above_the_limit_answers_400(client_for, down_graph, settings, field):
    settings.PLAYGROUND_MAX_TOKENS = 512
    body = chat_body("test-model")
    body.pop("max_tokens")
    body[field] = 513
    response = post(client_for("operator"), body)
    assert response.status_code == 400
    assert "at most 512" in response.json()["error"]["message"]


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"messages": []}', b'{"messages": "hi"}',
                                  b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
                                  b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}'])
def test_malformed_requests_answer_400(client_for, down_graph, body):
    response = post(client_for("operator"), body)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_the_request_rate_is_limited_per_user_with_retry_after(client_for, down_graph, settings):
    settings.PLAYGROUND_RATE_PER_MINUTE = 2
    operator, admin = client_for("operator"), client_for("admin")
    assert [post(operator, chat_body("test-model")).status_code for _ in range(2)] == [502, 502]
    response = post(operator, chat_body("test-model"))
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert response.json()["error"]["type"] == "rate_limited"
    assert post(admin, chat_body("test-model")).status_code == 502  # another user's budget


def test_a_refused_or_failed_request_gives_its_stream_slot_back(client_for, users, down_graph, settings):
    settings.PLAYGROUND_MAX_CONCURRENT_STREAMS = 1
    operator = client_for("operator")
    for _ in range(3):
        assert post(operator, chat_body("test-model")).status_code == 502
    assert limits.open_streams(users["operator"].pk) == 0


def test_stream_slots_are_counted_per_user(settings):
    settings.PLAYGROUND_MAX_CONCURRENT_STREAMS = 2
    assert limits.acquire(1) is None
    assert limits.acquire(1) is None
    refusal = limits.acquire(1)
    assert refusal is not None and refusal.retry_after == 1
    assert limits.acquire(2) is None
    limits.release(1)
    assert limits.acquire(1) is None
    assert limits.open_streams(1) == 2


def test_the_rate_window_says_when_it_reopens(settings):
    settings.PLAYGROUND_RATE_PER_MINUTE = 1
    now = 120 * 60 + 45.2  # 45.2 s into a window
    assert limits.acquire(7, now=now) is None
    limits.release(7)
    refusal = limits.acquire(7, now=now + 1)
    assert refusal is not None and refusal.retry_after == 14


# --- a frontend that is down --------------------------------------------------------------------

def test_a_frontend_that_is_down_answers_a_clear_error(client_for, down_graph):
    response = post(client_for("operator"), chat_body("test-model"))
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "upstream_unavailable"
    assert "not reachable" in response.json()["error"]["message"]


# --- remembered admissions ----------------------------------------------------------------------

def test_a_remembered_admission_costs_no_query_until_its_ttl_runs_out(users, tokens, down_graph, settings,
                                                                      django_assert_num_queries):
    settings.PLAYGROUND_ADMISSION_TTL = 0.3
    client = Client()
    header = token_header(tokens, "operator")
    assert post(client, chat_body("test-model"), **header).status_code == 502  # looked up
    with django_assert_num_queries(0):
        assert post(client, chat_body("test-model"), **header).status_code == 502
    from django.contrib.auth.models import User

    from accounts.tokens import token_revoke, tokens_of

    User.objects.filter(username="operator").update(is_active=False)
    # Within the TTL a deactivated user's token still admits (the documented trade-off)...
    assert post(client, chat_body("test-model"), **header).status_code == 502
    time.sleep(0.35)
    # ...and not after it.
    assert post(client, chat_body("test-model"), **header).status_code == 401
    User.objects.filter(username="operator").update(is_active=True)
    assert post(client, chat_body("test-model"), **header).status_code == 502  # remembered again
    # A revoked token stops admitting at once, TTL or not.
    token_revoke(token=tokens_of(users["operator"]).get())
    assert post(client, chat_body("test-model"), **header).status_code == 401


def test_with_a_ttl_of_zero_every_request_is_looked_up(tokens, down_graph, settings, django_assert_max_num_queries):
    settings.PLAYGROUND_ADMISSION_TTL = 0
    client = Client()
    for _ in range(2):
        with django_assert_max_num_queries(10) as captured:
            assert post(client, chat_body("test-model"), **token_header(tokens, "operator")).status_code == 502
        assert len(captured) >= 2


def test_csrf_is_checked_on_every_session_request_even_when_remembered(users, down_graph):
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="operator", password=PASSWORD)
    client.get("/playground/")
    csrf = client.cookies["csrftoken"].value
    assert post(client, chat_body("test-model"), HTTP_X_CSRFTOKEN=csrf).status_code == 502  # remembered now
    assert post(client, chat_body("test-model")).status_code == 403
    assert post(client, chat_body("test-model"), HTTP_X_CSRFTOKEN="y" * 32).status_code == 403


def test_a_remembered_admission_is_per_credential_and_graph(client_for, users, down_graph):
    make_graph("pg-down-2", "test-model", f"http://127.0.0.1:{free_port()}", user=users["admin"])
    assert post(client_for("operator"), chat_body("m")).status_code == 502
    assert post(client_for("viewer"), chat_body("m")).status_code == 403
    assert post(client_for("viewer"), chat_body("m"), url=CHAT.format(graph="pg-down-2")).status_code == 403


# --- limits an admin sets per user or per token -------------------------------------------------

def test_an_admin_sets_a_users_rate_through_the_admin_and_it_applies_to_that_user_only(
        client_for, users, tokens, down_graph, settings):
    settings.PLAYGROUND_RATE_PER_MINUTE = 100
    admin = client_for("admin")
    response = admin.post("/playground/limits/", {
        "user": "operator", "token": "", "requests_per_minute": "1", "concurrent_streams": ""})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert "operator" in admin.get("/playground/limits/").content.decode()
    from audit.models import AuditRecord

    assert AuditRecord.objects.filter(action="playground.api_limit", target="operator").exists()
    operator = Client()
    header = token_header(tokens, "operator")
    assert post(operator, chat_body("test-model"), **header).status_code == 502
    refused = post(operator, chat_body("test-model"), **header)
    assert refused.status_code == 429
    assert refused.json()["error"]["message"] == "more than 1 requests in a minute for this user"
    assert post(client_for("operator"), chat_body("test-model")).status_code == 429  # the session too
    assert post(Client(), chat_body("test-model"), **token_header(tokens, "admin")).status_code == 502


def test_a_token_limit_applies_to_that_token_and_is_counted_apart_from_the_user(users, tokens, down_graph,
                                                                                settings):
    from endpoint.admission import token_id
    from endpoint.services import api_limit_set

    settings.PLAYGROUND_RATE_PER_MINUTE = 100
    api_limit_set(user=users["operator"], token_id=token_id(tokens["operator"]), token_label="script",
                  requests_per_minute=2, concurrent_streams=None, by=users["admin"])
    api_limit_set(user=users["operator"], requests_per_minute=1, concurrent_streams=None, by=users["admin"])
    header = token_header(tokens, "operator")
    assert [post(Client(), chat_body("test-model"), **header).status_code for _ in range(3)] == [502, 502, 429]
    from django.test import Client as SessionClient

    session = SessionClient()
    assert session.login(username="operator", password=PASSWORD)
    # The session falls under the user's own row (1 a minute), not under the token's.
    assert [post(session, chat_body("test-model")).status_code for _ in range(2)] == [502, 429]


def test_a_zero_stream_limit_refuses_and_a_changed_limit_applies_at_once(users, tokens, down_graph, settings):
    from endpoint.services import api_limit_set

    settings.PLAYGROUND_ADMISSION_TTL = 60  # remembered admissions must not keep the old limit
    header = token_header(tokens, "operator")
    assert post(Client(), chat_body("test-model"), **header).status_code == 502
    api_limit_set(user=users["operator"], requests_per_minute=None, concurrent_streams=0, by=users["admin"])
    refused = post(Client(), chat_body("test-model"), **header)
    assert refused.status_code == 429 and "0 streams are already open" in refused.json()["error"]["message"]


def test_a_limit_must_be_a_whole_number_and_the_admin_form_checks_the_tokens_owner(client_for, users, tokens):
    from endpoint.admission import token_id
    from endpoint.models import ApiLimit
    from endpoint.services import api_limit_set

    with pytest.raises(ValueError, match="requests_per_minute must be a whole number"):
        api_limit_set(user=users["operator"], requests_per_minute=-1, concurrent_streams=None)
    response = client_for("admin").post("/playground/limits/", {
        "user": "operator", "token": token_id(tokens["viewer"]), "requests_per_minute": "5",
        "concurrent_streams": ""})
    assert response.status_code == 400
    assert "this token is not one of operator" in response.content.decode()
    response = client_for("admin").post("/playground/limits/", {"user": "operator", "requests_per_minute": "-3"})
    assert response.status_code == 400
    assert not ApiLimit.objects.exists()
    for role in ("operator", "viewer"):
        assert client_for(role).post("/playground/limits/", {"user": "operator", "requests_per_minute": "9"}
                                     ).status_code == 403
    assert not ApiLimit.objects.exists()
    api_limit_set(user=users["operator"], requests_per_minute=3, concurrent_streams=None)
    limit = ApiLimit.objects.get()
    assert client_for("admin").post("/playground/limits/", {"delete": limit.pk}).status_code == 302
    assert not ApiLimit.objects.exists()


def test_the_entry_points_lifespan_closes_the_pooled_upstream_connections_at_shutdown():
    import asyncio

    from controlplane.asgi import application
    from endpoint import upstream

    async def run() -> list[str]:
        inbox: asyncio.Queue = asyncio.Queue()
        sent: list[str] = []

        async def send(message):
            sent.append(message["type"])

        upstream.session()  # a pooled session of this loop, as after a first chat
        for kind in ("lifespan.startup", "lifespan.shutdown"):
            inbox.put_nowait({"type": kind})
        await application({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, send)
        assert upstream._session is None
        return sent

    assert asyncio.run(run()) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def test_with_a_shared_file_cache_the_limits_hold_exactly_at_their_edge(users, tokens, down_graph, settings,
                                                                        tmp_path):
    """The cache of several web workers on one host (a file cache): far from a limit a request
    is counted off the hot path, near it in line, and the limit holds to the request."""
    from endpoint import counting
    from endpoint.services import api_limit_set

    settings.CACHES = {"default": cache_from_url(f"file://{tmp_path / 'cache'}")}
    counting.reset()
    api_limit_set(user=users["operator"], requests_per_minute=10, concurrent_streams=None)
    header = token_header(tokens, "operator")
    if time.time() % 60 > 50:  # the eleven requests must fall in one rate window
        time.sleep(60.5 - time.time() % 60)
    statuses = [post(Client(), chat_body("test-model"), **header).status_code for _ in range(11)]
    assert statuses == [502] * 10 + [429]
    counting.flush()  # what the background thread writes every FLUSH_SECONDS
    assert limits.open_streams(f"u:{users['operator'].pk}") == 0  # every slot given back, none leaked
    assert counting._seen[f"u:{users['operator'].pk}"].requests >= 10
