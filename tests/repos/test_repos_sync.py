"""Git → product: commits in a real repository (file:// and git daemon) become revisions."""

from __future__ import annotations

import pytest

from graphs.models import Graph
from repos import services
from repos.models import GraphLink, LinkState, RevisionCommit, SyncState
from repos.sync import repository_sync
from tests.git_fixtures import manifest

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.git_fixtures"]


@pytest.fixture(autouse=True)
def _mirrors(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


def _repo(url: str, **kw):
    return services.repository_create(name=kw.pop("name", "fleet"), url=url, **kw)


def test_first_sync_imports_each_file_with_the_commit_that_last_changed_it(remote):
    remote.write("graphs/alpha.yaml", manifest("alpha"))
    first = remote.commit("add alpha")
    remote.write("graphs/beta.yaml", manifest("beta", replicas=2))
    remote.write("README.md", "not a graph\n")
    remote.write("graphs/notes/skip.yaml", manifest("nested"))  # a subfolder is not the folder
    second = remote.commit("add beta", author="Bob Ops <bob@example.test>")
    remote.push()
    repo = _repo(remote.url, path="graphs")

    result = repository_sync(repository=repo)

    assert result.error == ""
    assert sorted(i["graph"] for i in result.imported) == ["alpha", "beta"]
    alpha, beta = Graph.objects.get(name="alpha"), Graph.objects.get(name="beta")
    assert alpha.head.git_commit.sha == first and alpha.head.git_commit.author_name == "Alice Git"
    assert beta.head.git_commit.sha == second and beta.head.git_commit.author_email == "bob@example.test"
    # The author as the commit states it, never mapped to a user (tests/repos/test_security_repos.py).
    assert beta.head.message == f"add beta (from fleet at {second[:12]}; commit author, unverified: Bob Ops " \
                                "<bob@example.test>)"
    assert beta.head.graph_spec.services[1].replicas == 2
    assert not Graph.objects.filter(name="nested").exists()
    repo.refresh_from_db()
    assert repo.state == SyncState.OK and repo.synced_commit == second


def test_each_new_commit_that_changes_a_file_becomes_the_next_revision(remote):
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = _repo(remote.url)
    repository_sync(repository=repo)
    shas = []
    for replicas in (2, 3):
        remote.write("alpha.yaml", manifest("alpha", replicas=replicas))
        shas.append(remote.commit(f"alpha to {replicas} workers"))
    remote.write("other.txt", "x")
    remote.commit("not a manifest")
    remote.push()

    result = repository_sync(repository=repo)

    graph = Graph.objects.get(name="alpha")
    revisions = list(graph.revisions.order_by("number"))
    assert [r.number for r in revisions] == [1, 2, 3]
    assert [r.git_commit.sha for r in revisions[1:]] == shas
    assert [r.message.split(" (from fleet at ")[0] for r in revisions[1:]] == ["alpha to 2 workers",
                                                                               "alpha to 3 workers"]
    assert [r.graph_spec.services[1].replicas for r in revisions] == [1, 2, 3]
    assert result.commits == 3  # the commit of other.txt is walked, and changes no graph
    assert revisions[2].source_yaml == remote.show("main", "alpha.yaml")  # kept as written


def test_a_second_sync_with_nothing_new_changes_nothing(remote):
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = _repo(remote.url)
    repository_sync(repository=repo)
    again = repository_sync(repository=repo)
    assert again.imported == [] and again.error == ""
    assert Graph.objects.get(name="alpha").revisions.count() == 1


def test_a_removed_file_marks_its_graph_removed_from_git_and_keeps_it(remote):
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = _repo(remote.url)
    repository_sync(repository=repo)
    remote.remove("alpha.yaml")
    gone = remote.commit("retire alpha")
    remote.push()

    result = repository_sync(repository=repo)

    assert result.removed == [{"graph": "alpha", "commit": gone, "path": "alpha.yaml"}]
    link = GraphLink.objects.get(path="alpha.yaml")
    assert link.state == LinkState.REMOVED and link.removed_commit == gone
    assert Graph.objects.get(name="alpha").revisions.count() == 1

    remote.write("alpha.yaml", manifest("alpha", replicas=4))  # back again: linked again
    remote.commit("alpha returns")
    remote.push()
    repository_sync(repository=repo)
    link.refresh_from_db()
    assert link.state == LinkState.LINKED
    assert Graph.objects.get(name="alpha").head.graph_spec.services[1].replicas == 4


def test_an_invalid_file_is_refused_with_findings_and_the_commit_and_the_graph_keeps_its_last_good_revision(remote):
    remote.write("alpha.yaml", manifest("alpha", replicas=2))
    remote.commit("add alpha")
    remote.push()
    repo = _repo(remote.url)
    repository_sync(repository=repo)
    bad = manifest("alpha", replicas=7).replace("replicas: 7", "replicas: -3")
    assert "replicas: -3" in bad
    remote.write("alpha.yaml", bad)
    refused = remote.commit("oops")
    remote.write("broken.yaml", "apiVersion: nvidia.com/v1beta1\nkind: [\n")
    remote.commit("half a file")
    remote.push()

    result = repository_sync(repository=repo)

    by_path = {r["path"]: r for r in result.refused}
    assert by_path["alpha.yaml"]["commit"] == refused
    assert any("replicas" in f["path"] for f in by_path["alpha.yaml"]["findings"])
    assert all(refused[:12] in f["message"] for f in by_path["alpha.yaml"]["findings"])
    assert "malformed YAML" in by_path["broken.yaml"]["findings"][0]["message"]
    graph = Graph.objects.get(name="alpha")
    assert graph.revisions.count() == 1 and graph.head.graph_spec.services[1].replicas == 2
    link = GraphLink.objects.get(path="alpha.yaml")
    assert link.state == LinkState.INVALID and link.refused_commit == refused
    assert GraphLink.objects.get(path="broken.yaml").graph is None

    remote.write("alpha.yaml", manifest("alpha", replicas=5))  # fixed: linked again
    remote.commit("fix alpha")
    remote.push()
    repository_sync(repository=repo)
    link.refresh_from_db()
    assert link.state == LinkState.LINKED and link.findings == []
    assert graph.revisions.count() == 2


def test_a_file_that_renames_its_graph_is_refused(remote):
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = _repo(remote.url)
    repository_sync(repository=repo)
    remote.write("alpha.yaml", manifest("gamma"))
    remote.commit("rename")
    remote.push()
    result = repository_sync(repository=repo)
    assert result.refused[0]["findings"][0]["code"] == "rename"
    assert not Graph.objects.filter(name="gamma").exists()


def test_sync_over_git_daemon(remote, git_daemon):
    remote.write("alpha.yaml", manifest("alpha"))
    sha = remote.commit("add alpha")
    remote.push()
    repo = _repo(git_daemon)
    result = repository_sync(repository=repo)
    assert result.error == "" and result.commit == sha
    assert RevisionCommit.objects.get(revision__graph__name="alpha").sha == sha


def test_an_unreachable_repository_is_recorded_not_raised(tmp_path):
    repo = _repo(f"file://{tmp_path}/nowhere.git")
    result = repository_sync(repository=repo)
    assert "nowhere.git" in result.error
    repo.refresh_from_db()
    assert repo.state == SyncState.FAILED and repo.error == result.error


def test_an_empty_repository_or_a_wrong_branch_is_an_error_that_names_the_branch(remote):
    repo = _repo(remote.url)
    assert "no branch 'main'" in repository_sync(repository=repo).error
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    other = _repo(remote.url, name="other", branch="production")
    assert "no branch 'production'" in repository_sync(repository=other).error


def test_a_file_larger_than_a_manifest_may_be_is_refused_unread(remote, settings):
    settings.MAX_MANIFEST_BYTES = 4096
    remote.write("huge.yaml", manifest("huge") + "#" * 8192 + "\n")
    remote.commit("a big file")
    remote.push()
    result = repository_sync(repository=_repo(remote.url))
    assert result.refused[0]["findings"][0]["code"] == "too_large"
    assert not Graph.objects.exists()


def test_removing_a_repository_keeps_its_graphs_and_drops_its_mirror(remote, django_capture_on_commit_callbacks):
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = _repo(remote.url)
    repository_sync(repository=repo)
    mirror = services.mirror_for(repo).path
    assert mirror.exists()
    with django_capture_on_commit_callbacks(execute=True):
        services.repository_delete(repository=repo)
    assert not mirror.exists()
    graph = Graph.objects.get(name="alpha")
    assert graph.revisions.count() == 1
    assert graph.head.git_commit.repository is None and graph.head.git_commit.message == "add alpha"
