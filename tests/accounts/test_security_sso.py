"""Single sign-on under hostile input (issue #42): user names checked as Django stores them
(NFKC: a full-width "admin" gave a 500, the ligature "fi" + "le" took ``file``), and a callback that no browser
started writes no audit record of the caller's own text (an anonymous client wrote one per
request through ``error_description``)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import OidcIdentity
from accounts.sso import sso_sign_in
from audit.models import AuditRecord
from tests.accounts.test_sso import CONFIG, claims

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name,local", [("\uff41\uff44\uff4d\uff49\uff4e", "admin"), ("\ufb01le", "file"),
                                        ("ADMI\u0301N", None)])
def test_a_user_name_is_checked_as_it_would_be_stored(users, name, local):
    if local and not get_user_model().objects.filter(username=local).exists():
        get_user_model().objects.create_user(username=local, password="x" * 12)
    result = sso_sign_in(config=CONFIG, claims=claims(groups=["sre"], preferred_username=name))
    if local:
        assert result.user is None and f"a local account named {local} exists already" in result.refusal
        assert not OidcIdentity.objects.exists()
    else:
        assert result.user is not None and result.user.username == "ADMÍN"  # one code point, as stored


def test_a_name_that_normalises_to_an_sso_users_name_does_not_take_that_account():
    first = sso_sign_in(config=CONFIG, claims=claims(sub="u-1", groups=["sre"], preferred_username="file"))
    second = sso_sign_in(config=CONFIG, claims=claims(sub="u-2", groups=["sre"], preferred_username="\ufb01le"))
    assert first.user.username == "file"
    assert second.user is None and "named file exists already" in second.refusal
    assert list(OidcIdentity.objects.values_list("subject", flat=True)) == ["u-1"]


def test_a_callback_no_browser_started_records_nothing_of_what_it_says(settings):
    settings.SSO = CONFIG
    before = AuditRecord.objects.count()
    for n in range(5):
        page = Client().get("/auth/oidc/callback/", {"error": "access_denied", "state": f"forged-{n}",
                                                     "error_description": "ATTACKER TEXT: admin approved this"})
        assert page.status_code == 400 and "ATTACKER TEXT" not in page.text
        assert "used already or has expired" in page.text
    assert AuditRecord.objects.count() == before


def test_the_providers_own_error_for_a_started_sign_in_is_shown_and_recorded(settings):
    settings.SSO = CONFIG
    client = Client()
    session = client.session
    session["oidc_states"] = {"st-1": {"nonce": "n", "code_verifier": "v"}}
    session.save()
    page = client.get("/auth/oidc/callback/", {"error": "access_denied", "state": "st-1",
                                               "error_description": "User cancelled"})
    assert page.status_code == 403 and "User cancelled" in page.text
    record = AuditRecord.objects.get(action="auth.sso_failed")
    assert "User cancelled" in record.message
