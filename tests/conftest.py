"""Shared fixtures: users per role, logged-in clients, token-authenticated API clients and the
reference manifests. Generic on purpose: every test module may use them.

* ``users``: the groups viewer/operator/admin and one user per role, plus ``norole`` (signed in,
  no group), all with the password ``PASSWORD``. A dict role -> User.
* ``client_for(role)``: a django.test.Client logged in as that role's user.
* ``api_for(role)``: a DRF APIClient authenticated with an API token of that user (header
  ``Authorization: Token <key>``), not a session.
* ``reference_dir``: tests/fixtures/reference (seed-disagg.yaml, dgd-templates-1.6.1/*.yaml).
"""

from __future__ import annotations

from pathlib import Path

import pytest

# The live tests' ``eager`` and ``operator`` fixtures, written once.
pytest_plugins = ["tests.live_fixtures"]

PASSWORD = "pw-12345678"
ROLES = ("viewer", "operator", "admin")
NO_ROLE = "norole"
TESTS_DIR = Path(__file__).resolve().parent
REFERENCE_DIR = TESTS_DIR / "fixtures" / "reference"


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """MD5 instead of PBKDF2: creating and logging in users takes microseconds, not a second."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _no_login_throttling(settings):
    """Django's test client logs in without a request, which django-axes cannot throttle;
    tests/controlplane/test_security.py turns throttling back on where it is the subject."""
    settings.AXES_ENABLED = False


@pytest.fixture
def reference_dir() -> Path:
    return REFERENCE_DIR


@pytest.fixture
def users(db):
    """role name -> User for viewer, operator, admin and ``norole``."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user_model = get_user_model()
    out = {}
    for role in ROLES:
        group, _ = Group.objects.get_or_create(name=role)
        user = user_model.objects.create_user(username=role, password=PASSWORD, email=f"{role}@example.test")
        user.groups.add(group)
        out[role] = user
    out[NO_ROLE] = user_model.objects.create_user(username=NO_ROLE, password=PASSWORD)
    return out


@pytest.fixture
def client_for(users):
    """client_for("operator") -> a django.test.Client with a logged-in session; ``None`` or
    "anonymous" gives a client that is not logged in."""
    from django.test import Client

    def make(role: str | None) -> Client:
        client = Client()
        if role not in (None, "anonymous"):
            assert client.login(username=users[role].username, password=PASSWORD)
        return client

    return make


@pytest.fixture
def api_for(users):
    """api_for("viewer") -> a rest_framework.test.APIClient sending that user's Token; ``None``
    or "anonymous" gives an unauthenticated client."""
    from rest_framework.test import APIClient

    from accounts.tokens import token_create

    keys: dict[str, str] = {}

    def make(role: str | None) -> APIClient:
        client = APIClient()
        if role not in (None, "anonymous"):
            if role not in keys:
                keys[role] = token_create(user=users[role], name="tests", via="system")[1]
            client.credentials(HTTP_AUTHORIZATION=f"Token {keys[role]}")
        return client

    return make


@pytest.fixture
def operator_api(api_for):
    """An API client of the ``operator`` user."""
    return api_for("operator")


@pytest.fixture
def viewer_api(api_for):
    """An API client of the ``viewer`` user."""
    return api_for("viewer")
