"""Argo CD and Flux recognised from the marks they leave on a live DGD, and what the graph page
gives to keep their syncs from reverting scaled replicas."""

from __future__ import annotations

import pytest
import yaml

from core.dgd.gitops import gitops_owner
from core.specio import load_yaml
from graphs.models import Deployment, Graph
from graphs.runtimes.kubernetes.owners import record_ownership
from graphs.services import graph_import
from repos.gitops import argocd_ignore_differences, flux_patch, scaled_pools
from tests.git_fixtures import manifest

pytest_plugins = ["tests.git_fixtures"]


def _live(labels=None, annotations=None) -> dict:
    return {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": "alpha", "namespace": "dynamo", "labels": labels or {},
                         "annotations": annotations or {}}, "spec": {"components": []}}


@pytest.mark.parametrize(("labels", "annotations", "tool", "application"), [
    ({}, {"argocd.argoproj.io/tracking-id": "fleet:nvidia.com/DynamoGraphDeployment:dynamo/alpha"}, "Argo CD", "fleet"),
    ({"app.kubernetes.io/instance": "fleet"}, {}, "Argo CD", "fleet"),
    ({"kustomize.toolkit.fluxcd.io/name": "graphs", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}, {},
     "Flux", "graphs"),
])
def test_argo_cd_and_flux_are_recognised_from_their_marks(labels, annotations, tool, application):
    owner = gitops_owner(_live(labels, annotations))
    assert owner["tool"] == tool and owner["application"] == application
    assert next(iter({**labels, **annotations})) in owner["evidence"]


@pytest.mark.parametrize("labels", [{}, {"app.kubernetes.io/instance": "x", "app.kubernetes.io/managed-by": "Helm"},
                                    {"app": "alpha"}])
def test_objects_without_a_gitops_mark_are_not_claimed(labels):
    assert gitops_owner(_live(labels)) is None


def test_the_argo_cd_snippet_ignores_replicas_of_the_components_list_and_respects_it():
    snippet = yaml.safe_load(argocd_ignore_differences("alpha", "dynamo"))
    [rule] = snippet["spec"]["ignoreDifferences"]
    assert rule == {"group": "nvidia.com", "kind": "DynamoGraphDeployment", "name": "alpha", "namespace": "dynamo",
                    "jqPathExpressions": [".spec.components[].replicas"]}
    assert snippet["spec"]["syncPolicy"]["syncOptions"] == ["RespectIgnoreDifferences=true"]
    alpha1 = yaml.safe_load(argocd_ignore_differences("alpha", "", "nvidia.com/v1alpha1"))
    assert alpha1["spec"]["ignoreDifferences"][0]["jqPathExpressions"] == [".spec.services[].replicas"]


@pytest.mark.django_db
def test_the_flux_patch_removes_the_replicas_of_the_scaled_pools_only():
    _graph, revision, _ = graph_import(obj=load_yaml(manifest("alpha"), max_bytes=1 << 20))
    spec = revision.graph_spec
    assert scaled_pools(spec) == [(1, "worker")]  # no adapter: every pool but the frontend
    adapted = spec.model_copy(update={"services": [spec.services[0].model_copy(update={"scaling_adapter": True}),
                                                   spec.services[1]]})
    assert scaled_pools(adapted) == [(0, "Frontend")]
    kustomization = yaml.safe_load(flux_patch("alpha", scaled_pools(spec)))
    [patch] = kustomization["spec"]["patches"]
    assert patch["target"] == {"group": "nvidia.com", "kind": "DynamoGraphDeployment", "name": "alpha"}
    assert yaml.safe_load(patch["patch"]) == [{"op": "remove", "path": "/spec/components/1/replicas"}]


@pytest.mark.django_db
def test_the_watcher_records_the_gitops_owner_and_the_graph_page_says_so(client_for):
    graph, revision, _ = graph_import(obj=load_yaml(manifest("alpha"), max_bytes=1 << 20))
    dep = Deployment.objects.create(graph=graph, runtime="kubernetes", namespace="dynamo", revision=revision,
                                    active=True, manifest=None)
    live = _live(annotations={"argocd.argoproj.io/tracking-id": "fleet:nvidia.com/DynamoGraphDeployment:dynamo/alpha"})
    from graphs.services import revision_manifest

    dep.manifest = revision_manifest(revision)
    live["spec"] = dep.manifest["spec"]
    record_ownership(dep, live, {})
    dep.refresh_from_db()
    assert dep.ownership["gitops"]["tool"] == "Argo CD"
    page = client_for("viewer").get(f"/graphs/{Graph.objects.get().name}/").content.decode()
    assert "Argo CD</strong> applies this graph from Git" in page and "Scaling a pool" in page


@pytest.mark.django_db
def test_commit_to_git_sends_the_latest_revision_or_says_why_not(api_for, client_for, remote, settings, tmp_path,
                                                                users):
    from graphs.services import graph_update
    from repos import services
    from repos.models import Export
    from repos.sync import repository_sync

    settings.VAR_DIR = tmp_path / "var"
    remote.write("alpha.yaml", manifest("alpha"))
    remote.commit("add alpha")
    remote.push()
    graph_import(obj=load_yaml(manifest("lonely"), max_bytes=1 << 20))
    repo = services.repository_create(name="fleet", url=remote.url)
    refused = api_for("operator").post("/api/repos/fleet/commit/", {"graph": "lonely"}, format="json")
    assert refused.status_code == 409 and "not kept in a Git repository" in refused.json()["detail"]
    repository_sync(repository=repo)
    already = api_for("operator").post("/api/repos/fleet/commit/", {"graph": "alpha"}, format="json")
    assert already.status_code == 409 and "came from Git" in already.json()["detail"]
    # A revision whose export was lost (recorded before the link, say): Commit to Git sends it.
    graph = Graph.objects.get(name="alpha")
    spec = graph.head.graph_spec
    pools = list(spec.services)
    pools[1] = pools[1].model_copy(update={"replicas": 6})
    graph_update(graph=graph, spec=spec.model_copy(update={"services": pools}), message="six")
    Export.objects.all().delete()
    Deployment.objects.create(graph=graph, runtime="kubernetes", namespace="dynamo", revision=graph.head, active=True,
                              ownership={"gitops": gitops_owner(_live({"kustomize.toolkit.fluxcd.io/name": "g"}))})
    card = client_for("operator").get("/graphs/alpha/").content.decode()
    assert "<strong>Flux</strong> applies this graph from Git" in card and 'action="/repos/fleet/commit/alpha/"' in card
    page = client_for("operator").post("/repos/fleet/commit/alpha/", follow=True).content.decode()
    assert "Revision 2 of alpha to Git" in page
    assert Export.objects.get().revision.number == 2
    assert api_for("viewer").post("/api/repos/fleet/commit/", {"graph": "alpha"}, format="json").status_code == 403
