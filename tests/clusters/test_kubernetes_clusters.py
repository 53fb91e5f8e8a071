"""Registered clusters: admin pages and API (viewers read, only admins write), the health
check against the emulator, the write-only Hugging Face token Secret (a canary value must
appear nowhere but in the cluster), and choosing a cluster and namespace on the graph page."""

from __future__ import annotations

import base64
import logging

import pytest
from django.apps import apps
from django.conf import settings
from django.core import serializers

from clusters import services
from clusters.models import Cluster
from clusters.tasks import clusters_check
from graphs.models import Operation
from tests.k8s_helpers import CLUSTER, NS, apply, make_graph

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

CANARY = "hf_CANARY_x7Qp2mZk9LrT4vWb8NcY3dJf"


# -- roles ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("role,status", [("admin", 200), ("operator", 403), ("viewer", 403), ("norole", 403)])
def test_cluster_pages_are_for_admins(cluster, client_for, role, status):
    client = client_for(role)
    for url in ("/clusters/", "/clusters/new/", f"/clusters/{CLUSTER}/edit/", f"/clusters/{CLUSTER}/hf-token/"):
        assert client.get(url).status_code == status, url
    assert client_for(None).get("/clusters/").status_code == 302  # to the login page


def test_only_admins_register_edit_and_remove_clusters_on_the_pages(cluster, client_for, tmp_path):
    form = {"name": "prod", "kubeconfig": str(tmp_path / "kc"), "context": "prod", "namespaces": "llm, team-a"}
    assert client_for("operator").post("/clusters/new/", form).status_code == 403
    assert not Cluster.objects.filter(name="prod").exists()
    admin = client_for("admin")
    response = admin.post("/clusters/new/", form)
    assert response.status_code == 302
    prod = Cluster.objects.get(name="prod")
    assert (prod.namespaces, prod.context, prod.in_cluster) == (["llm", "team-a"], "prod", False)
    bad = admin.post("/clusters/new/", {**form, "name": "other", "namespaces": "Not_A_Namespace"})
    assert bad.status_code == 400 and "is not a valid namespace name" in bad.content.decode()
    both = admin.post(f"/clusters/{prod.name}/edit/", {**form, "in_cluster": "on"})
    assert both.status_code == 400 and "not both" in both.content.decode()
    assert admin.post(f"/clusters/{prod.name}/edit/", {**form, "namespaces": "llm"}).status_code == 302
    assert Cluster.objects.get(name="prod").namespaces == ["llm"]
    assert client_for("operator").post("/clusters/prod/delete/").status_code == 403
    assert admin.post("/clusters/prod/delete/").status_code == 302
    assert not Cluster.objects.filter(name="prod").exists()


def test_the_api_like_the_pages_is_for_admins_only(cluster, api_for, client_for, tmp_path):
    listing = api_for("admin").get("/api/clusters/")
    assert listing.status_code == 200
    [row] = listing.json()["results"]
    assert (row["name"], row["namespaces"], row["reachable"]) == (CLUSTER, ["default", NS], None)
    assert "kubeconfig" in row and "error" in row
    body = {"name": "prod", "kubeconfig": str(tmp_path / "kc"), "namespaces": ["llm"]}
    for role in ("viewer", "operator"):
        # Connection details (kubeconfig path, context, error text) are not theirs to read.
        assert client_for(role).get("/clusters/").status_code == 403
        assert api_for(role).get("/api/clusters/").status_code == 403
        assert api_for(role).get(f"/api/clusters/{CLUSTER}/").status_code == 403
        assert api_for(role).post("/api/clusters/", body, format="json").status_code == 403
        assert api_for(role).patch(f"/api/clusters/{CLUSTER}/", {"namespaces": ["x"]}, format="json"
                                   ).status_code == 403
        assert api_for(role).delete(f"/api/clusters/{CLUSTER}/").status_code == 403
        assert api_for(role).post(f"/api/clusters/{CLUSTER}/check/").status_code == 403
        assert api_for(role).post(f"/api/clusters/{CLUSTER}/hf-token/", {"namespace": NS, "value": "x"},
                                  format="json").status_code == 403
    assert api_for(None).get("/api/clusters/").status_code in (401, 403)
    admin = api_for("admin")
    created = admin.post("/api/clusters/", body, format="json")
    assert created.status_code == 201 and created.json()["namespaces"] == ["llm"]
    assert admin.post("/api/clusters/", body, format="json").status_code == 409  # the name is taken
    assert admin.patch("/api/clusters/prod/", {"namespaces": ["llm", "b"]}, format="json").json()[
        "namespaces"] == ["llm", "b"]
    assert admin.patch("/api/clusters/prod/", {"reachable": True}, format="json").json()["reachable"] is None
    assert admin.delete("/api/clusters/prod/").status_code == 204


def test_a_cluster_in_use_cannot_be_removed_nor_lose_its_namespace(cluster, kube, api_for):
    apply(make_graph())
    admin = api_for("admin")
    refused = admin.delete(f"/api/clusters/{CLUSTER}/")
    assert refused.status_code == 409 and "graphs are deployed on emu (g)" in refused.json()["detail"]
    narrowed = admin.patch(f"/api/clusters/{CLUSTER}/", {"namespaces": ["default"]}, format="json")
    assert narrowed.status_code == 409 and "keep that namespace allowed" in narrowed.json()["detail"]


# -- health -----------------------------------------------------------------------------------------
def test_the_check_records_reachability_crd_versions_and_gpus(cluster, kube, client_for):
    kube.add_node("gpu-1", gpus=4)
    checked = services.cluster_check(cluster=cluster)
    assert (checked.reachable, checked.error, checked.server_version) == (True, "", "v1.31.0")
    assert (checked.dgd_versions, checked.dgdsa_versions) == (["v1alpha1", "v1beta1"], ["v1alpha1", "v1beta1"])
    assert (checked.gpu_allocatable, checked.gpu_free) == (4, 4) and checked.checked_at
    page = client_for("admin").get("/clusters/").content.decode()
    assert "DGD v1alpha1, v1beta1" in page and "reachable" in page and "4 / 4" in page


def test_without_rights_on_every_namespaces_pods_the_check_still_reports_allocatable_gpus(cluster, kube,
                                                                                         client_for):
    # The least-privilege install (deploy/kustomize) may read nodes but not pods cluster-wide.
    kube.add_node("gpu-1", gpus=4)
    kube.inject("GET", r"^/api/v1/pods$", status=403, times=None)
    checked = services.cluster_check(cluster=cluster)
    assert checked.reachable and (checked.gpu_allocatable, checked.gpu_free) == (4, None)
    assert "4 allocatable" in client_for("admin").get("/clusters/").content.decode()
    kube.remove_crd("dynamographdeploymentscalingadapters.nvidia.com")
    assert services.cluster_check(cluster=cluster).dgdsa_versions == []
    kube.stop()
    down = services.cluster_check(cluster=cluster)
    assert down.reachable is False and "no answer from cluster emu" in down.error
    assert down.dgd_versions == ["v1alpha1", "v1beta1"]  # what it served when last seen


def test_the_periodic_check_covers_every_cluster_and_is_scheduled(cluster, kube, tmp_path):
    Cluster.objects.create(name="broken", kubeconfig=str(tmp_path / "missing"), namespaces=["x"])
    assert clusters_check() == {"broken": False, CLUSTER: True}
    broken = Cluster.objects.get(name="broken")
    assert "cannot load the connection settings of cluster broken" in broken.error
    assert settings.CELERY_BEAT_SCHEDULE["clusters-check"]["task"] == "clusters.tasks.clusters_check"


def test_pages_never_call_the_cluster(cluster, kube, client_for):
    graph = make_graph()
    apply(graph)
    kube.clear_requests()
    for role, url in (("admin", "/clusters/"), ("viewer", f"/graphs/{graph.name}/"),
                      ("viewer", f"/graphs/{graph.name}/status/"), ("viewer", "/graphs/"),
                      ("admin", "/api/clusters/")):
        assert client_for(role).get(url).status_code == 200, url
    assert kube.requests == []


# -- the Hugging Face token Secret ------------------------------------------------------------------
def _secret_value(kube, name="hf-token-secret", key="HF_TOKEN"):
    secret = kube.get("secrets", name, namespace=NS)
    return base64.b64decode(secret["data"][key]).decode() if secret else None


def _assert_nowhere(bodies: list[bytes], caplog) -> None:
    encoded = base64.b64encode(CANARY.encode()).decode()
    assert bodies, "no request bodies to search"
    for needle in (CANARY, encoded):
        for body in bodies:
            assert needle.encode() not in body
        assert needle not in caplog.text
        for model in apps.get_models():
            dump = serializers.serialize("json", model._default_manager.all())
            assert needle not in dump, model


def test_the_token_form_writes_the_secret_and_the_value_goes_nowhere_else(cluster, kube, client_for, caplog):
    caplog.set_level(logging.DEBUG)
    admin = client_for("admin")
    bodies = [admin.get(f"/clusters/{CLUSTER}/hf-token/").content]
    bad = admin.post(f"/clusters/{CLUSTER}/hf-token/", {"namespace": "kube-system", "secret_name": "hf-token-secret",
                                                        "key": "HF_TOKEN", "value": CANARY})
    assert bad.status_code == 400
    bodies.append(bad.content)
    response = admin.post(f"/clusters/{CLUSTER}/hf-token/", {"namespace": NS, "secret_name": "hf-token-secret",
                                                             "key": "HF_TOKEN", "value": CANARY}, follow=True)
    assert response.status_code == 200 and "Secret llm/hf-token-secret created (key HF_TOKEN)" in (
        response.content.decode())
    bodies.append(response.content)
    assert _secret_value(kube) == CANARY
    kube.inject("PATCH", r"/secrets/hf-token-secret$", 500, times=None)  # outlasts the retries
    failed = admin.post(f"/clusters/{CLUSTER}/hf-token/", {"namespace": NS, "secret_name": "hf-token-secret",
                                                           "key": "HF_TOKEN", "value": CANARY + "-2"})
    assert failed.status_code == 502 and "(HTTP 500)" in failed.content.decode()
    bodies.append(failed.content)
    _assert_nowhere(bodies, caplog)


def test_the_token_api_creates_then_replaces_and_never_answers_the_value(cluster, kube, api_for, caplog):
    caplog.set_level(logging.DEBUG)
    kube.add_secret("hf-token-secret", namespace=NS, data={"OTHER": "kept"})
    admin = api_for("admin")
    url = f"/api/clusters/{CLUSTER}/hf-token/"
    first = admin.post(url, {"namespace": NS, "value": "old-token"}, format="json")
    assert first.status_code == 200 and first.json() == {"namespace": NS, "secret_name": "hf-token-secret",
                                                         "key": "HF_TOKEN", "created": False}
    second = admin.post(url, {"namespace": NS, "value": CANARY, "secret_name": "hf-alt", "key": "TOKEN"},
                        format="json")
    assert second.status_code == 201 and second.json()["created"] is True
    third = admin.post(url, {"namespace": NS, "value": CANARY}, format="json")
    assert third.status_code == 200
    assert _secret_value(kube) == CANARY and _secret_value(kube, key="OTHER") == "kept"
    assert _secret_value(kube, "hf-alt", "TOKEN") == CANARY
    refused = admin.post(url, {"namespace": "default2", "value": CANARY}, format="json")
    assert refused.status_code == 409  # a valid name this cluster does not allow: a conflict with its settings
    empty = admin.post(url, {"namespace": NS, "value": "   "}, format="json")
    assert empty.status_code == 400
    _assert_nowhere([first.content, second.content, third.content, refused.content, empty.content], caplog)
    assert "updated Secret llm/hf-token-secret (key HF_TOKEN) on cluster emu for admin" in caplog.text


# -- choosing the target on the graph page ----------------------------------------------------------
def test_the_graph_page_offers_each_cluster_namespace_and_applies_there(cluster, kube, client_for):
    graph = make_graph()
    operator = client_for("operator")
    page = operator.get(f"/graphs/{graph.name}/").content.decode()
    assert '<option value="local">Local runtime (this host)</option>' in page
    assert f'value="kubernetes:{CLUSTER}/{NS}"' in page and f'value="kubernetes:{CLUSTER}/default"' in page
    response = operator.post(f"/graphs/{graph.name}/apply/", {"runtime": f"kubernetes:{CLUSTER}/{NS}",
                                                               "apiVersion": "nvidia.com/v1beta1"})
    assert response.status_code == 200
    op = Operation.objects.get(graph=graph)
    assert op.params == {"runtime": "kubernetes", "apiVersion": "nvidia.com/v1beta1", "dryRun": False,
                         "cluster": CLUSTER, "namespace": NS}
    refused = operator.post(f"/graphs/{graph.name}/apply/", {"runtime": f"kubernetes:{CLUSTER}/kube-system"})
    assert refused.status_code == 409 and "not allowed on cluster emu" in refused.content.decode()


def test_the_api_and_cli_name_the_cluster_and_namespace(cluster, kube, api_for):

    graph = make_graph()
    bad = api_for("operator").post(f"/api/graphs/{graph.name}/apply/",
                                   {"runtime": "kubernetes", "cluster": CLUSTER, "namespace": "nope"}, format="json")
    assert bad.status_code == 409 and "not allowed" in bad.json()["detail"]
    ok = api_for("operator").post(f"/api/graphs/{graph.name}/apply/",
                                  {"runtime": "kubernetes", "cluster": CLUSTER, "namespace": NS}, format="json")
    assert ok.status_code == 202 and ok.json()["params"]["namespace"] == NS
    assert Operation.objects.get(graph=graph).params["cluster"] == CLUSTER


def test_a_partial_update_that_clashes_with_the_stored_kubeconfig_is_a_conflict(cluster, api_for):
    admin = api_for("admin")
    clash = admin.patch(f"/api/clusters/{cluster.name}/", {"in_cluster": True}, format="json")
    assert clash.status_code == 409 and "registered with a kubeconfig" in clash.json()["detail"]
    both = admin.patch(f"/api/clusters/{cluster.name}/", {"in_cluster": True, "kubeconfig": "/x"}, format="json")
    assert both.status_code == 400 and "not both" in both.json()["detail"]


@pytest.mark.django_db
def test_a_cluster_body_of_the_wrong_json_types_is_refused_field_by_field(api_for):
    """The schema says string, boolean, list of strings: a number where a string goes, or "true"
    where a boolean goes, is refused by name, not read the way an HTML form's text would be."""
    from clusters.models import Cluster

    api = api_for("admin")
    body = {"name": 5, "description": 12, "in_cluster": "true", "namespaces": [7]}
    response = api.post("/api/clusters/", body, format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()) == {"name", "description", "in_cluster", "namespaces"}
    assert response.json()["in_cluster"] == ["must be true or false"]
    ok = api.post("/api/clusters/", {"name": "typed", "in_cluster": True, "namespaces": ["llm"]}, format="json")
    assert ok.status_code == 201, ok.content
    assert list(Cluster.objects.values_list("name", flat=True)) == ["typed"]
