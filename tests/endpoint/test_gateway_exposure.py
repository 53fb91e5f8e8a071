"""A graph's OpenAI endpoint through its cluster's gateway: the objects rendered beside the DGD
(graphs.runtimes.kubernetes.gateway), the per-graph option (the playground's exposure page), and where the graph page
and the playground's "copy as curl / Python" point."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from clusters.models import Cluster
from endpoint import authorize
from endpoint.models import GraphExposure
from graphs.models import Deployment
from graphs.runtimes.kubernetes.gateway import Exposure, gateway_objects
from tests.playground_fixtures import make_graph

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]


def render(**options):
    return {o["kind"]: o for o in gateway_objects(graph="demo", dgd_name="demo.v2", namespace="llm",
                                                  frontend="Frontend", exposure=Exposure(**options))}


def test_an_httproute_goes_to_the_frontend_service_and_envoy_asks_the_control_plane():
    objects = render(host="llm.example.com", gateway_name="eg", gateway_namespace="gateways")
    assert set(objects) == {"HTTPRoute", "SecurityPolicy", "ReferenceGrant"}
    route = objects["HTTPRoute"]
    assert route["metadata"]["namespace"] == "llm"
    assert route["spec"]["parentRefs"] == [{"name": "eg", "namespace": "gateways"}]
    assert route["spec"]["hostnames"] == ["llm.example.com"]
    (rule,) = route["spec"]["rules"]
    # The operator's Service for a component: <dgd>-<lower(component)>, dots turned to "-".
    assert rule["backendRefs"] == [{"name": "demo-v2-frontend", "port": 8000}]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/v1"}}]
    policy = objects["SecurityPolicy"]["spec"]
    assert policy["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                     "name": route["metadata"]["name"]}]
    ext = policy["extAuth"]
    assert ext["failOpen"] is False and ext["http"]["headersToBackend"] == ["authorization"]
    assert ext["http"]["backendRefs"] == [{"name": "web", "namespace": "dynamo-control-plane", "port": 80}]
    # Envoy appends the request's own path to the authorization path: the control plane answers it.
    found = authorize.match(ext["http"]["path"] + "/v1/chat/completions")
    assert found is not None and found.group(1) == "demo"
    grant = objects["ReferenceGrant"]
    assert grant["metadata"]["namespace"] == "dynamo-control-plane"
    assert grant["spec"]["from"] == [{"group": "gateway.envoyproxy.io", "kind": "SecurityPolicy", "namespace": "llm"}]


def test_an_ingress_for_ingress_nginx_is_valid_kubernetes_and_authorizes_with_the_control_plane():
    objects = render(host="llm.example.com", ingress_class="nginx", tls_secret="llm-tls")
    assert set(objects) == {"Ingress"}
    ingress = objects["Ingress"]
    kubernetes_validate.validate(ingress, "1.32", strict=True)
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    url = notes["nginx.ingress.kubernetes.io/auth-url"]
    assert url.startswith("http://web.dynamo-control-plane.svc.cluster.local/")
    assert authorize.match(url.split(".local", 1)[1]).group(1) == "demo"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "llm.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"] == {"name": "demo-v2-frontend", "port": {"number": 8000}}
    assert ingress["spec"]["tls"] == [{"hosts": ["llm.example.com"], "secretName": "llm-tls"}]
    assert Exposure(host="llm.example.com", tls_secret="llm-tls").url() == "https://llm.example.com/v1"


def test_operators_expose_a_graph_and_see_its_url_and_objects(client_for, users):
    graph = make_graph("gw-page", "model-a", "http://127.0.0.1:9", user=users["admin"])
    operator = client_for("operator")
    before = operator.get(f"/graphs/{graph.name}/").content.decode()
    assert 'data-role="openai-endpoint">http://testserver/api/playground/gw-page/v1</code>' in before
    response = operator.post(f"/playground/exposure/{graph.name}/", {"host": "LLM.example.com",
                                                                     "gateway_name": "eg", "ingress_class": "nginx"})
    assert response.status_code == 302
    page = operator.get(f"/playground/exposure/{graph.name}/").content.decode()
    assert 'data-role="endpoint">http://llm.example.com/v1</code>' in page
    manifest = page.split('data-role="gateway-manifest">', 1)[1].split("</pre>", 1)[0]
    kinds = [o["kind"] for o in yaml.safe_load_all(manifest.replace("&quot;", '"').replace("&#x27;", "'"))]
    assert kinds == ["HTTPRoute", "SecurityPolicy", "ReferenceGrant", "Ingress"]
    # What an Ingress cannot do is said where it is chosen: a limit's 429 reaches the client as a 500.
    limits = page.split('data-role="ingress-nginx-limits">', 1)[1].split("</p>", 1)[0]
    assert "gets a 500" in limits and "Gateway API" in limits
    # Saved on a graph of the local runtime, the exposure reaches nothing: the endpoint stays the relay.
    after = operator.get(f"/graphs/{graph.name}/").content.decode()
    assert 'data-role="openai-endpoint">http://testserver/api/playground/gw-page/v1</code>' in after
    assert "is not in effect" in after
    chat = operator.get("/playground/").content.decode()
    assert 'value="gw-page"' in chat and 'data-endpoint=""' in chat
    # Applied with the graph on the cluster the graph is deployed on, its host is the endpoint.
    GraphExposure.objects.filter(graph=graph).update(apply_with_graph=True)
    Deployment.objects.filter(graph=graph).update(runtime="kubernetes", namespace="dynamo",
                                                  cluster=Cluster.objects.create(name="east", namespaces=["dynamo"]))
    on_cluster = operator.get(f"/graphs/{graph.name}/").content.decode()
    assert 'data-role="openai-endpoint">http://llm.example.com/v1</code>' in on_cluster
    assert "is not in effect" not in on_cluster
    chat = operator.get("/playground/").content.decode()
    assert 'data-endpoint="http://llm.example.com/v1"' in chat
    assert operator.post(f"/playground/exposure/{graph.name}/", {"delete": "1"}).status_code == 302
    assert not GraphExposure.objects.exists()


def test_a_bad_exposure_is_refused_with_a_message_and_nothing_saved(client_for, users):
    graph = make_graph("gw-bad", "model-a", "http://127.0.0.1:9", user=users["admin"])
    operator = client_for("operator")
    for form, field in (({"host": "not a host", "ingress_class": "nginx"}, "host"),
                        ({"host": "llm.example.com"}, "gateway_name"),
                        ({"host": "", "gateway_name": "eg"}, "host"),
                        ({"host": "llm.example.com", "gateway_name": "Bad_Name"}, "gateway_name")):
        response = operator.post(f"/playground/exposure/{graph.name}/", form)
        assert response.status_code == 400
        assert f"Not saved: {field}:" in response.content.decode()
    assert not GraphExposure.objects.exists()
    assert client_for("viewer").post(f"/playground/exposure/{graph.name}/",
                                     {"host": "llm.example.com", "gateway_name": "eg"}).status_code == 403
    assert not GraphExposure.objects.exists()


# --- applied with the graph, on a cluster (the API emulator) --------------------------------------

def _crd(group: str, version: str, kind: str, plural: str) -> dict:
    """A CRD that serves ``kind`` as any object: what the gateway's own CRDs serve, for the emulator."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


GATEWAY_KINDS = [("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes"),
                 ("gateway.envoyproxy.io", "v1alpha1", "SecurityPolicy", "securitypolicies"),
                 ("gateway.networking.k8s.io", "v1beta1", "ReferenceGrant", "referencegrants"),
                 ("networking.k8s.io", "v1", "Ingress", "ingresses")]


def test_an_exposure_applied_with_the_graph_lands_beside_the_dgd(cluster, kube):
    from endpoint.services import exposure_set
    from graphs import operations
    from tests.k8s_helpers import NS, apply, run
    from tests.k8s_helpers import make_graph as make_k8s_graph

    for kind in GATEWAY_KINDS:
        kube.install_crd(_crd(*kind))
    kube.add_namespace("dynamo-control-plane")
    graph = make_k8s_graph()
    exposure_set(graph=graph, host="llm.example.com", gateway_name="eg", ingress_class="nginx",
                 apply_with_graph=False)
    assert apply(graph).state == "succeeded"
    assert not kube.find_requests("PATCH", f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/g-openai")
    exposure_set(graph=graph, host="llm.example.com", gateway_name="eg", ingress_class="nginx", apply_with_graph=True)
    op = apply(graph)
    assert op.state == "succeeded", op.result
    route = kube.get("httproutes", "g-openai", namespace=NS)
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": "g-frontend", "port": 8000}]
    assert kube.get("securitypolicies", "g-openai", namespace=NS)["spec"]["extAuth"]["http"]["path"] == (
        "/api/gateway/authorize/g")
    assert kube.get("referencegrants", f"{NS}-g-authorize", namespace="dynamo-control-plane") is not None
    assert kube.get("ingresses", "g-openai", namespace=NS)["spec"]["ingressClassName"] == "nginx"
    # A server dry run of every object first (a kind the cluster lacks writes nothing), then the apply.
    dry, real = kube.find_requests("PATCH", f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/g-openai")
    assert (dry.param("dryRun"), real.param("dryRun")) == ("All", None)
    assert (real.param("fieldManager"), real.param("force")) == ("dynamo-control-plane", "true")

    # Owned by the DGD where they can be (its namespace): deleting the graph's deployment takes
    # them with it (the API server's garbage collector), and the ReferenceGrant beside the control
    # plane, which cannot name an owner in another namespace, is deleted by the product.
    dgd = kube.get("dgd", "g", namespace=NS)
    for kind in ("httproutes", "securitypolicies", "ingresses"):
        owners = kube.get(kind, "g-openai", namespace=NS)["metadata"]["ownerReferences"]
        expected = [("DynamoGraphDeployment", "g", dgd["metadata"]["uid"])]
        assert [(o["kind"], o["name"], o["uid"]) for o in owners] == expected
    assert not kube.get("referencegrants", f"{NS}-g-authorize", namespace="dynamo-control-plane")["metadata"].get(
        "ownerReferences")
    assert run(operations.graph_undeploy(graph=graph)).state == "succeeded"
    for kind in ("httproutes", "securitypolicies", "ingresses"):
        assert kube.get(kind, "g-openai", namespace=NS) is None, kind
    assert kube.get("referencegrants", f"{NS}-g-authorize", namespace="dynamo-control-plane") is None


def test_a_cluster_without_the_gateway_api_fails_the_apply_and_says_what_to_do(cluster, kube):
    from endpoint.services import exposure_set
    from tests.k8s_helpers import NS, apply
    from tests.k8s_helpers import make_graph as make_k8s_graph

    graph = make_k8s_graph()
    exposure_set(graph=graph, host="llm.example.com", gateway_name="eg", apply_with_graph=True)
    op = apply(graph)
    assert op.state == "failed"
    assert "does not serve gateway.networking.k8s.io/v1 HTTPRoute" in op.result
    assert "stop applying the graph's gateway objects" in op.result
    assert kube.get("dgd", "g", namespace=NS) is None  # nothing half-written: not even the DGD
