"""API tokens: hashed, expiring, named per user, listed and revoked from a page and the API,
minted by `manage.py create_token`; every creation, revocation, login, failed login and role
change is in the audit log. The header stays `Authorization: Token <key>`."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core import serializers
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.tokens import authenticate_key, token_create
from audit.models import AuditRecord
from tests.conftest import PASSWORD


def with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_a_token_is_stored_only_as_a_digest(users):
    token, key = token_create(user=users["operator"], name="ci")
    assert len(key) == 64
    dump = "".join(serializers.serialize("json", m.objects.all()) for m in (ApiToken, AuditRecord))
    assert key not in dump
    assert token.digest != key and len(token.digest) == 128
    assert with_key(key).get("/api/graphs/").status_code == 200


def test_the_api_creates_lists_and_revokes_the_callers_own_tokens(users):
    _first, key = token_create(user=users["viewer"], name="laptop")
    api = with_key(key)
    created = api.post("/api/tokens/", {"name": "ci", "days": 7}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert body["name"] == "ci" and len(body["key"]) == 64 and body["prefix"] == body["key"][:8]
    assert timezone.now() + timedelta(days=6) < timezone.datetime.fromisoformat(body["expiry"])
    listing = api.get("/api/tokens/").json()["results"]
    assert {t["name"] for t in listing} == {"laptop", "ci"}
    assert all("key" not in t for t in listing)
    assert api.delete(f"/api/tokens/{body['prefix']}/").status_code == 204
    assert with_key(body["key"]).get("/api/graphs/").status_code == 401
    # Another user's tokens are not yours to see or revoke.
    _other, other_key = token_create(user=users["operator"], name="theirs")
    assert api.delete(f"/api/tokens/{other_key[:8]}/").status_code == 404
    assert "theirs" not in str(api.get("/api/tokens/").json())
    assert with_key(other_key).get("/api/graphs/").status_code == 200


def test_the_page_shows_a_new_key_once_and_revokes(client_for, users):
    client = client_for("operator")
    page = client.post("/account/tokens/", {"name": "script", "days": 30})
    assert page.status_code == 200
    token = ApiToken.objects.get(user=users["operator"], name="script")
    text = page.content.decode()
    key = text.split('<pre class="yaml" id="new-token">')[1].split("</pre>")[0]
    assert authenticate_key(key) == users["operator"]
    again = client.get("/account/tokens/").content.decode()
    assert key not in again and token.prefix in again
    response = client.post(f"/account/tokens/{token.prefix}/revoke/", {"name": "script"})
    assert response.status_code == 302
    assert authenticate_key(key) is None


@pytest.mark.parametrize(("data", "field"), [
    ({"name": "", "days": 30}, "name"), ({"name": "x" * 101, "days": 30}, "name"),
    ({"name": "ok", "days": 0}, "days"), ({"name": "ok", "days": 10**30}, "days"),
    ({"name": "ok", "days": "ninety"}, "days"),
])
def test_bad_token_requests_are_400_naming_the_field_and_create_nothing(client_for, api_for, users, data, field):
    api = api_for("viewer")  # its own token exists from here on
    before = ApiToken.objects.count()
    response = api.post("/api/tokens/", data, format="json")
    assert response.status_code == 400 and field in response.json()
    page = client_for("viewer").post("/account/tokens/", data)
    assert page.status_code == 400
    assert ApiToken.objects.count() == before


def test_a_token_name_is_unique_per_user(api_for, users):
    api = api_for("viewer")
    assert api.post("/api/tokens/", {"name": "dup"}, format="json").status_code == 201
    response = api.post("/api/tokens/", {"name": "dup"}, format="json")
    assert response.status_code == 409 and "already has a token named 'dup'" in str(response.json())


def test_hostile_token_names_are_refused(api_for):
    for body in (rb'{"name": "a\u0000b"}', rb'{"name": "\ud800"}', b'{"name": ' + b"[" * 500 + b"]" * 500 + b"}"):
        response = api_for("viewer").post("/api/tokens/", data=body, content_type="application/json")
        assert response.status_code == 400
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["tests"]


def test_an_expired_token_is_refused_and_removed(users):
    token, key = token_create(user=users["operator"], name="old", days=1)
    ApiToken.objects.filter(pk=token.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    response = with_key(key).get("/api/graphs/")
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]
    assert not ApiToken.objects.filter(pk=token.pk).exists()


@pytest.mark.parametrize("header", ["Token", "Token a b", "Token \u00ff\u00fe", "Token " + "g" * 64,
                                    "Token " + "0" * 64, "Token " + "0" * 5000, "Token \x00"])
def test_malformed_or_unknown_keys_are_401_never_500(db, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    assert client.get("/api/graphs/").status_code == 401


def test_an_inactive_users_token_is_refused(users):
    _token, key = token_create(user=users["operator"], name="t")
    users["operator"].is_active = False
    users["operator"].save()
    assert with_key(key).get("/api/graphs/").status_code == 401


def test_users_without_a_role_get_no_tokens_page_or_api(client_for, users):
    assert client_for("norole").get("/account/tokens/").status_code == 403
    _token, key = token_create(user=users["norole"], name="t")
    assert with_key(key).get("/api/tokens/").status_code == 403


def test_create_token_mints_a_working_key_and_drf_create_token_is_its_alias(users):
    out = io.StringIO()
    call_command("create_token", "operator", "--name", "deploy", "--days", "3", stdout=out)
    key = out.getvalue().strip()
    assert authenticate_key(key) == users["operator"]
    out = io.StringIO()
    call_command("drf_create_token", "admin", stdout=out)
    assert authenticate_key(out.getvalue().strip()) == users["admin"]
    assert ApiToken.objects.get(user=users["admin"]).name == "cli"
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("create_token", "ghost", stdout=io.StringIO())
    with pytest.raises(CommandError, match="days"):
        call_command("create_token", "operator", "--days", "4000", stdout=io.StringIO())


def test_tokens_logins_failures_and_role_changes_are_audited(client, client_for, users, api_for):
    from django.contrib.auth.models import Group

    api = api_for("viewer")
    prefix = api.post("/api/tokens/", {"name": "audited"}, format="json").json()["prefix"]
    api.delete(f"/api/tokens/{prefix}/")
    client.post("/login/", {"username": "operator", "password": "wrong"})
    client.post("/login/", {"username": "operator", "password": PASSWORD})
    users["viewer"].groups.add(Group.objects.get(name="operator"))
    users["viewer"].groups.remove(Group.objects.get(name="viewer"))
    users["norole"].is_superuser = True
    users["norole"].save()
    records = {(r.action, r.target, r.actor_name) for r in AuditRecord.objects.all()}
    assert ("token.create", "viewer", "viewer") in records
    assert ("token.revoke", "viewer", "viewer") in records
    assert ("auth.login_failed", "operator", "") in records
    assert ("auth.login", "operator", "operator") in records
    roles = AuditRecord.objects.filter(action="user.roles", target="viewer").order_by("id")
    assert [r.message for r in roles][-2:] == ["groups added: operator", "groups removed: viewer"]
    assert roles.last().after == {"groups": ["operator"]}
    flags = AuditRecord.objects.get(action="user.roles", target="norole")
    assert flags.before["is_superuser"] is False and flags.after["is_superuser"] is True
    assert "prefix" in AuditRecord.objects.get(action="token.create", target="viewer", after__name="audited").after
    assert client_for("admin").get("/audit/").status_code == 200
    assert api_for("admin").get("/api/audit/?action=auth.").status_code == 200
