# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The caller's control-plane API key stops at the gateway (issue #42): the generated HTTPRoute,
SecurityPolicy and Ingress passed it on to the graph's frontend, whose image any operator
chooses; deploy/gateway/nginx.conf, the template for an nginx of one's own, strips it."""

from __future__ import annotations

import asyncio

import kubernetes_validate
import pytest

from endpoint import authorize
from graphs.runtimes.kubernetes.gateway import Exposure, gateway_objects
from tests.playground_fixtures import _fresh_limits, make_graph, tokens  # noqa: F401


def _render(**options) -> dict:
    return {o["kind"]: o for o in gateway_objects(graph="demo", dgd_name="demo", namespace="llm",
                                                  frontend="Frontend", exposure=Exposure(**options))}


def test_the_httproute_removes_the_key_after_envoy_has_asked_the_control_plane():
    objects = _render(host="llm.example.com", gateway_name="eg")
    ext = objects["SecurityPolicy"]["spec"]["extAuth"]["http"]
    assert ext["headersToBackend"] == ["authorization"]  # the authorizer still sees it
    (rule,) = objects["HTTPRoute"]["spec"]["rules"]
    # Gateway API v1 HTTPRouteFilter: the router applies it to the request it sends the backend.
    assert {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": ["Authorization"]}} \
        in rule["filters"]


def test_the_ingress_replaces_the_key_with_the_authorizers_answer_which_has_none():
    ingress = _render(host="llm.example.com", ingress_class="nginx")["Ingress"]
    kubernetes_validate.validate(ingress, "1.32", strict=True)
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/auth-response-headers"] == "Authorization"


@pytest.mark.django_db(transaction=True)
def test_the_authorizers_allow_answer_carries_no_authorization_to_copy(users, tokens):
    """ingress-nginx copies the auth answer's Authorization onto the upstream request: the
    control plane's 200 must not have one, or the frontend would get it."""
    make_graph("demo", "m", "http://127.0.0.1:1", user=users["admin"])
    reply = asyncio.run(authorize.authorize("demo", {"authorization": f"Bearer {tokens['operator']}"}))
    assert reply.status == 200
    assert "authorization" not in {name.lower() for name, _ in reply.headers}
