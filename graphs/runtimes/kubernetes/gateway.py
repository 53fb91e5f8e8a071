"""A graph's OpenAI endpoint exposed through its cluster's gateway, beside the DGD: the token
stream goes from the gateway to the frontend Service and never through the control plane, which
only answers the gateway's question "may this key pass?" (endpoint/authorize.py).

Pure: ``gateway_objects`` renders, from a graph's DGD name, namespace and frontend component and
the per-graph ``Exposure`` options, any of
* a Gateway API ``HTTPRoute`` to the frontend Service (any Gateway API implementation), with an
  Envoy Gateway ``SecurityPolicy`` whose ``extAuth`` asks the control plane (Envoy's ext_authz
  passes a refusal's status and body, 401 or 429 in OpenAI's shape, to the client as they are),
  and the ``ReferenceGrant`` that lets that policy name the control plane's Service in its
  namespace;
* an ``Ingress`` for ingress-nginx with ``auth-url`` pointing at the control plane.

ingress-nginx, like nginx's auth_request, passes 401 and 403 of the authorization on and turns
any other refusal into a 500: a key over its limit gets a 500 there (deploy/gateway/nginx.conf,
for an nginx of your own, answers 429 from the control plane's ``x-auth-status``).

The caller's key is the control plane's, never the frontend's (issue #42; deploy/gateway/nginx.conf
sets ``Authorization ""``): the HTTPRoute removes it after the authorization
(``RequestHeaderModifier``, applied by Envoy's router, after ext_authz), and the Ingress copies
the header from the authorization's answer, which has none (ingress-nginx's ``auth-response-headers``
become ``auth_request_set $authHeader0 $upstream_http_authorization; proxy_set_header
'Authorization' $authHeader0;``, internal/ingress/controller/template/template.go
``buildAuthResponseHeaders``, and nginx does not send a header set to an empty value)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clusters.resources import custom_path, service_name

FRONTEND_PORT = 8000
AUTHORIZE_PATH = "/api/gateway/authorize/{graph}"
STREAM_TIMEOUT = "3600"  # seconds a stream may last through the gateway


@dataclass(frozen=True)
class Exposure:
    """How one graph is exposed: on ``host``, through a Gateway API Gateway (``gateway_name`` in
    ``gateway_namespace``), an ingress-nginx Ingress (``ingress_class``), or both. The control
    plane's Service (``controlplane_service`` in ``controlplane_namespace``, port 80) answers
    the authorization requests."""

    host: str
    gateway_name: str = ""
    gateway_namespace: str = ""
    ingress_class: str = ""
    tls_secret: str = ""
    controlplane_service: str = "web"
    controlplane_namespace: str = "dynamo-control-plane"

    def url(self) -> str:
        """The endpoint's base URL as an OpenAI client takes it."""
        return f"{'https' if self.tls_secret else 'http'}://{self.host}/v1"


def _labels(graph: str) -> dict:
    return {"app.kubernetes.io/managed-by": "dynamo-control-plane", "nvidia.com/dynamo-graph": graph}


def _authorize_url(graph: str, exposure: Exposure) -> str:
    return (f"http://{exposure.controlplane_service}.{exposure.controlplane_namespace}.svc.cluster.local"
            + AUTHORIZE_PATH.format(graph=graph))


def gateway_objects(*, graph: str, dgd_name: str, namespace: str, frontend: str, exposure: Exposure) -> list[dict]:
    """The objects that expose ``graph`` as ``exposure`` says, to apply beside its DGD."""
    backend = service_name(dgd_name, frontend)
    meta = {"name": f"{graph}-openai", "namespace": namespace, "labels": _labels(graph)}
    out: list[dict] = []
    if exposure.gateway_name:
        parent = {"name": exposure.gateway_name}
        if exposure.gateway_namespace:
            parent["namespace"] = exposure.gateway_namespace
        out.append({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": meta,
            "spec": {"parentRefs": [parent], "hostnames": [exposure.host],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                                "filters": [{"type": "RequestHeaderModifier",
                                             "requestHeaderModifier": {"remove": ["Authorization"]}}],
                                "backendRefs": [{"name": backend, "port": FRONTEND_PORT}],
                                "timeouts": {"request": f"{STREAM_TIMEOUT}s"}}]}})
        out.append({
            "apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "SecurityPolicy", "metadata": meta,
            "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": meta["name"]}],
                     "extAuth": {"failOpen": False, "http": {
                         "backendRefs": [{"name": exposure.controlplane_service,
                                          "namespace": exposure.controlplane_namespace, "port": 80}],
                         "path": AUTHORIZE_PATH.format(graph=graph), "headersToBackend": ["authorization"]}}}})
        out.append({
            "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": f"{namespace}-{graph}-authorize", "namespace": exposure.controlplane_namespace,
                         "labels": _labels(graph)},
            "spec": {"from": [{"group": "gateway.envoyproxy.io", "kind": "SecurityPolicy", "namespace": namespace}],
                     "to": [{"group": "", "kind": "Service", "name": exposure.controlplane_service}]}})
    if exposure.ingress_class:
        ingress_meta = {**meta, "annotations": {
            "nginx.ingress.kubernetes.io/auth-url": _authorize_url(graph, exposure),
            "nginx.ingress.kubernetes.io/auth-response-headers": "Authorization",  # none: not passed on
            "nginx.ingress.kubernetes.io/proxy-buffering": "off",  # SSE: every byte on as it comes
            "nginx.ingress.kubernetes.io/proxy-read-timeout": STREAM_TIMEOUT,
            "nginx.ingress.kubernetes.io/proxy-send-timeout": STREAM_TIMEOUT}}
        spec: dict = {"ingressClassName": exposure.ingress_class, "rules": [{"host": exposure.host, "http": {
            "paths": [{"path": "/v1", "pathType": "Prefix", "backend": {
                "service": {"name": backend, "port": {"number": FRONTEND_PORT}}}}]}}]}
        if exposure.tls_secret:
            spec["tls"] = [{"hosts": [exposure.host], "secretName": exposure.tls_secret}]
        out.append({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": ingress_meta, "spec": spec})
    return out


# Where each kind lives on the API server.
PLURALS = {"HTTPRoute": "httproutes", "SecurityPolicy": "securitypolicies", "ReferenceGrant": "referencegrants",
           "Ingress": "ingresses"}
# Who says which objects go beside a graph's DGD: the OpenAI endpoint registers its exposures at
# start (endpoint.apps), so that this runtime applies them without importing a higher app.
_providers: list[Callable[..., list[dict]]] = []


def provide(objects: Callable[..., list[dict]]) -> None:
    """Register ``objects(graph=, dgd_name=, namespace=, spec=)``: what to apply beside a DGD."""
    if objects not in _providers:
        _providers.append(objects)


def objects_beside(*, graph, dgd_name: str, namespace: str, spec) -> list[dict]:
    return [obj for objects in _providers for obj in objects(graph=graph, dgd_name=dgd_name, namespace=namespace,
                                                             spec=spec)]


def object_path(obj: dict) -> str:
    meta = obj["metadata"]
    return custom_path(obj["apiVersion"], PLURALS[obj["kind"]], meta["namespace"], meta["name"])
