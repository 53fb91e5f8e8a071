"""A dependency that is down is a 503 that says what is down, with Retry-After, never a 500:
for pages (whose middleware and views both reach the database) and for the API. The
database here is really unreachable: the connection settings point at a port nobody
listens on, and the connection is refused by the operating system."""

from __future__ import annotations

import socket

import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from accounts.tokens import token_create
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free once closed: nothing listens there


@pytest.fixture
def database_down():
    """Cut this process off from the database until the test ends."""
    saved = dict(connection.settings_dict)

    def reset():
        connection.close()
        if connection.vendor == "postgresql":
            connection.close_pool()

    def down():
        reset()
        if connection.vendor == "postgresql":
            connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
        else:
            connection.settings_dict["NAME"] = "/nonexistent/dir/db.sqlite3"

    yield down
    reset()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


def test_a_page_answers_503_saying_the_database_is_down(users, database_down):
    client = Client(raise_request_exception=False)
    client.force_login(users["viewer"])
    database_down()
    response = client.get("/graphs/")
    assert response.status_code == 503
    assert response["Retry-After"].isdigit()
    assert "The database is unavailable" in response.content.decode()


def test_the_api_answers_503_json_saying_the_database_is_down(users, database_down):
    key = token_create(user=users["viewer"], name="t", via="system")[1]
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/graphs/").status_code == 200
    database_down()
    response = api.get("/api/graphs/")
    assert response.status_code == 503, response.content
    assert response["Retry-After"].isdigit()
    assert response.json()["unavailable"] == "the database"


def test_the_login_page_answers_503_when_the_database_is_down(database_down):
    client = Client(raise_request_exception=False)
    database_down()
    response = client.post("/login/", {"username": "someone", "password": "x"})
    assert response.status_code == 503
    assert "unavailable" in response.content.decode()


def test_a_chat_admission_with_the_database_down_is_a_503_and_recovers_after(users, database_down):
    from endpoint import gateway
    from endpoint.access import ChatRefused

    key = token_create(user=users["operator"], name="chat", via="system")[1]
    lookup = gateway._lookup(type("Call", (), {"graph": "nosuch"})(), f"Token {key}")
    with pytest.raises(ChatRefused) as refused:
        lookup()  # the token is good, the graph is not: a 404-kind refusal from a working database
    assert refused.value.status != 503
    saved = dict(connection.settings_dict)
    database_down()
    with pytest.raises(ChatRefused) as refused:
        lookup()
    assert refused.value.status == 503
    connection.settings_dict.update(saved)
    if connection.vendor == "postgresql":
        connection.close_pool()
    with pytest.raises(ChatRefused) as refused:
        lookup()  # the broken connection was not kept: the next lookup reaches the database again
    assert refused.value.status != 503


def test_a_full_disk_is_a_503_saying_so_not_a_500(users, monkeypatch):
    """bench/faults.py filled var/ under a saved conversation: the error the disk gave (ENOSPC)
    is the dependency's, so the answer is a 503 naming it, with Retry-After."""
    import errno

    from playground import services

    def full(**kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")


    factories.graph("full", model="m", backend="mocker")
    monkeypatch.setattr(services, "conversation_save", full)
    client = Client(raise_request_exception=False)
    client.force_login(users["admin"])
    response = client.post("/playground/conversations/new/", {"graph": "full", "title": "t"},
                           content_type="application/json")
    assert response.status_code == 503, response.content[:300]
    assert response["Retry-After"].isdigit()
    assert "var/ folder" in response.content.decode()
