# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""A Git host that accepts a connection and never answers (paused, as SIGSTOP leaves a server)
holds no page: a repository's "Sync now" waits on it in the pool of requests that wait on other
services (controlplane/asgi.py), while pages, the API and /healthz answer meanwhile; and git
gives up on the stall by itself (repos/git.py: GIT_HTTP_LOW_SPEED_TIME, ssh keep-alives)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from django.db import connection

from repos import git as repo_git
from repos.services import repository_create
from tests.playground_fixtures import _fresh_limits, routed_server, tokens  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def silent_host():
    """A TCP port whose listener never accepts: connections complete (the kernel's backlog) and
    nothing is ever answered, as with a paused server."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield listener.getsockname()[1]
    listener.close()


def test_a_sync_waiting_on_a_silent_git_host_holds_up_no_page(routed_server, users, tokens, silent_host,
                                                              monkeypatch):
    monkeypatch.setattr(repo_git, "STALL_SECONDS", 4)  # git's own stall bound, shortened for the test
    repository_create(name="stalled", url=f"http://127.0.0.1:{silent_host}/team/graphs.git", user=users["admin"])
    auth = {"Authorization": f"Token {tokens['operator']}"}
    done: list[httpx.Response] = []
    sync = threading.Thread(target=lambda: done.append(httpx.post(
        f"{routed_server.url}/api/repos/stalled/sync/", headers=auth, timeout=120)))
    sync.start()
    try:
        for path in ("/healthz", "/api/graphs/", "/api/repos/"):
            answer = httpx.get(routed_server.url + path, headers=auth, timeout=120)
            assert answer.status_code == 200, (path, answer.text[:200])
            # answered while the sync still waits on the Git host, not after it
            assert sync.is_alive() and not done, path
    finally:
        sync.join(120)
    assert done and done[0].status_code == 409, done[0].text  # git gave up on the stall, saying so
    assert done[0].json()["error"]


def test_a_sign_in_waiting_on_a_silent_identity_provider_holds_up_no_page(routed_server, users, tokens,
                                                                          silent_host, settings):
    """Single sign-on's login asks the provider's discovery document (OIDC_TIMEOUT_SECONDS): the
    break-glass login page and the API answer meanwhile, and the sign-in ends on the failure page."""
    from accounts.sso_config import SsoConfig

    settings.SSO = SsoConfig(issuer=f"http://127.0.0.1:{silent_host}/realms/x", client_id="cp", client_secret="s",
                             scopes="openid", groups_claim="groups", username_claims=("preferred_username",),
                             role_groups={"admin": frozenset({"a"}), "operator": frozenset(), "viewer": frozenset()},
                             session_seconds=3600, timeout=4.0)
    done: list[httpx.Response] = []
    sign_in = threading.Thread(target=lambda: done.append(httpx.get(
        f"{routed_server.url}/auth/oidc/login/", timeout=120)))
    sign_in.start()
    try:
        for path, headers in (("/login/", {}), ("/healthz", {}),
                              ("/api/graphs/", {"Authorization": f"Token {tokens['viewer']}"})):
            answer = httpx.get(routed_server.url + path, headers=headers, timeout=120)
            assert answer.status_code == 200, (path, answer.text[:200])
            assert sign_in.is_alive() and not done, path  # while the provider is still being waited on
    finally:
        sign_in.join(120)
    assert done and done[0].status_code == 502  # the failure page, once OIDC_TIMEOUT_SECONDS ran out
    assert "The identity provider cannot be reached" in done[0].text


@pytest.mark.skipif(connection.vendor != "postgresql",
                    reason="the web deadline guards PostgreSQL connections (CI runs on PostgreSQL)")
def test_two_syncs_waiting_on_a_silent_git_host_hold_no_database_lock_that_pages_would_pay_for(
        routed_server, users, tokens, silent_host, monkeypatch, settings):
    """Found by bench/faults.py git-pause: the sync held its repository's row lock across the
    fetch, so a second sync waited on the database past the web deadline, the deadline cut it as
    an unanswering database, and every page of that web process answered 503 for a while. The
    fetch now waits on a file lock; the row lock is taken for the import only."""
    from availability import database

    monkeypatch.setattr(repo_git, "STALL_SECONDS", 6)
    monkeypatch.setattr(database, "_web", True)  # the web server's deadline, as uvicorn's lifespan sets it
    settings.DATABASE_WEB_QUERY_DEADLINE_S = 2.0
    repository_create(name="stalled", url=f"http://127.0.0.1:{silent_host}/team/graphs.git", user=users["admin"])
    auth = {"Authorization": f"Token {tokens['operator']}"}
    done: list[httpx.Response] = []
    syncs = [threading.Thread(target=lambda: done.append(httpx.post(
        f"{routed_server.url}/api/repos/stalled/sync/", headers=auth, timeout=120))) for _ in range(2)]
    for sync in syncs:
        sync.start()
    try:
        deadline = time.monotonic() + 8  # past the web deadline, while both syncs wait on the host
        while time.monotonic() < deadline:
            for path in ("/healthz", "/api/graphs/", "/api/repos/"):
                answer = httpx.get(routed_server.url + path, headers=auth, timeout=120)
                assert answer.status_code == 200, (path, answer.text[:200])
            time.sleep(0.5)
    finally:
        for sync in syncs:
            sync.join(120)
    assert sorted(r.status_code for r in done) == [409, 409], [r.text[:200] for r in done]
    # one gave up on the host; the other was told at once that a sync was running
    assert sum("is running now" in r.json()["error"] for r in done) == 1, [r.text[:200] for r in done]


def test_a_person_waiting_on_sync_now_waits_for_a_stalled_host_less_than_the_periodic_sync(users, monkeypatch):
    from repos.sync import repository_sync

    seen = []
    monkeypatch.setattr(repo_git.Mirror, "fetch", lambda self: seen.append(
        (self.stall_seconds(), self._ssh())) or (_ for _ in ()).throw(repo_git.GitError("stalled")))
    repo = repository_create(name="timed", url="https://git.example.com/team/graphs.git", user=users["admin"])
    repository_sync(repository=repo, wait=False)  # Sync now
    repository_sync(repository=repo)  # the periodic task
    assert [stall for stall, _ in seen] == [repo_git.INTERACTIVE_STALL_SECONDS, repo_git.STALL_SECONDS]
    assert "ServerAliveCountMax=1" in seen[0][1] and "ServerAliveCountMax=3" in seen[1][1]


def test_sync_now_against_a_silent_host_ends_at_its_bound_with_git_and_its_helper_gone(users, silent_host,
                                                                                       monkeypatch):
    """The bound kills git's whole process group: git-remote-http, left alive, held the output
    pipes open, and the caller with them, until its own stall bound (30 s here)."""
    import psutil

    from repos.sync import repository_sync

    monkeypatch.setattr(repo_git, "INTERACTIVE_TIMEOUT", 2)
    monkeypatch.setattr(repo_git, "INTERACTIVE_STALL_SECONDS", 30)
    repo = repository_create(name="silent", url=f"http://127.0.0.1:{silent_host}/team/graphs.git", user=users["admin"])
    started = time.monotonic()
    result = repository_sync(repository=repo, wait=False)
    assert "gave no answer in 2 s" in result.error, result.error
    assert time.monotonic() - started < 20  # well before the helper's own 30 s: not held by it
    helpers = [p for p in psutil.process_iter(["cmdline"])
               if any(str(silent_host) in part for part in (p.info["cmdline"] or []))]
    assert helpers == []


def test_sync_now_s_bound_is_the_whole_fetch_s_a_retry_gets_only_what_remains(users, silent_host, monkeypatch):
    """A first fetch that gave up on a stalled host by git's own stall bound was retried with the
    whole bound again: a paused Git host kept a person on Sync now 22 s, past the 12 s it is told
    (and past a 15 s client timeout in the fault bench)."""
    from repos.sync import repository_sync

    monkeypatch.setattr(repo_git, "INTERACTIVE_STALL_SECONDS", 3)  # git gives up after 3 s under 1 KB/s
    monkeypatch.setattr(repo_git, "INTERACTIVE_TIMEOUT", 4)
    ran: list[tuple[str, float]] = []
    real = repo_git.Mirror._run

    def timed(self, *args, **kwargs):
        started = time.monotonic()
        try:
            return real(self, *args, **kwargs)
        finally:
            if kwargs.get("remote"):
                ran.append((args[0], time.monotonic() - started))

    monkeypatch.setattr(repo_git.Mirror, "_run", timed)
    repo = repository_create(name="stalling", url=f"http://127.0.0.1:{silent_host}/team/graphs.git",
                             user=users["admin"])
    result = repository_sync(repository=repo, wait=False)
    assert "gave no answer in 4 s" in result.error, (result.error, ran)
    assert ran[0][0] == "fetch" and ran[0][1] >= 2.5, ran  # the first fetch ended by git's own stall bound
    assert sum(seconds for _, seconds in ran) < 4 + 0.8, ran  # and the retry had only what was left
