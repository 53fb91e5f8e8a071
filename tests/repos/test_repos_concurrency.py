"""Git and the product changing the same graph at the same time: nothing is lost, nothing is
reverted, nothing is forced. Three threads against a real repository and PostgreSQL: someone
pushing to the branch, people saving revisions in the product (each exported as it commits),
and syncs running in between."""

from __future__ import annotations

import threading

import pytest
import yaml
from django.db import connection

from controlplane.celery import app as celery_app
from graphs.models import Graph
from graphs.services import graph_update
from repos import services
from repos.export import repository_export
from repos.models import Direction, Export, ExportState, RevisionCommit
from repos.sync import repository_sync
from tests.git_fixtures import git, manifest

pytest_plugins = ["tests.git_fixtures"]
PATH = "graphs/alpha.yaml"
ROUNDS = 6


@pytest.fixture(autouse=True)
def _mirrors(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


@pytest.fixture
def eager():
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


def _replicas(text: str) -> int:
    return yaml.safe_load(text)["spec"]["components"][1]["replicas"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_git_and_product_changes_lose_nothing_and_force_nothing(remote, users, eager):
    remote.write(PATH, manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url, path="graphs")
    repository_sync(repository=repo)
    pushed_by_git: dict[str, int] = {}  # sha -> replicas, every commit the Git side got onto main
    errors: list[BaseException] = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
            finally:
                connection.close()
        return run

    def git_side():
        for i in range(ROUNDS):
            value = 100 + i
            while True:  # a push refused because the product pushed first: fetch, redo, push again
                git("fetch", "-q", "origin", cwd=remote.work)
                git("reset", "-q", "--hard", "origin/main", cwd=remote.work)
                remote.write(PATH, manifest("alpha", replicas=value))
                sha = remote.commit(f"git sets {value}")
                try:
                    remote.push()
                except AssertionError:
                    continue
                pushed_by_git[sha] = value
                break

    def product_side():
        for j in range(ROUNDS):
            graph = Graph.objects.get(name="alpha")
            spec = graph.head.graph_spec
            pools = list(spec.services)
            pools[1] = pools[1].model_copy(update={"replicas": 200 + j})
            graph_update(graph=graph, spec=spec.model_copy(update={"services": pools}), user=users["operator"],
                         message=f"product sets {200 + j}")  # exported when it commits (eager)

    def syncs():
        for _ in range(ROUNDS):
            repository_sync(repository=repo)

    threads = [threading.Thread(target=guarded(f)) for f in (git_side, product_side, syncs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    repository_sync(repository=repo)
    repository_export(repository=repo)
    repository_sync(repository=repo)

    graph = Graph.objects.get(name="alpha")
    tip = git("--git-dir", str(remote.bare), "rev-parse", "main").strip()
    # Nothing forced: every commit that ever reached main is still in its history.
    for sha in list(pushed_by_git) + list(Export.objects.exclude(branch__startswith="dynamo-cp/")
                                          .exclude(commit="").values_list("commit", flat=True)):
        git("--git-dir", str(remote.bare), "merge-base", "--is-ancestor", sha, tip)
    # Nothing from Git lost: every commit the Git side pushed is a revision of the graph.
    imported = set(RevisionCommit.objects.filter(direction=Direction.FROM_GIT).values_list("sha", flat=True))
    assert set(pushed_by_git) <= imported
    # Nothing from the product lost: each revision is in Git, on the branch or on its review branch.
    exports = list(Export.objects.select_related("revision"))
    assert len(exports) == ROUNDS
    for export in exports:
        assert export.state in (ExportState.PUSHED, ExportState.CONFLICT), (export.state, export.error)
        assert _replicas(remote.show(export.commit, PATH)) == export.revision.graph_spec.services[1].replicas
        if export.state == ExportState.CONFLICT:
            assert export.branch == f"dynamo-cp/alpha-r{export.revision.number}"
            assert "<<<<<<<" in export.merged_text or export.theirs_text
    # Nothing reverted: the graph and the branch agree at the end.
    assert graph.head.graph_spec.services[1].replicas == _replicas(remote.show("main", PATH))
    values = [r.graph_spec.services[1].replicas for r in graph.revisions.all()]
    assert set(pushed_by_git.values()) <= set(values) and set(range(200, 200 + ROUNDS)) <= set(values)
