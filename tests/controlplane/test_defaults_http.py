"""`make up` on its defaults, over HTTP: the real `manage.py up` (web under uvicorn, worker,
operator) with no environment of its own (SQLite, the folder broker, no DJANGO_* variables).
No page shows debug output (settings, URL patterns, tracebacks); the secret key is made once
for the installation under var/; login throttling cannot be dodged with X-Forwarded-For."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.urls import path

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw-http-defaults-1"
INTERNALS = ("Traceback", "DisallowedHost", "ALLOWED_HOSTS", "SECRET_KEY", "urlpatterns", "URLconf",
             "DJANGO_SETTINGS_MODULE", "django.", "site-packages", "You're seeing this error")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_env(var_dir: Path) -> dict[str, str]:
    """This process's environment without anything that configures the product, as on a fresh
    machine, plus a private var/ folder."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "DATABASE_", "CELERY_", "CACHE_", "FORWARDED_", "AXES_"))}
    env.update(CONTROLPLANE_VAR_DIR=str(var_dir), PROMETHEUS_BINARY=str(var_dir / "no-prometheus"),
               PYTHONPATH=str(ROOT))
    return env


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    var_dir = tmp_path_factory.mktemp("embedded-var")
    port = _free_port()
    log = open(var_dir / "up.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen([sys.executable, "manage.py", "up", "--no-example", "--port", str(port),
                             "--password", PASSWORD], cwd=ROOT, env=default_env(var_dir), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("manage.py up did not serve: " + (var_dir / "up.log").read_text()[-3000:])
            time.sleep(0.5)
        yield url, var_dir
    finally:
        proc.send_signal(signal.SIGTERM)  # up stops web, worker and operator itself
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def assert_no_internals(response: httpx.Response) -> None:
    for needle in INTERNALS:
        assert needle not in response.text, f"{response.request.url} shows {needle!r}"


def test_an_unknown_host_header_gets_a_plain_400(embedded):
    url, _ = embedded
    response = httpx.get(f"{url}/graphs/", headers={"Host": "attacker.example"})
    assert response.status_code == 400
    assert_no_internals(response)
    assert "could not read this request" in response.text


@pytest.mark.parametrize("path", ["/no-such-page/", "/graphs/no-such-graph/", "/api/no-such-endpoint/",
                                  "/static/no-such-file.js"])
def test_a_404_names_nothing_of_the_url_configuration(embedded, path):
    url, _ = embedded
    response = httpx.get(url + path)
    assert response.status_code in (302, 404)
    assert_no_internals(response)


def test_bad_requests_are_answered_without_debug_output(embedded):
    url, _ = embedded
    for response in (httpx.get(f"{url}/api/graphs/", params={"page": "9" * 5000}),
                     httpx.post(f"{url}/api/validate/", content=b"[" * 100000, headers={"Content-Type": "x/y"}),
                     httpx.get(f"{url}/login/", params={"next": "\x00"})):
        assert 400 <= response.status_code < 500
        assert_no_internals(response)


def _login(client: httpx.Client, url: str, username: str, password: str, **headers) -> httpx.Response:
    page = client.get(f"{url}/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return client.post(f"{url}/login/", data={"username": username, "password": password,
                                              "csrfmiddlewaretoken": token},
                       headers={"Referer": f"{url}/login/", **headers})


def test_static_files_and_logins_work_over_plain_http(embedded):
    url, _ = embedded
    assert httpx.get(f"{url}/static/css/app.css").status_code == 200
    with httpx.Client() as client:
        response = _login(client, url, "viewer", PASSWORD)
        assert response.status_code == 302, response.text[:500]
        assert client.get(f"{url}/graphs/").status_code == 200


def test_the_secret_key_is_made_once_for_the_installation_and_kept(embedded, tmp_path):
    _url, var_dir = embedded
    key_file = var_dir / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    first = key_file.read_text().strip()
    assert len(first) >= 50

    def key_in(folder: Path) -> str:
        code = ("import django; django.setup(); from django.conf import settings; "
                "print(settings.SECRET_KEY, settings.DEBUG)")
        env = {**default_env(folder), "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
        result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                                env=env, check=True)
        return result.stdout.strip()

    assert key_in(var_dir) == f"{first} False"  # the running installation's key, debug off
    other = key_in(tmp_path)
    assert other.split()[0] != first  # another installation, another key


def test_x_forwarded_for_does_not_reset_login_throttling(embedded):
    url, _ = embedded
    with httpx.Client() as client:
        for attempt in range(6):  # AXES_FAILURE_LIMIT is 5
            response = _login(client, url, "operator", "wrong", **{"X-Forwarded-For": f"203.0.113.{attempt}"})
        assert "Too many failed logins" in response.text
        # Locked out: the right password from "another address" is still refused.
        response = _login(client, url, "operator", PASSWORD, **{"X-Forwarded-For": "198.51.100.7"})
        assert response.status_code in (403, 429)
        assert "Too many failed logins" in response.text
    with httpx.Client() as client:  # another user from the same address is not affected
        assert _login(client, url, "admin", PASSWORD).status_code == 302


# A server error cannot be caused on purpose through the product's own URLs (that would be a
# bug to fix), so this module lends itself a URL that fails, for the one test below.
def _failing_view(request):
    raise RuntimeError("internal detail: /srv/secret/path and SECRET_KEY=abc")


urlpatterns = [path("fails/", _failing_view)]


@pytest.mark.urls(__name__)
def test_a_server_error_page_says_what_happened_without_internals(client, settings):
    settings.DEBUG = False
    client.raise_request_exception = False
    response = client.get("/fails/")
    assert response.status_code == 500
    text = response.content.decode()
    assert "could not complete this request" in text
    assert "internal detail" not in text and "Traceback" not in text and "/srv/secret" not in text
