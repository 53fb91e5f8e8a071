# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""Single sign-on in Debian's Chromium against a real OpenID Connect provider (panva's
oidc-provider on loopback, tests/oidc_fixtures.py): people in each group sign in with their
role, a person in no mapped group is refused with a page naming their groups, a role taken
away in the provider is gone at the next sign-in (and their API token with it), sign-out ends
the provider's session too, and each failure users meet (a wrong client secret, a provider
that is down, an expired or tampered ID token, a replayed callback) ends on a page that says
so: never a 500, never a session. Also the authorization request itself: state, nonce and
the PKCE S256 challenge (the provider refuses a request without one)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from playwright.sync_api import expect

from accounts.models import OidcIdentity
from audit.models import AuditRecord
from tests.oidc_fixtures import free_port, oidc_issuer, sso  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def open_page(browser):
    """A fresh browser profile (no session here, none at the provider) that records the status
    of every page of ours it loads."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.statuses = []
    page.on("response", lambda r: page.statuses.append((r.status, r.url)) if r.request.resource_type == "document"
            else None)
    return page


def sign_in(page, site, person: str, *, next_path: str = "/graphs/"):
    """From our login page through the provider's sign-in form, back to us."""
    page.goto(f"{site.url}/login/?next={next_path}")
    page.click("#sso-login")
    page.fill("input[name=login]", person)
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_load_state()


def has_session(page) -> bool:
    return any(c["name"] == django_settings.SESSION_COOKIE_NAME for c in page.context.cookies())


def no_server_errors(page):
    """No page of the flow crashed (502 is the deliberate answer when the provider fails us)."""
    assert not [s for s in page.statuses if s[0] == 500], page.statuses


@pytest.mark.parametrize(("person", "role"), [("alice", "admin"), ("bob", "operator"), ("carol", "viewer"),
                                              ("erin", "operator")])
def test_people_in_each_group_sign_in_with_the_highest_role_their_groups_map_to(browser, live_server, sso,
                                                                              person, role):
    page = open_page(browser)
    sign_in(page, live_server, person)
    expect(page).to_have_url(f"{live_server.url}/graphs/")
    expect(page.locator(".who")).to_contain_text(person)
    expect(page.locator(".who .role")).to_have_text(role)
    session = next(c for c in page.context.cookies() if c["name"] == django_settings.SESSION_COOKIE_NAME)
    assert 3500 < session["expires"] - time.time() <= 3600  # OIDC_SESSION_SECONDS, as the fixture sets it
    identity = OidcIdentity.objects.select_related("user").get(subject=person)
    assert identity.user.username == person
    assert set(identity.user.groups.values_list("name", flat=True)) == {role}
    record = AuditRecord.objects.get(action="auth.sso_login", target=person)
    assert record.after["role"] == role and record.before == {"role": None}
    assert not AuditRecord.objects.filter(action="auth.login", target=person).exists()  # one record, not two


def test_a_person_in_no_mapped_group_is_refused_with_the_groups_the_provider_sent(browser, live_server, sso):
    page = open_page(browser)
    sign_in(page, live_server, "dave")
    expect(page.locator("h1")).to_have_text("No access to this control plane")
    expect(page.locator("#idp-groups")).to_have_text("contractors, staff")
    assert (403, page.url) in page.statuses
    assert not has_session(page)
    page.goto(f"{live_server.url}/graphs/")
    expect(page).to_have_url(re.compile(r"/login/\?next="))
    refusal = AuditRecord.objects.get(action="auth.sso_refused", target="dave")
    assert refusal.after["groups"] == ["contractors", "staff"]
    assert not OidcIdentity.objects.filter(subject="dave").exists()  # nobody is made for a refusal


def test_a_role_taken_away_in_the_provider_is_gone_at_the_next_sign_in_with_the_token(browser, live_server, sso,
                                                                                     oidc_issuer):
    from rest_framework.test import APIClient

    oidc_issuer.set_groups("grace", ["cp-operators"])
    page = open_page(browser)
    sign_in(page, live_server, "grace", next_path="/account/tokens/")
    expect(page.locator(".who .role")).to_have_text("operator")
    page.fill("input[name=name]", "ci")
    page.click("text=Create token")
    key = page.locator("#new-token").inner_text().strip()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.post("/api/graphs/", {}, format="json").status_code == 400  # an operator may try: bad body

    oidc_issuer.set_groups("grace", ["cp-viewers"])
    page = open_page(browser)
    sign_in(page, live_server, "grace")
    expect(page.locator(".who .role")).to_have_text("viewer")
    assert api.get("/api/graphs/").status_code == 200
    assert api.post("/api/graphs/", {}, format="json").status_code == 403  # the token is a viewer's now

    oidc_issuer.set_groups("grace", [])
    page = open_page(browser)
    sign_in(page, live_server, "grace")
    expect(page.locator("h1")).to_have_text("No access to this control plane")
    expect(page.locator("#idp-groups")).to_have_text("none")
    assert api.get("/api/graphs/").status_code == 403
    changes = list(AuditRecord.objects.filter(action="user.roles", target="grace").order_by("id")
                   .values_list("after", flat=True))
    assert changes[-1] == {"groups": []}
    assert {"groups": ["viewer"]} in changes


def test_sign_out_ends_the_providers_session_too(browser, live_server, sso):
    page = open_page(browser)
    sign_in(page, live_server, "carol")
    expect(page.locator(".who .role")).to_have_text("viewer")
    page.click("text=Log out")
    # The provider asks whether to end its session too (oidc-provider's logout page).
    page.wait_for_url(re.compile(r"/session/end"))
    page.click("button[autofocus], button[type=submit]")
    page.wait_for_url(re.compile(r"/login/"))
    assert not has_session(page)
    page.click("#sso-login")
    expect(page.locator("input[name=login]")).to_be_visible()  # the provider asks again: its session is over


def test_with_local_login_off_the_login_page_goes_straight_to_the_provider(browser, live_server, sso, settings):
    settings.OIDC_LOCAL_LOGIN = False
    page = open_page(browser)
    page.goto(f"{live_server.url}/graphs/")
    page.fill("input[name=login]", "bob")
    page.fill("input[name=password]", "x")
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server.url}/graphs/")
    expect(page.locator(".who .role")).to_have_text("operator")


def expect_failure(page, heading: str, sentence: str, status: int):
    expect(page.locator("h1")).to_have_text(heading)
    expect(page.locator("[role=alert]")).to_contain_text(re.compile(re.escape(sentence), re.I))
    assert page.statuses[-1][0] == status, page.statuses
    assert not has_session(page)
    no_server_errors(page)


def test_a_wrong_client_secret_is_a_page_naming_the_setting(browser, live_server, sso):
    sso(client_secret="not-the-secret")
    page = open_page(browser)
    sign_in(page, live_server, "alice")
    expect_failure(page, "The identity provider refused this control plane", "OIDC_CLIENT_SECRET", 502)
    assert AuditRecord.objects.filter(action="auth.sso_failed", after__kind="client").exists()


def test_a_provider_that_is_down_is_a_page_not_an_error(browser, live_server, sso):
    sso(issuer=f"http://127.0.0.1:{free_port()}")
    page = open_page(browser)
    page.goto(f"{live_server.url}/login/")
    page.click("#sso-login")
    expect_failure(page, "The identity provider cannot be reached", "cannot be reached", 502)


def test_a_provider_that_goes_down_during_the_sign_in_is_a_page_too(browser, live_server, sso):
    page = open_page(browser)
    page.goto(f"{live_server.url}/login/")
    page.click("#sso-login")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", "x")
    dead = f"http://127.0.0.1:{free_port()}"
    sso(issuer=dead)  # what the callback finds: the provider no longer answers
    page.click("button[type=submit]")
    expect_failure(page, "The identity provider cannot be reached", dead, 502)
    assert not OidcIdentity.objects.filter(subject="alice").exists()


def test_an_expired_id_token_signed_by_the_provider_is_refused(browser, live_server, sso):
    sso(client_id="cp-expired")
    page = open_page(browser)
    sign_in(page, live_server, "alice")
    expect_failure(page, "The identity provider's answer was refused", "expired", 400)
    assert not OidcIdentity.objects.filter(subject="alice").exists()


def test_a_tampered_id_token_is_refused(browser, live_server, sso):
    sso(client_id="cp-tampered")
    page = open_page(browser)
    sign_in(page, live_server, "carol")  # the forged token says cp-admins
    expect_failure(page, "The identity provider's answer was refused", "signature does not verify", 400)
    assert not OidcIdentity.objects.filter(subject="carol").exists()


def test_a_replayed_callback_is_refused_and_signs_nobody_in(browser, live_server, sso):
    page = open_page(browser)
    callbacks = []
    page.on("request", lambda r: callbacks.append(r.url) if "/auth/oidc/callback/" in r.url else None)
    sign_in(page, live_server, "bob")
    expect(page.locator(".who .role")).to_have_text("operator")
    assert len(callbacks) == 1
    # The same browser going back to the used callback: refused, and signed out.
    page.goto(callbacks[0])
    expect_failure(page, "This sign-in link has been used already or has expired", "start again", 400)
    # Another browser presenting the stolen callback URL: no state of its own, no session.
    other = open_page(browser)
    other.goto(callbacks[0])
    expect_failure(other, "This sign-in link has been used already or has expired", "start again", 400)


def test_dynamo_cp_login_makes_a_token_in_the_browser_and_stores_it_privately(browser, live_server, sso, tmp_path):
    import os
    import stat
    import subprocess
    import sys

    import yaml

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DYNAMO_CP_")},
           "XDG_CONFIG_HOME": str(tmp_path), "DYNAMO_CP_URL": live_server.url}
    root = Path(__file__).resolve().parents[2]
    cli = subprocess.Popen([sys.executable, "-m", "dynamo_cp", "login", "--no-browser", "--name", "laptop",
                            "--login-timeout", "60"], cwd=root, env=env, stderr=subprocess.PIPE, text=True)
    try:
        lines = [cli.stderr.readline(), cli.stderr.readline()]
        url = next(line.strip() for line in lines if "/account/tokens/cli/" in line)
        page = open_page(browser)
        page.goto(url)  # not signed in: the login page, then the provider, then back here
        page.click("#sso-login")
        page.fill("input[name=login]", "bob")
        page.fill("input[name=password]", "x")
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("A token for dynamo-cp")
        expect(page.locator("main")).to_contain_text("laptop")
        page.click("#cli-create")
        expect(page.locator("body")).to_contain_text("dynamo-cp has its token")
        assert cli.wait(30) == 0, cli.stderr.read()
    finally:
        cli.kill()
    path = tmp_path / "dynamo-cp" / "config.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = yaml.safe_load(path.read_text())
    assert stored["url"] == live_server.url and len(stored["token"]) == 64
    assert "token=" not in " ".join(u for _s, u in page.statuses)  # the key was never in a URL
    listed = subprocess.run([sys.executable, "-m", "dynamo_cp", "graphs", "list", "-o", "json"], cwd=root,
                            env={**env, "DYNAMO_CP_URL": ""}, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    from accounts.models import ApiToken

    token = ApiToken.objects.get(user__username="bob")
    assert token.name.startswith("dynamo-cp login laptop")


def test_the_authorization_request_carries_state_nonce_and_a_pkce_challenge(live_server, sso, oidc_issuer):
    import base64
    import hashlib
    from urllib.parse import parse_qs, urlsplit

    from django.test import Client

    client = Client()
    response = client.get("/auth/oidc/login/?next=/graphs/")
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{oidc_issuer.url}/auth"  # from discovery
    query = {k: v[0] for k, v in parse_qs(location.query).items()}
    assert query["response_type"] == "code" and query["client_id"] == "cp"
    assert query["scope"] == "openid email profile groups"
    assert query["redirect_uri"] == "http://testserver/auth/oidc/callback/"
    kept = client.session["oidc_states"][query["state"]]
    assert kept["nonce"] == query["nonce"] and len(query["nonce"]) >= 32
    assert query["code_challenge_method"] == "S256"
    digest = hashlib.sha256(kept["code_verifier"].encode()).digest()
    assert query["code_challenge"] == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    assert client.session["oidc_login_next"] == "/graphs/"
