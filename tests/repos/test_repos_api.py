"""Repositories through the API, the webhook, the pages, manage.py and the dynamo-cp CLI, all
against real repositories."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.tokens import token_create
from controlplane.celery import app as celery_app
from dynamo_cp import exits
from graphs.models import Deployment, Graph
from repos import services
from repos.models import Repository
from repos.sync import repository_sync
from tests.git_fixtures import manifest

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.git_fixtures"]
ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-webhook"


@pytest.fixture(autouse=True)
def _mirrors(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


@pytest.fixture
def eager():
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def pushed(remote):
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    return remote


def test_credentials_are_write_only(api_for, pushed):
    body = {"name": "fleet", "url": pushed.url, "username": "bot", "password": "tok-123456",
            "ssh_key": "-----BEGIN KEY-----", "webhook_secret": SECRET}
    created = api_for("admin").post("/api/repos/", body, format="json")
    assert created.status_code == 201, created.content
    for response in (created, api_for("viewer").get("/api/repos/fleet/"), api_for("viewer").get("/api/repos/")):
        text = response.content.decode()
        assert "tok-123456" not in text and "BEGIN KEY" not in text and SECRET not in text and '"bot"' not in text
    assert created.json()["credentials"] == {"username_set": True, "password_set": True, "ssh_key_set": True,
                                             "webhook_secret_set": True}
    # A change that leaves a credential out keeps it.
    api_for("admin").patch("/api/repos/fleet/", {"mode": "propose"}, format="json")
    assert Repository.objects.get(name="fleet").password == "tok-123456"


def test_only_admins_register_and_operators_sync(api_for, pushed):
    body = {"name": "fleet", "url": pushed.url}
    assert api_for("operator").post("/api/repos/", body, format="json").status_code == 403
    assert api_for("admin").post("/api/repos/", body, format="json").status_code == 201
    assert api_for("viewer").post("/api/repos/fleet/sync/").status_code == 403
    synced = api_for("operator").post("/api/repos/fleet/sync/")
    assert synced.status_code == 200 and synced.json()["counts"]["imported"] == 1
    links = api_for("viewer").get("/api/repos/fleet/links/").json()["results"]
    assert [(x["path"], x["graph"], x["state"]) for x in links] == [("alpha.yaml", "alpha", "linked")]


@pytest.mark.parametrize(("body", "field"), [
    ({"url": "not a url"}, "url"),
    ({"url": "https://bot:tok@example.test/r.git"}, "password"),
    ({"branch": "../x"}, "branch"),
    ({"path": "../../etc"}, "path"),
    ({"name": "Bad_Name"}, "name"),
])
def test_bad_registrations_are_refused_with_what_is_wrong(api_for, pushed, body, field):
    response = api_for("admin").post("/api/repos/", {"name": "fleet", "url": pushed.url, **body}, format="json")
    assert response.status_code == 400
    assert field in response.content.decode()
    assert not Repository.objects.exists()


def test_a_second_repository_with_the_same_name_is_a_conflict(api_for, pushed):
    api_for("admin").post("/api/repos/", {"name": "fleet", "url": pushed.url}, format="json")
    again = api_for("admin").post("/api/repos/", {"name": "fleet", "url": pushed.url}, format="json")
    assert again.status_code in (400, 409) and "fleet" in again.content.decode()


def test_revisions_in_the_api_and_on_the_page_name_their_commit(api_for, client_for, pushed):
    repo = services.repository_create(name="fleet", url=pushed.url)
    repository_sync(repository=repo)
    sha = pushed.log(fmt="%H")[0]
    [row] = api_for("viewer").get("/api/graphs/alpha/revisions/").json()["results"]
    assert row["git"]["sha"] == sha and row["git"]["author_name"] == "Alice Git"
    assert row["git"]["message"] == "add alpha" and row["git"]["direction"] == "from_git"
    assert api_for("viewer").get("/api/graphs/alpha/revisions/1/").json()["git"]["sha"] == sha
    page = client_for("viewer").get("/graphs/alpha/revisions/").content.decode()
    assert sha[:12] in page and "Alice Git" in page
    graph_page = client_for("viewer").get("/graphs/alpha/").content.decode()
    assert 'id="git"' in graph_page and "alpha.yaml" in graph_page and "jqPathExpressions" in graph_page


def _github(body: bytes, secret: str = SECRET) -> dict:
    sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"HTTP_X_HUB_SIGNATURE_256": f"sha256={sig}", "HTTP_X_GITHUB_EVENT": "push"}


def _gitea(body: bytes, secret: str = SECRET) -> dict:
    return {"HTTP_X_GITEA_SIGNATURE": hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
            "HTTP_X_GITEA_EVENT": "push"}


def _gitlab(body: bytes, secret: str = SECRET) -> dict:
    return {"HTTP_X_GITLAB_TOKEN": secret, "HTTP_X_GITLAB_EVENT": "Push Hook"}


@pytest.mark.parametrize("sign", [_github, _gitea, _gitlab])
def test_a_signed_push_webhook_syncs_the_new_commit(client, pushed, eager, sign, django_capture_on_commit_callbacks):
    repo = services.repository_create(name="fleet", url=pushed.url, webhook_secret=SECRET)
    repository_sync(repository=repo)
    pushed.write("alpha.yaml", manifest("alpha", replicas=3))
    sha = pushed.commit("three workers")
    pushed.push()
    body = json.dumps({"ref": "refs/heads/main", "after": sha}).encode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/repos/fleet/webhook/", body, content_type="application/json", **sign(body))
    assert response.status_code == 202, response.content
    head = Graph.objects.get(name="alpha").head
    assert head.number == 2 and head.git_commit.sha == sha


@pytest.mark.parametrize("sign", [_github, _gitea, _gitlab])
def test_a_webhook_with_a_wrong_secret_is_refused_and_syncs_nothing(client, pushed, sign):
    services.repository_create(name="fleet", url=pushed.url, webhook_secret=SECRET)
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    response = client.post("/api/repos/fleet/webhook/", body, content_type="application/json",
                           **sign(body, "wrong"))
    assert response.status_code == 401 and "does not match" in response.json()["detail"]
    assert not Graph.objects.exists()


def test_a_webhook_without_signature_or_secret_or_for_another_branch(client, pushed):
    services.repository_create(name="open", url=pushed.url)
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    no_secret = client.post("/api/repos/open/webhook/", body, content_type="application/json", **_github(body))
    assert no_secret.status_code == 403 and "no webhook secret" in no_secret.json()["detail"]
    services.repository_create(name="fleet", url=pushed.url, webhook_secret=SECRET)
    unsigned = client.post("/api/repos/fleet/webhook/", body, content_type="application/json")
    assert unsigned.status_code == 401 and "X-Hub-Signature-256" in unsigned.json()["detail"]
    other = json.dumps({"ref": "refs/heads/feature"}).encode()
    ignored = client.post("/api/repos/fleet/webhook/", other, content_type="application/json", **_github(other))
    assert ignored.status_code == 200 and ignored.json()["synced"] is False
    garbage = b"not json"
    bad = client.post("/api/repos/fleet/webhook/", garbage, content_type="application/json", **_github(garbage))
    assert bad.status_code == 400
    assert not Graph.objects.exists()


def test_the_pages_register_show_and_sync_a_repository(client_for, pushed):
    operator = client_for("operator")
    refused = operator.post("/repos/", {"name": "fleet", "url": pushed.url, "branch": "main", "mode": "direct"})
    assert refused.status_code == 403 and "needs the admin role" in refused.content.decode()
    admin = client_for("admin")
    bad = admin.post("/repos/", {"name": "fleet", "url": "nope", "branch": "main", "mode": "direct"})
    assert bad.status_code == 400 and "is not a Git URL" in bad.content.decode()
    added = admin.post("/repos/", {"name": "fleet", "url": pushed.url, "branch": "main", "mode": "direct",
                                   "password": "tok-999"}, follow=True)
    assert added.status_code == 200 and "registered" in added.content.decode()
    assert "tok-999" not in added.content.decode()
    synced = operator.post("/repos/fleet/sync/", follow=True).content.decode()
    assert "1 revision(s) imported" in synced and "alpha.yaml" in synced
    pushed.write("alpha.yaml", "apiVersion: nvidia.com/v1beta1\nkind: DynamoGraphDeployment\nmetadata: {}\n")
    bad_sha = pushed.commit("broken")
    pushed.push()
    page = operator.post("/repos/fleet/sync/", follow=True).content.decode()
    assert "1 refused" in page and bad_sha[:12] in page and "The graph keeps its last good revision" in page


def test_the_management_command_syncs_every_repository(pushed, capsys):
    services.repository_create(name="fleet", url=pushed.url)
    call_command("repos_sync")
    assert "fleet: at " in capsys.readouterr().out and Graph.objects.filter(name="alpha").exists()


def test_apply_of_a_graph_argo_cd_applies_is_refused_as_a_commit_to_git_and_scaling_stays(pushed, users):
    from core.errors import OperationRefused
    from graphs.operations import graph_apply

    repo = services.repository_create(name="fleet", url=pushed.url)
    repository_sync(repository=repo)
    graph = Graph.objects.get(name="alpha")
    Deployment.objects.create(graph=graph, runtime="kubernetes", namespace="ns", revision=graph.head, active=True,
                              ownership={"gitops": {"tool": "Argo CD", "application": "fleet", "namespace": "",
                                                    "evidence": "annotation argocd.argoproj.io/tracking-id=x"}})
    with pytest.raises(OperationRefused, match="Argo CD applies alpha from Git"):
        graph_apply(graph=graph, user=users["operator"], runtime="kubernetes")


# ------------------------------------------------------------------ the dynamo-cp CLI


def _cli(server, key: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAMO_CP_")}
    env.update(XDG_CONFIG_HOME=str(home), DYNAMO_CP_URL=server.url, DYNAMO_CP_TOKEN=key)
    return subprocess.run([sys.executable, "-m", "dynamo_cp", *args], capture_output=True, env=env, cwd=ROOT,
                          timeout=120)


@pytest.mark.django_db(transaction=True)
def test_dynamo_cp_repos_add_sync_status_and_list(live_server, users, pushed, tmp_path):
    _t, admin = token_create(user=users["admin"], name="cli", via="system")
    secret = tmp_path / "token"
    secret.write_text("tok-abc\n")
    added = _cli(live_server, admin, tmp_path, "repos", "add", "fleet", "--url", pushed.url, "--branch", "main",
                 "--password-file", str(secret))
    assert added.returncode == 0, added.stderr
    assert "alpha.yaml: alpha revision 1" in added.stdout.decode()
    assert Repository.objects.get(name="fleet").password == "tok-abc"

    pushed.write("beta.yaml", "kind: [\n")
    bad = pushed.commit("broken beta")
    pushed.push()
    synced = _cli(live_server, admin, tmp_path, "repos", "sync", "fleet")
    assert synced.returncode == exits.INVALID, synced.stderr  # a file was refused
    assert f"beta.yaml: refused at {bad[:12]}" in synced.stdout.decode()

    status = _cli(live_server, admin, tmp_path, "repos", "status", "fleet")
    text = status.stdout.decode()
    assert status.returncode == 0 and "alpha.yaml  alpha" in text and "invalid" in text
    listed = json.loads(_cli(live_server, admin, tmp_path, "repos", "list", "-o", "json").stdout)
    assert [(r["name"], r["graphs"], r["state"]) for r in listed] == [("fleet", 2, "ok")]
    assert "tok-abc" not in json.dumps(listed)


def test_the_periodic_task_is_scheduled_and_syncs_every_repository(pushed, settings):
    celery_app.loader.import_default_modules()
    task = settings.CELERY_BEAT_SCHEDULE["repos-sync"]["task"]
    assert task in celery_app.tasks
    services.repository_create(name="fleet", url=pushed.url)
    assert celery_app.tasks[task].apply().get() == 1
    assert Graph.objects.get(name="alpha").head.git_commit.message == "add alpha"
