"""DGDR on a cluster: an estimate's inputs applied to a registered cluster (the API emulator
over real HTTP, serving the DGDR CRD, with the operator's DGDR controller emulated as its source
shows: tests/k8s_emulator/dgdr.py), its status followed through profiling, the operator's message
on failure, and the DGD the profiler chose adopted as a graph revision."""

from __future__ import annotations

import pytest
import yaml

from graphs.models import Graph
from sizing import aic
from sizing.models import DeploymentRequest, Estimate
from tests.k8s_emulator import KubeEmulator
from tests.k8s_emulator.schema import CRD_DIR, default_crds, load_crd_file
from tests.k8s_helpers import CLUSTER, NS

pytestmark = pytest.mark.django_db
REFERENCE = CRD_DIR.parents[1] / "tests" / "fixtures" / "reference" / "seed-disagg.yaml"


@pytest.fixture
def kube():
    crds = [*default_crds(), load_crd_file(str(CRD_DIR / "nvidia.com_dynamographdeploymentrequests.yaml"))]
    with KubeEmulator(crds=crds, simulate_operator=True) as emulator:
        emulator.add_namespace(NS)
        yield emulator
    assert not emulator.errors, emulator.errors


@pytest.fixture
def cluster(db, kube, tmp_path, settings):
    from clusters.models import Cluster

    settings.KUBERNETES_RETRIES, settings.KUBERNETES_RETRY_BACKOFF = 1, 0.01
    path = kube.write_kubeconfig(tmp_path / "kubeconfig", context="emulator")
    return Cluster.objects.create(name=CLUSTER, kubeconfig=str(path), context="emulator", namespaces=["default", NS])


@pytest.fixture
def estimate(db):
    inputs = aic.Inputs(model="Qwen/Qwen3-0.6B", system="h200_sxm", total_gpus=4, isl=1000, osl=200, ttft=300,
                        tpot=10, backend="vllm")
    return Estimate.objects.create(inputs=inputs.as_dict(), input_key="k", state="succeeded")


def _apply(api, estimate, **extra):
    return api.post(f"/api/sizing/estimates/{estimate.pk}/dgdr/",
                    {"cluster": CLUSTER, "namespace": NS, "name": "qwen-sla", **extra}, format="json")


def test_a_dgdr_is_profiled_and_its_dgd_adopted_as_a_graph_revision(api_for, kube, cluster, estimate):
    api = api_for("operator")
    applied = _apply(api, estimate)
    assert applied.status_code == 201, applied.content
    body = applied.json()
    assert body["phase"] == "Profiling" and body["last_status"]["profilingJobName"] == "profile-qwen-sla"
    live = kube.get("dynamographdeploymentrequests", "qwen-sla", namespace=NS)
    assert live["spec"]["sla"] == {"ttft": 300.0, "itl": 10.0} and live["spec"]["autoApply"] is False
    job = kube.get("jobs", "profile-qwen-sla", namespace=NS)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "-m", "dynamo.profiler"]
    # Applying again changes nothing (server-side apply under one field manager).
    again = _apply(api, estimate)
    assert again.status_code == 201 and DeploymentRequest.objects.count() == 1
    assert kube.get("dynamographdeploymentrequests", "qwen-sla", namespace=NS)["metadata"]["generation"] == 1

    req = body["id"]
    early = api.post(f"/api/sizing/requests/{req}/adopt/", {"graph": "qwen-sla"}, format="json")
    assert early.status_code == 409 and "has not generated a DGD yet" in early.json()["detail"]

    # The profiler's pod: its chosen DGD written to the output ConfigMap, the Job complete.
    chosen = yaml.safe_load(REFERENCE.read_text())
    kube.operator.dgdr.finish_profiling("qwen-sla", NS, yaml.safe_dump(chosen))
    followed = api.get(f"/api/sizing/requests/{req}/").json()
    assert followed["phase"] == "Ready"
    assert followed["message"] == "Generated spec is available in annotation nvidia.com/generated-dgd-spec"
    assert followed["last_status"]["dgdName"] == chosen["metadata"]["name"]

    adopted = api.post(f"/api/sizing/requests/{req}/adopt/", {"graph": "qwen-sla"}, format="json")
    assert adopted.status_code == 201, adopted.content
    assert adopted.json()["revision"] == 1
    spec = Graph.objects.get(name="qwen-sla").head.graph_spec
    assert sorted(s.role for s in spec.services) == sorted(
        {"frontend": "frontend"}.get(s.get("componentType"), s.get("subComponentType") or "worker")
        for s in chosen["spec"]["services"].values())
    assert DeploymentRequest.objects.get().graph.name == "qwen-sla"


def test_a_failed_profiling_shows_the_operators_message(api_for, kube, cluster, estimate):
    api = api_for("operator")
    req = _apply(api, estimate, name="will-fail").json()["id"]
    kube.operator.dgdr.fail_profiling("will-fail", NS, "Job has reached the specified backoff limit")
    followed = api.get(f"/api/sizing/requests/{req}/").json()
    assert followed["phase"] == "Failed"
    assert followed["message"] == "profiling job failed: Job has reached the specified backoff limit"


def test_a_namespace_the_cluster_does_not_allow_is_refused_and_nothing_is_applied(api_for, kube, cluster, estimate):
    refused = api_for("operator").post(f"/api/sizing/estimates/{estimate.pk}/dgdr/",
                                       {"cluster": CLUSTER, "namespace": "kube-system", "name": "x"}, format="json")
    assert refused.status_code == 409 and refused.json()["detail"].startswith("namespace:")
    assert kube.list_objects("dynamographdeploymentrequests") == [] and DeploymentRequest.objects.count() == 0


def test_auto_apply_follows_the_operator_source_as_it_stands(api_for, kube, cluster, estimate):
    """At the cited commit generateDGDSpec sets status.dgdName before Deploying, so Deploying finds
    no DGD and fails the DGDR (DeploymentDeleted): emulated, and shown with the operator's words."""
    api = api_for("operator")
    req = _apply(api, estimate, name="auto", auto_apply=True).json()["id"]
    kube.operator.dgdr.finish_profiling("auto", NS, REFERENCE.read_text())
    followed = api.get(f"/api/sizing/requests/{req}/").json()
    assert followed["phase"] == "Failed"
    assert followed["message"] == "Deployment was deleted by user. Create a new DGDR to redeploy."


def test_the_dgdr_previewed_is_the_dgdr_applied(api_for, kube, cluster, estimate):
    api = api_for("operator")
    preview = api.get(f"/api/sizing/estimates/{estimate.pk}/dgdr/", {"name": "qwen-sla", "namespace": NS}).json()
    assert preview["errors"] == [] and preview["manifest"]["spec"]["autoApply"] is False
    assert _apply(api, estimate).status_code == 201
    live = kube.get("dynamographdeploymentrequests", "qwen-sla", namespace=NS)
    assert live["spec"] == preview["manifest"]["spec"]
    # Asked with auto_apply, both say so.
    on = api.get(f"/api/sizing/estimates/{estimate.pk}/dgdr/", {"name": "auto", "namespace": NS,
                                                                 "auto_apply": "true"}).json()
    assert _apply(api, estimate, name="auto", auto_apply=True).status_code == 201
    assert kube.get("dynamographdeploymentrequests", "auto", namespace=NS)["spec"] == on["manifest"]["spec"]
    assert on["manifest"]["spec"]["autoApply"] is True


def test_the_estimate_page_previews_applies_follows_and_adopts_a_dgdr(client_for, kube, cluster, estimate):
    operator, viewer = client_for("operator"), client_for("viewer")
    page = operator.get(f"/sizing/estimates/{estimate.pk}/").content.decode()
    assert 'id="dgdr"' in page and "matches its CRD" in page and "autoApply: false" in page
    assert "Apply to the cluster</button>" in page and "Apply to the cluster</button>" not in viewer.get(
        f"/sizing/estimates/{estimate.pk}/").content.decode()
    refused = operator.post(f"/sizing/estimates/{estimate.pk}/dgdr/",
                            {"cluster": CLUSTER, "namespace": "kube-system", "name": "qwen-page",
                             "dynamo_version": "1.6.1"})
    assert refused.status_code == 409 and "Not applied: namespace:" in refused.content.decode()
    bad = operator.post(f"/sizing/estimates/{estimate.pk}/dgdr/", {"cluster": "nowhere", "namespace": NS,
                                                                   "name": "Bad Name", "dynamo_version": "1.6.1"})
    assert bad.status_code == 400 and "cluster:" in bad.content.decode() and "name:" in bad.content.decode()
    assert not DeploymentRequest.objects.exists()

    applied = operator.post(f"/sizing/estimates/{estimate.pk}/dgdr/", {
        "cluster": CLUSTER, "namespace": NS, "name": "qwen-page", "dynamo_version": "1.6.1"}, follow=True)
    page = applied.content.decode()
    assert "Applied DGDR llm/qwen-page" in page and "<code>llm/qwen-page</code>" in page and "Profiling" in page
    req = DeploymentRequest.objects.get()
    early = operator.post(f"/sizing/requests/{req.pk}/adopt/", {"graph": "qwen-page"}, follow=True)
    assert "Not adopted:" in early.content.decode() and "has not generated a DGD yet" in early.content.decode()
    kube.operator.dgdr.finish_profiling("qwen-page", NS, REFERENCE.read_text())
    read = operator.post(f"/sizing/requests/{req.pk}/refresh/", follow=True).content.decode()
    assert "DGDR llm/qwen-page: Ready" in read
    adopted = operator.post(f"/sizing/requests/{req.pk}/adopt/", {"graph": "qwen-page"})
    assert adopted.status_code == 302 and adopted["Location"] == "/graphs/qwen-page/"
    assert Graph.objects.get(name="qwen-page").head.number == 1
    assert viewer.post(f"/sizing/requests/{req.pk}/adopt/", {"graph": "x"}).status_code == 403
