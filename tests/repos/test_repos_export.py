"""Product → Git: revisions made here become commits in a real repository, never forced; a
change made in Git meanwhile is a conflict with all three sides kept."""

from __future__ import annotations

import pytest

from graphs.models import Graph
from graphs.services import graph_update
from repos import services
from repos.export import repository_export
from repos.models import Direction, ExportState, GraphLink, Mode
from repos.sync import repository_sync
from tests.git_fixtures import git, manifest

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.git_fixtures"]


@pytest.fixture(autouse=True)
def _mirrors(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


@pytest.fixture
def linked(remote, users):
    """alpha.yaml in the remote, synced into graph alpha."""
    remote.write("graphs/alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url, path="graphs")
    repository_sync(repository=repo)
    return repo


def _change(users, replicas: int, message: str, captured):
    graph = Graph.objects.get(name="alpha")
    spec = graph.head.graph_spec
    services_ = list(spec.services)
    services_[1] = services_[1].model_copy(update={"replicas": replicas})
    with captured(execute=False):
        return graph_update(graph=graph, spec=spec.model_copy(update={"services": services_}),
                            user=users["operator"], message=message)


def _replicas_in(text: str) -> int:
    import yaml

    return yaml.safe_load(text)["spec"]["components"][1]["replicas"]


def test_a_revision_made_here_becomes_a_commit_by_its_author_on_the_branch(remote, linked, users,
                                                                          django_capture_on_commit_callbacks):
    users["operator"].email = "olga@example.test"
    users["operator"].save()
    revision = _change(users, 3, "decode to 3 for the evening peak", django_capture_on_commit_callbacks)

    [export] = repository_export(repository=linked)

    assert export.state == ExportState.PUSHED and export.branch == "main"
    head = remote.log()[0].split(" ", 1)
    assert head[0] == export.commit
    assert head[1] == "operator <olga@example.test> decode to 3 for the evening peak"
    assert _replicas_in(remote.show("main", "graphs/alpha.yaml")) == 3
    assert revision.git_commit.direction == Direction.TO_GIT and revision.git_commit.sha == export.commit
    # The next sync sees its own commit and makes no revision of it.
    result = repository_sync(repository=linked)
    assert result.imported == [] and Graph.objects.get(name="alpha").revisions.count() == 2


def test_each_revision_reaches_git_in_order(remote, linked, users, django_capture_on_commit_callbacks):
    for replicas in (2, 3, 4):
        _change(users, replicas, f"to {replicas}", django_capture_on_commit_callbacks)
    exports = repository_export(repository=linked)
    assert [e.state for e in exports] == [ExportState.PUSHED] * 3
    assert [line.split(" ", 3)[-1] for line in remote.log()[:3]] == ["to 4", "to 3", "to 2"]
    assert _replicas_in(remote.show("main", "graphs/alpha.yaml")) == 4


def test_propose_mode_pushes_a_review_branch_and_leaves_the_branch_alone(remote, linked, users,
                                                                        django_capture_on_commit_callbacks):
    services.repository_update(repository=linked, mode=Mode.PROPOSE)
    before = remote.log()[0]
    revision = _change(users, 5, "try 5", django_capture_on_commit_callbacks)
    [export] = repository_export(repository=linked)
    assert export.state == ExportState.PROPOSED
    assert export.branch == f"dynamo-cp/alpha-r{revision.number}"
    assert export.branch in remote.branches() and remote.log()[0] == before
    assert _replicas_in(remote.show(export.branch, "graphs/alpha.yaml")) == 5


def test_a_file_changed_in_git_since_is_a_conflict_never_overwritten_and_both_sides_are_kept(
        remote, linked, users, django_capture_on_commit_callbacks):
    # Git and the product change the same graph at the same time.
    remote.write("graphs/alpha.yaml", manifest("alpha", replicas=7))
    git_side = remote.commit("Git says 7")
    remote.push()
    revision = _change(users, 2, "product says 2", django_capture_on_commit_callbacks)

    [export] = repository_export(repository=linked)

    assert export.state == ExportState.CONFLICT
    assert remote.log()[0].startswith(git_side)  # the branch is Git's: nothing forced over it
    assert _replicas_in(remote.show("main", "graphs/alpha.yaml")) == 7
    assert _replicas_in(export.base_text) == 1 and _replicas_in(export.ours_text) == 2
    assert _replicas_in(export.theirs_text) == 7
    assert "<<<<<<< product r2" in export.merged_text and "||||||| base" in export.merged_text
    assert ">>>>>>> git main" in export.merged_text
    assert export.branch == f"dynamo-cp/alpha-r{revision.number}"
    assert _replicas_in(remote.show(export.branch, "graphs/alpha.yaml")) == 2  # ours kept in Git too
    # Git's side becomes the next revision; the product's stays in the history.
    repository_sync(repository=linked)
    graph = Graph.objects.get(name="alpha")
    assert [r.graph_spec.services[1].replicas for r in graph.revisions.order_by("number")] == [1, 2, 7]
    assert graph.head.git_commit.sha == git_side


def test_a_revision_overtaken_by_a_sync_is_a_conflict_too(remote, linked, users, django_capture_on_commit_callbacks):
    _change(users, 2, "product says 2", django_capture_on_commit_callbacks)
    remote.write("graphs/alpha.yaml", manifest("alpha", replicas=9))
    remote.commit("Git says 9")
    remote.push()
    repository_sync(repository=linked)  # the sync runs before the export
    [export] = repository_export(repository=linked)
    assert export.state == ExportState.CONFLICT
    assert _replicas_in(remote.show("main", "graphs/alpha.yaml")) == 9


def test_a_file_removed_from_git_is_not_brought_back(remote, linked, users, django_capture_on_commit_callbacks):
    remote.remove("graphs/alpha.yaml")
    remote.commit("retire alpha")
    remote.push()
    repository_sync(repository=linked)
    _change(users, 2, "still want it", django_capture_on_commit_callbacks)
    [export] = repository_export(repository=linked)
    assert export.state == ExportState.CONFLICT and "removed" in export.error
    assert "graphs/alpha.yaml" not in git("--git-dir", str(remote.bare), "ls-tree", "-r", "--name-only", "main")
    assert GraphLink.objects.get(path="graphs/alpha.yaml").state == "removed"


def test_a_push_over_git_daemon(remote, git_daemon, users, django_capture_on_commit_callbacks):
    remote.write("graphs/alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = services.repository_create(name="fleet", url=git_daemon, path="graphs")
    repository_sync(repository=repo)
    _change(users, 6, "over git://", django_capture_on_commit_callbacks)
    [export] = repository_export(repository=repo)
    assert export.state == ExportState.PUSHED
    assert _replicas_in(remote.show("main", "graphs/alpha.yaml")) == 6


def test_revisions_stored_by_the_sync_are_not_sent_back(remote, linked):
    remote.write("graphs/alpha.yaml", manifest("alpha", replicas=2))
    remote.commit("from git")
    remote.push()
    repository_sync(repository=linked)
    assert repository_export(repository=linked) == []
