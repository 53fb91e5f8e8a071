"""Credentials reach git and nothing else: a repository behind HTTP Basic authentication (Debian's
git http-backend), fetched and pushed with the stored token; without it, or with a wrong one,
the sync fails with a message that never contains the token."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphs.models import Graph
from graphs.services import graph_update
from repos import services
from repos.export import repository_export
from repos.models import ExportState, SyncState
from repos.sync import repository_sync
from tests.git_fixtures import _free_port, git, manifest

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.git_fixtures"]
TOKEN = "glpat-s3cr3t-token-value"


@pytest.fixture(autouse=True)
def _mirrors(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


@pytest.fixture
def http_remote(remote):
    git("--git-dir", str(remote.bare), "config", "http.receivepack", "true")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "git_http_server.py"), str(port),
                             str(remote.root), "bot", TOKEN], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    try:
        yield remote, f"http://127.0.0.1:{port}/cgi-bin/git/origin.git"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_repository_behind_basic_auth_syncs_and_takes_pushes_with_its_token(http_remote, users,
                                                                             django_capture_on_commit_callbacks):
    remote, url = http_remote
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = services.repository_create(name="fleet", url=url, username="bot", password=TOKEN)
    result = repository_sync(repository=repo)
    assert result.error == "" and Graph.objects.filter(name="alpha").exists()

    graph = Graph.objects.get(name="alpha")
    spec = graph.head.graph_spec
    pools = list(spec.services)
    pools[1] = pools[1].model_copy(update={"replicas": 4})
    with django_capture_on_commit_callbacks(execute=False):
        graph_update(graph=graph, spec=spec.model_copy(update={"services": pools}), user=users["operator"],
                     message="over https")
    [export] = repository_export(repository=repo)
    assert export.state == ExportState.PUSHED
    assert "replicas: 4" in remote.show("main", "alpha.yaml")
    # The token is in no file the mirror keeps.
    mirror_files = [p for p in (Path(services.mirror_for(repo).path)).rglob("*") if p.is_file()]
    assert mirror_files and not any(TOKEN.encode() in p.read_bytes() for p in mirror_files)


@pytest.mark.parametrize("password", ["", "wrong-token"])
def test_without_the_right_token_the_sync_fails_and_says_so_without_the_token(http_remote, password):
    remote, url = http_remote
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = services.repository_create(name="fleet", url=url, username="bot", password=password)
    result = repository_sync(repository=repo)
    assert result.error and ("401" in result.error or "Authentication failed" in result.error
                             or "could not read Username" in result.error), result.error
    assert password not in result.error or not password
    repo.refresh_from_db()
    assert repo.state == SyncState.FAILED and not Graph.objects.exists()
