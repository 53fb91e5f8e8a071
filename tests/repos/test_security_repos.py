"""Whoever can push to a linked repository is not a product user (issue #42, findings 2 and 3),
against real Git repositories (tests/git_fixtures.py):

* a file naming an existing graph that is not kept in Git does not take it over (it became the
  graph's next revision, and the next apply deployed it); an operator links one explicitly;
* a revision from Git is credited to no user: the commit's author, which Git does not verify,
  was mapped by e-mail to the product user of that address (an admin, here);
* a crafted path (over 1,000 characters, in a tree written with Git's plumbing) stopped the
  periodic sync of every repository after it (an uncaught DataError on PostgreSQL), silently."""

from __future__ import annotations

import subprocess

import pytest

from audit.models import AuditRecord
from core.specio import load_yaml
from graphs.models import Graph
from graphs.services import graph_import
from repos import services
from repos.models import GraphLink, LinkState, SyncState
from repos.sync import repository_sync
from repos.tasks import repositories_sync
from tests.git_fixtures import Remote, git, manifest

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.git_fixtures"]


@pytest.fixture(autouse=True)
def _mirrors(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


def _made_here(name: str, user) -> Graph:
    return graph_import(obj=load_yaml(manifest(name), max_bytes=1 << 20), user=user)[0]


def _replicas(graph: Graph) -> int:
    return graph.head.graph_spec.services[1].replicas


def test_a_push_naming_an_existing_graph_does_not_take_it_over(remote, users, client_for):
    prod = _made_here("prod", users["operator"])
    remote.write("graphs/prod.yaml", manifest("prod", replicas=7))
    remote.commit("scale prod", author="Mallory <mallory@example.test>")
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url, path="graphs")

    result = repository_sync(repository=repo)

    prod.refresh_from_db()
    assert prod.revisions.count() == 1 and _replicas(prod) == 1
    assert not GraphLink.objects.filter(graph=prod).exists()
    [refused] = result.refused
    assert refused["path"] == "graphs/prod.yaml" and refused["findings"][0]["code"] == "gitops_adopt"
    assert not AuditRecord.objects.filter(action="graph.update", target="prod").exists()
    page = client_for("viewer").get("/repos/fleet/").content.decode()
    assert "exists and is not kept in Git; a file does not take over a graph" in page


def test_a_revision_from_git_is_credited_to_no_user_whatever_e_mail_the_commit_claims(remote, users):
    assert users["admin"].email == "admin@example.test"
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha", author="Admin <admin@example.test>")  # anyone can write this
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url)

    repository_sync(repository=repo)

    head = Graph.objects.get(name="alpha").head
    assert head.created_by is None
    assert head.git_commit.author_email == "admin@example.test"  # kept, as the commit states it
    assert "commit author, unverified: Admin <admin@example.test>" in head.message
    record = AuditRecord.objects.get(action="graph.create", target="alpha")
    assert record.actor is None and record.via == "git" and record.actor_name != "admin"
    assert "unverified: Admin <admin@example.test>" in record.message


def test_an_operator_links_an_existing_graph_to_a_file_explicitly_and_it_is_audited(remote, users, client_for,
                                                                                      api_for):
    prod = _made_here("prod", users["operator"])
    _made_here("other", users["operator"])
    remote.write("graphs/prod.yaml", manifest("prod", replicas=7))
    remote.commit("prod in git")
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url, path="graphs")
    repository_sync(repository=repo)  # refused: not linked yet
    assert prod.revisions.count() == 1

    assert client_for("viewer").post("/repos/fleet/link/", {"graph": "prod", "path": "graphs/prod.yaml"}
                                     ).status_code == 403
    outside = client_for("operator").post("/repos/fleet/link/", {"graph": "prod", "path": "elsewhere/prod.yaml"},
                                          follow=True).content.decode()
    assert "is not a graph&#x27;s file in fleet" in outside
    linked = client_for("operator").post("/repos/fleet/link/", {"graph": "prod", "path": "graphs/prod.yaml"},
                                         follow=True).content.decode()
    assert "prod is now kept in fleet:graphs/prod.yaml" in linked
    record = AuditRecord.objects.get(action="graph.link")
    assert record.actor == users["operator"] and record.after == {"repository": "fleet", "path": "graphs/prod.yaml"}

    result = repository_sync(repository=repo)  # no new commit: the linked file is read at the tip

    assert [i["graph"] for i in result.imported] == ["prod"]
    prod.refresh_from_db()
    assert prod.revisions.count() == 2 and _replicas(prod) == 7 and prod.head.created_by is None
    assert GraphLink.objects.get(graph=prod).state == LinkState.LINKED
    again = api_for("operator").post("/api/repos/fleet/link/", {"graph": "prod", "path": "graphs/prod.yaml"},
                                     format="json")
    assert again.status_code == 409 and "kept in fleet:graphs/prod.yaml already" in again.json()["detail"]
    taken = api_for("operator").post("/api/repos/fleet/link/", {"graph": "other", "path": "graphs/prod.yaml"},
                                     format="json")
    assert taken.status_code == 409 and "holds graph prod already" in taken.json()["detail"]


def _push_crafted_file(remote: Remote, name: str, text: str) -> None:
    """A commit whose tree holds ``name`` at the root: written with Git's plumbing, as an
    attacker would, since no file system holds a name that long."""
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=remote.work, input=text, text=True,
                          capture_output=True, check=True).stdout.strip()
    entries = git("ls-tree", "HEAD", cwd=remote.work)
    tree = subprocess.run(["git", "mktree"], cwd=remote.work, input=entries + f"100644 blob {blob}\t{name}\n",
                          text=True, capture_output=True, check=True).stdout.strip()
    commit = git("commit-tree", tree, "-p", "HEAD", "-m", "a long name", cwd=remote.work).strip()
    git("push", "-q", "origin", f"{commit}:refs/heads/{remote.branch}", cwd=remote.work)


@pytest.mark.django_db(transaction=True)
def test_a_path_too_long_to_store_is_refused_on_the_page_and_every_other_repository_still_syncs(
        tmp_path, users, client_for):
    crafted = Remote(tmp_path / "crafted")
    crafted.write("alpha.yaml", manifest("alpha"))
    crafted.commit("add alpha")
    crafted.push()
    services.repository_create(name="a-crafted", url=crafted.url)
    repositories_sync()  # the first sync: alpha, and a synced commit to go on from
    long_name = "x" * 1100 + ".yaml"
    _push_crafted_file(crafted, long_name, manifest("beta"))
    clean = Remote(tmp_path / "clean")
    clean.write("gamma.yaml", manifest("gamma"))
    clean.commit("add gamma")
    clean.push()
    services.repository_create(name="b-clean", url=clean.url)

    repositories_sync()  # the periodic task, as Celery beat runs it

    assert Graph.objects.filter(name="gamma").exists()  # the repository after it synced
    repo = services.Repository.objects.get(name="a-crafted")
    assert repo.state == SyncState.OK
    [refused] = repo.last_sync["refused"]
    assert refused["unlinked"] and len(refused["path"]) < 300
    assert "1,105 characters long; a graph's file may have at most 1,000" in refused["findings"][0]["message"]
    assert not Graph.objects.filter(name="beta").exists()
    assert not GraphLink.objects.filter(path__startswith="xxx").exists()
    page = client_for("viewer").get("/repos/a-crafted/").content.decode()
    assert "1,105 characters long" in page


def test_a_repository_error_shows_viewers_no_server_path(remote, users, client_for, settings):
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url)
    mirror = services.mirror_for(repo).path
    mirror.parent.mkdir(parents=True)
    mirror.write_text("")  # something else where the mirror goes (a crash, an operator's mistake)

    result = repository_sync(repository=repo)

    assert "the mirror could not be made" in result.error
    page = client_for("viewer").get("/repos/fleet/").content.decode()
    assert str(settings.VAR_DIR) not in page and "the mirror could not be made" in page


def test_a_file_naming_a_graph_after_a_page_is_refused_and_the_rest_of_the_sync_goes_on(remote):
    """A graph named "new" would be hidden by the create form (/graphs/new/): its file is refused
    at metadata.name, as any refused file is, and the file beside it becomes its graph."""
    remote.write("graphs/new.yaml", manifest("new"))
    remote.write("graphs/prod.yaml", manifest("prod"))
    remote.commit("two graphs")
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url, path="graphs")

    result = repository_sync(repository=repo)

    [refused] = result.refused
    assert refused["path"] == "graphs/new.yaml" and refused["findings"][0]["code"] == "name_is_a_page"
    assert [i["graph"] for i in result.imported] == ["prod"]
    assert not Graph.objects.filter(name="new").exists()
    assert GraphLink.objects.get(path="graphs/new.yaml").state == LinkState.INVALID
