"""Single sign-on without a browser: reading the OIDC_* settings, the group-to-role rule, the
sign-in service on verified claims (roles set anew each time, refusals, audit), the login page,
and local accounts switched off. The browser tests against a real provider are
tests/accounts/test_sso_browser.py."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

from accounts.models import OidcIdentity
from accounts.sso import groups_from_claims, sso_sign_in
from accounts.sso_config import DEFAULT_SESSION_SECONDS, SsoConfig, SsoConfigError, role_for_groups, sso_config
from accounts.tokens import authenticate_key
from audit.models import AuditRecord
from tests.conftest import PASSWORD

BASE_ENV = {"OIDC_ISSUER_URL": "https://idp.example.com/realms/gpu", "OIDC_CLIENT_ID": "dynamo-cp",
            "OIDC_CLIENT_SECRET": "s3cret", "OIDC_OPERATOR_GROUPS": "ml-platform"}


def reader(values: dict):
    return lambda name, default="": values.get(name, default)


# --- settings ---------------------------------------------------------------------------------

def test_no_issuer_means_no_single_sign_on():
    assert sso_config(reader({})) is None


def test_defaults_are_the_documented_ones():
    config = sso_config(reader(BASE_ENV))
    assert config.scopes == "openid email profile groups"
    assert config.groups_claim == "groups"
    assert config.username_claims == ("preferred_username", "email")
    assert config.session_seconds == DEFAULT_SESSION_SECONDS
    assert config.role_groups == {"admin": frozenset(), "operator": frozenset({"ml-platform"}), "viewer": frozenset()}


def test_every_setting_is_read_and_group_lists_are_comma_separated():
    config = sso_config(reader({**BASE_ENV, "OIDC_SCOPES": "openid,email  roles", "OIDC_GROUPS_CLAIM": "roles",
                                "OIDC_USERNAME_CLAIM": "upn", "OIDC_ADMIN_GROUPS": " sre , gpu-admins,",
                                "OIDC_VIEWER_GROUPS": "everyone", "OIDC_SESSION_SECONDS": "600"}))
    assert config.scopes == "openid email roles"
    assert config.groups_claim == "roles"
    assert config.username_claims == ("upn",)
    assert config.role_groups["admin"] == {"sre", "gpu-admins"}
    assert config.role_groups["viewer"] == {"everyone"}
    assert config.session_seconds == 600


def test_the_client_secret_is_read_from_its_file(tmp_path, monkeypatch):
    from controlplane.environment import env

    secret = tmp_path / "client-secret"
    secret.write_text("from-the-file\n")
    for name, value in BASE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OIDC_CLIENT_SECRET")
    monkeypatch.setenv("OIDC_CLIENT_SECRET_FILE", str(secret))
    assert sso_config(env).client_secret == "from-the-file"


@pytest.mark.parametrize(("change", "names"), [
    ({"OIDC_ISSUER_URL": "idp.example.com"}, "OIDC_ISSUER_URL"),
    ({"OIDC_ISSUER_URL": "https://idp.example.com/?x=1"}, "OIDC_ISSUER_URL"),
    ({"OIDC_CLIENT_ID": ""}, "OIDC_CLIENT_ID"),
    ({"OIDC_CLIENT_SECRET": ""}, "OIDC_CLIENT_SECRET"),
    ({"OIDC_SCOPES": "email profile"}, "OIDC_SCOPES"),
    ({"OIDC_OPERATOR_GROUPS": " , "}, "OIDC_ADMIN_GROUPS"),
    ({"OIDC_SESSION_SECONDS": "8h"}, "OIDC_SESSION_SECONDS"),
    ({"OIDC_SESSION_SECONDS": "0"}, "OIDC_SESSION_SECONDS"),
])
def test_a_setting_that_cannot_work_is_refused_by_name(change, names):
    with pytest.raises(SsoConfigError, match=names):
        sso_config(reader({**BASE_ENV, **change}))


# --- groups to roles --------------------------------------------------------------------------

MAPPING = {"admin": frozenset({"sre"}), "operator": frozenset({"ml", "research"}), "viewer": frozenset({"all"})}


@pytest.mark.parametrize(("groups", "role"), [
    (["all"], "viewer"), (["research"], "operator"), (["sre"], "admin"),
    (["all", "ml", "sre"], "admin"), (["all", "ml"], "operator"),
    ([], None), (["staff", "SRE"], None),  # names compare exactly
])
def test_the_highest_mapped_group_wins_and_unmapped_groups_give_nothing(groups, role):
    assert role_for_groups(groups, MAPPING) == role


@pytest.mark.parametrize(("value", "groups"), [
    (["b", "a", "a"], ["a", "b"]), ("solo", ["solo"]), (None, []), (42, []), (["ok", 7, {"x": 1}, ""], ["ok"]),
])
def test_groups_claims_of_any_shape_become_a_list_of_names(value, groups):
    assert groups_from_claims({"groups": value}, "groups") == groups


# --- the sign-in service ----------------------------------------------------------------------

CONFIG = SsoConfig(issuer="https://idp.example.com", client_id="cp", client_secret="x", scopes="openid groups",
                   groups_claim="groups", username_claims=("preferred_username", "email"), role_groups=MAPPING,
                   session_seconds=3600, timeout=3.0)


def claims(sub="u-1", groups=("ml",), **extra):
    return {"iss": CONFIG.issuer, "sub": sub, "aud": "cp", "preferred_username": "maria", "email": "m@example.test",
            "groups": list(groups), **extra}


def role_groups_of(user):
    return set(user.groups.values_list("name", flat=True))


@pytest.mark.django_db
def test_each_sign_in_sets_the_role_from_the_groups_and_audits_it():
    first = sso_sign_in(config=CONFIG, claims=claims(groups=["all"]), client="10.0.0.7")
    assert first.role == "viewer" and role_groups_of(first.user) == {"viewer"}
    assert first.user.username == "maria" and not first.user.has_usable_password()
    again = sso_sign_in(config=CONFIG, claims=claims(groups=["all", "sre"]))
    assert again.user == first.user and again.role == "admin" and role_groups_of(again.user) == {"admin"}
    logins = AuditRecord.objects.filter(action="auth.sso_login", target="maria").order_by("id")
    assert [(r.before, r.after["role"]) for r in logins] == [({"role": None}, "viewer"), ({"role": "viewer"}, "admin")]
    assert "10.0.0.7" in logins[0].message
    assert AuditRecord.objects.filter(action="user.roles", target="maria").count() >= 2


@pytest.mark.django_db
def test_groups_that_are_not_roles_are_kept_and_the_identity_is_the_subject_not_the_name():
    first = sso_sign_in(config=CONFIG, claims=claims(groups=["ml"]))
    first.user.groups.add(Group.objects.create(name="gpu-quota-a"))
    renamed = sso_sign_in(config=CONFIG, claims=claims(groups=["all"], preferred_username="maria.k"))
    assert renamed.user == first.user and role_groups_of(renamed.user) == {"viewer", "gpu-quota-a"}
    identity = OidcIdentity.objects.get(user=first.user)
    assert (identity.issuer, identity.subject, identity.groups) == (CONFIG.issuer, "u-1", ["all"])


@pytest.mark.django_db
def test_no_mapped_group_is_a_refusal_that_names_the_groups_and_takes_the_role_away(users):
    signed_in = sso_sign_in(config=CONFIG, claims=claims(groups=["ml"]))
    from accounts.tokens import token_create

    _token, key = token_create(user=signed_in.user, name="ci")
    refused = sso_sign_in(config=CONFIG, claims=claims(groups=["staff", "interns"]))
    assert refused.user is None and refused.role is None
    assert "interns, staff" in refused.refusal
    assert role_groups_of(signed_in.user) == set()
    # The token still names its owner, who now has no role: every API call is refused.
    client = Client(HTTP_AUTHORIZATION=f"Token {key}")
    assert authenticate_key(key) == signed_in.user
    assert client.get("/api/graphs/").status_code == 403
    record = AuditRecord.objects.get(action="auth.sso_refused")
    assert record.target == "maria" and record.after["groups"] == ["interns", "staff"]


@pytest.mark.django_db
def test_an_offboarded_person_s_tokens_stop_when_they_have_not_signed_in_for_the_set_days(settings):
    """Someone removed from the identity provider never signs in again: their tokens must not
    keep their role for the rest of a year (Rancher CVE-2026-44946)."""
    from datetime import timedelta

    from django.utils import timezone

    from accounts.tokens import token_create
    from endpoint.admission import token_owner

    settings.SSO = CONFIG  # token_sign_in_days: the default, 30
    signed_in = sso_sign_in(config=CONFIG, claims=claims(groups=["ml"]))
    _token, key = token_create(user=signed_in.user, name="ci", days=365)
    client = Client(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/graphs/").status_code == 200
    identity = OidcIdentity.objects.get(user=signed_in.user)
    identity.last_sign_in = timezone.now() - timedelta(days=31)
    identity.save()
    refused = client.get("/api/graphs/")
    assert refused.status_code == 401
    assert "not signed in with single sign-on for 30 days" in refused.json()["detail"]
    assert authenticate_key(key) is None and token_owner(key) is None  # the playground's relay too
    page = Client()
    page.force_login(signed_in.user)
    assert "they stop on" in page.get("/account/tokens/").content.decode()
    sso_sign_in(config=CONFIG, claims=claims(groups=["ml"]))  # signing in again brings them back
    assert client.get("/api/graphs/").status_code == 200
    settings.SSO = SsoConfig(**{**CONFIG.__dict__, "token_sign_in_days": 0})  # the rule off
    identity.refresh_from_db()
    identity.last_sign_in = timezone.now() - timedelta(days=400)
    identity.save()
    assert authenticate_key(key) == signed_in.user


def test_the_token_sign_in_days_setting_is_read_and_bounded():
    assert sso_config(reader(BASE_ENV)).token_sign_in_days == 30
    assert sso_config(reader({**BASE_ENV, "OIDC_TOKEN_SIGN_IN_DAYS": "0"})).token_sign_in_days == 0
    for bad in ("-1", "x", "4000"):
        with pytest.raises(SsoConfigError, match="OIDC_TOKEN_SIGN_IN_DAYS"):
            sso_config(reader({**BASE_ENV, "OIDC_TOKEN_SIGN_IN_DAYS": bad}))


@pytest.mark.django_db
def test_a_first_sign_in_without_a_role_makes_no_user():
    assert sso_sign_in(config=CONFIG, claims=claims(groups=[])).user is None
    assert not get_user_model().objects.filter(username="maria").exists()


@pytest.mark.django_db
def test_sso_never_signs_in_as_the_local_account_of_the_same_name(users):
    result = sso_sign_in(config=CONFIG, claims=claims(groups=["sre"], preferred_username="admin"))
    assert result.user is None and "a local account named admin exists" in result.refusal
    assert not OidcIdentity.objects.exists()


@pytest.mark.django_db
def test_the_username_falls_back_to_the_email_and_must_be_usable():
    result = sso_sign_in(config=CONFIG, claims=claims(preferred_username=""))
    assert result.user.username == "m@example.test"
    bad = sso_sign_in(config=CONFIG, claims=claims(sub="u-2", preferred_username="a b/c", email=None))
    assert bad.user is None and "no usable user name" in bad.refusal


@pytest.mark.django_db
def test_a_deactivated_user_is_refused():
    user = sso_sign_in(config=CONFIG, claims=claims()).user
    user.is_active = False
    user.save()
    result = sso_sign_in(config=CONFIG, claims=claims(groups=["sre"]))
    assert result.user is None and "deactivated" in result.refusal
    assert role_groups_of(user) == {"operator"}  # untouched: the admin's deactivation decides


# --- pages and local accounts -----------------------------------------------------------------

@pytest.mark.django_db
def test_the_login_page_offers_single_sign_on_only_when_configured(settings):
    assert "Sign in with single sign-on" not in Client().get("/login/").text
    assert Client().get("/auth/oidc/login/").status_code == 404
    assert Client().get("/auth/oidc/callback/?code=x&state=y").status_code == 404
    settings.SSO = CONFIG
    page = Client().get("/login/?next=/graphs/x/").text
    assert "Sign in with single sign-on" in page and "/auth/oidc/login/?next=/graphs/x/" in page
    assert 'name="password"' in page  # local accounts stay, as the way in when the provider is down


@pytest.mark.django_db
def test_a_callback_without_a_started_sign_in_is_a_page_and_leaves_no_session(settings):
    settings.SSO = CONFIG
    client = Client()
    response = client.get("/auth/oidc/callback/?code=abc&state=never-issued")
    assert response.status_code == 400 and "used already or has expired" in response.text
    assert "_auth_user_id" not in client.session
    # An error for a sign-in nobody started is not the provider's: its text is neither shown nor
    # recorded (tests/accounts/test_security_sso.py, which also shows the provider's own errors).
    denied = client.get("/auth/oidc/callback/?error=access_denied&error_description=User+cancelled&state=s")
    assert denied.status_code == 400 and "User cancelled" not in denied.text
    # NUL bytes in the query string: the same failure page, not the API's JSON
    nul = client.get("/auth/oidc/callback/?code=a%00b&state=s%00")
    assert nul.status_code == 400 and nul["Content-Type"].startswith("text/html")
    assert "used already or has expired" in nul.text


@pytest.mark.django_db
def test_with_local_login_off_passwords_fail_everywhere_but_manage_py_still_works(settings, users):
    settings.SSO = CONFIG
    settings.OIDC_LOCAL_LOGIN = False
    client = Client()
    response = client.post("/login/", {"username": "admin", "password": PASSWORD})
    assert response.status_code == 403 and "Local accounts are switched off" in response.text
    assert not client.login(username="admin", password=PASSWORD)
    admin_login = client.post("/admin/login/", {"username": "admin", "password": PASSWORD})
    assert "_auth_user_id" not in client.session and admin_login.status_code == 200
    redirect = client.get("/login/?next=/graphs/")
    assert redirect.status_code == 302 and redirect["Location"] == "/auth/oidc/login/?next=%2Fgraphs%2F"
    out = io.StringIO()
    call_command("create_token", "admin", "--name", "break-glass", stdout=out)
    assert authenticate_key(out.getvalue().strip()) == users["admin"]


def test_local_login_off_without_single_sign_on_refuses_to_start(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2],
                          env={"DJANGO_SETTINGS_MODULE": "controlplane.settings", "OIDC_LOCAL_LOGIN": "0",
                               "PATH": "/usr/bin:/bin", "CONTROLPLANE_VAR_DIR": str(tmp_path)})
    assert done.returncode != 0 and "OIDC_LOCAL_LOGIN=0 needs single sign-on" in done.stderr


@pytest.mark.django_db
def test_the_dynamo_cp_login_page_refuses_a_request_it_did_not_get_from_the_cli(client_for):
    client = client_for("viewer")
    bad = client.get("/account/tokens/cli/?port=80&state=short")
    assert bad.status_code == 400 and "port:" in bad.text and "state:" in bad.text
    state = "s" * 43
    ok = client.get(f"/account/tokens/cli/?port=40000&state={state}&name=laptop")
    assert ok.status_code == 200 and "laptop" in ok.text
    assert "form-action 'self' http://127.0.0.1:*" in ok["Content-Security-Policy"]
    sent = client.post("/account/tokens/cli/", {"port": "40000", "state": state, "name": "laptop"})
    assert sent.status_code == 200 and 'action="http://127.0.0.1:40000/"' in sent.text
    assert 'name="state" value="' + state in sent.text
    assert client_for(None).get(f"/account/tokens/cli/?port=40000&state={state}").status_code == 302


# --- the ID token checks (accounts/idp.py), with a key of our own ---------------------------

@pytest.fixture
def signed():
    """(Client, sign(claims, **options)): the client trusts one RSA key, as if from the JWKS."""
    import time

    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from accounts.idp import Client, Provider

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    provider = Provider(issuer="https://idp.example.com", authorization_endpoint="https://idp.example.com/auth",
                        token_endpoint="https://idp.example.com/token", jwks_uri="https://idp.example.com/jwks",
                        userinfo_endpoint="", end_session_endpoint="", algorithms=("RS256",))
    client = Client(CONFIG, provider)
    client.OIDC_RP_IDP_SIGN_KEY = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                 serialization.PublicFormat.SubjectPublicKeyInfo)
    now = int(time.time())

    def sign(algorithm="RS256", secret=None, **changes):
        body = {"iss": provider.issuer, "sub": "u-1", "aud": "cp", "iat": now, "exp": now + 300, "nonce": "n1",
                **changes}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, secret or key, algorithm=algorithm)

    return client, sign


def test_a_valid_id_token_gives_its_claims(signed):
    client, sign = signed
    assert client.verify_token(sign(), nonce="n1")["sub"] == "u-1"


@pytest.mark.parametrize(("changes", "reason"), [
    ({"aud": "another-app"}, "issued to another client"),
    ({"aud": ["cp", "another-app"], "azp": "another-app"}, "several audiences"),
    ({"iss": "https://evil.example.com"}, "another issuer"),
    ({"exp": 1_000_000_000, "iat": 999_999_000}, "expired"),
    ({"exp": None}, "not a valid token"),
    ({"nonce": "from-another-sign-in"}, "Nonce"),
])
def test_an_id_token_failing_any_check_is_refused_with_the_reason(signed, changes, reason):
    from django.core.exceptions import SuspiciousOperation

    client, sign = signed
    with pytest.raises(SuspiciousOperation, match=reason):
        client.verify_token(sign(**changes), nonce="n1")


def test_a_token_signed_with_a_shared_secret_is_refused_whatever_the_secret(signed):
    """Algorithm confusion: HS256 "signed" with the client secret, which we hold too."""
    from django.core.exceptions import SuspiciousOperation

    client, sign = signed
    with pytest.raises(SuspiciousOperation, match="algorithm the provider does not offer"):
        client.verify_token(sign(algorithm="HS256", secret=CONFIG.client_secret * 8), nonce="n1")


@pytest.mark.django_db
def test_control_characters_in_claims_are_refused_or_dropped_never_stored():
    refused = sso_sign_in(config=CONFIG, claims=claims(sub="u-\x00-1", groups=["sre"]))
    assert refused.user is None and "subject (sub) with control characters" in refused.refusal
    record = AuditRecord.objects.filter(action="auth.sso_refused").latest("id")
    assert "\x00" not in json.dumps(record.after or {}) and "\\x00" in json.dumps(record.after or {})
    signed = sso_sign_in(config=CONFIG, claims=claims(sub="u-2", groups=["sre", "bad\x00group", "x" * 151],
                                                      preferred_username="ma\x00ria", email="m\x00@example.test"))
    # the user name falls to the next claim that is usable; neither was: refused, nothing stored
    assert signed.user is None and "no usable user name" in signed.refusal
    ok = sso_sign_in(config=CONFIG, claims=claims(sub="u-3", groups=["sre", "bad\x00group"],
                                                  preferred_username="ma\x00ria", email="maria@example.test"))
    assert ok.user.username == "maria@example.test" and ok.groups == ["sre"]


@pytest.mark.django_db
def test_a_groups_claim_of_thousands_is_cut_keeping_the_ones_that_give_a_role():
    many = [f"team-{i:05d}" for i in range(5000)] + ["sre"]
    result = sso_sign_in(config=CONFIG, claims=claims(sub="u-many", groups=many))
    assert result.role == "admin" and "sre" in result.groups and len(result.groups) == 200
    assert len(json.dumps(AuditRecord.objects.filter(action="auth.sso_login").latest("id").after)) < 10_000
