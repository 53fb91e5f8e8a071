"""A real OpenID Connect provider for the SSO tests: panva's oidc-provider (OpenID Certified),
from tests/oidc_provider (package.json and package-lock.json pin it; ``npm ci`` installs it on
first use, as scripts/services.sh does), run by Node on loopback for the test session, with
the live server's callback registered. Its people and groups are in tests/oidc_provider/provider.mjs."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc_provider"
CLIENT_SECRET = "test-client-secret-7f3a"
GROUPS = {"admin": frozenset({"cp-admins"}), "operator": frozenset({"cp-operators"}),
          "viewer": frozenset({"cp-viewers"})}


def ensure_installed() -> None:
    """``npm ci`` from the committed lock file, once: a no-op when node_modules is there."""
    if (PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("no npm: install Node.js 20+ (scripts/services.sh does)")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=PROVIDER_DIR, check=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Issuer:
    url: str

    def set_groups(self, person: str, groups: list[str]) -> None:
        """Change a person's groups in the provider, as its administrator would."""
        request = urllib.request.Request(f"{self.url}/_test/people/{person}", method="PUT",
                                         data=json.dumps({"groups": groups}).encode())
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 204


@pytest.fixture(scope="session")
def oidc_issuer(live_server, tmp_path_factory):
    ensure_installed()
    port = free_port()
    env = {**os.environ, "PORT": str(port), "CLIENT_SECRET": CLIENT_SECRET,
           "REDIRECT_URIS": f"{live_server.url}/auth/oidc/callback/",
           "POST_LOGOUT_REDIRECT_URIS": f"{live_server.url}/login/"}
    log_path = tmp_path_factory.mktemp("oidc") / "provider.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([shutil.which("node") or "node", "provider.mjs"], cwd=PROVIDER_DIR, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/.well-known/openid-configuration", timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("oidc-provider did not start: " + log_path.read_text()[-2000:])
            time.sleep(0.2)
    yield Issuer(url)
    proc.terminate()
    proc.wait(10)
    log.close()


@pytest.fixture
def sso(oidc_issuer, settings):
    """Single sign-on on, against the test provider, as client "cp"; returns a function that
    reconfigures it (another client, secret or issuer) for the failure tests."""
    from django.core.cache import cache

    from accounts.sso_config import DEFAULT_SCOPES, SsoConfig

    def configure(**changes) -> SsoConfig:
        base = SsoConfig(issuer=oidc_issuer.url, client_id="cp", client_secret=CLIENT_SECRET, scopes=DEFAULT_SCOPES,
                         groups_claim="groups", username_claims=("preferred_username", "email"), role_groups=GROUPS,
                         session_seconds=3600, timeout=3.0)
        settings.SSO = replace(base, **changes)
        cache.clear()  # the provider's discovery document, remembered per issuer
        return settings.SSO

    configure()
    yield configure
    cache.clear()
