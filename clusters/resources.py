"""Where things are on a Kubernetes API server, and the names the Dynamo operator gives the
objects it creates. Pure: no client library (clusters/kubernetes.py is the one module that
imports it)."""

from __future__ import annotations


def custom_path(api_version: str, plural: str, namespace: str, name: str = "", sub: str = "") -> str:
    path = f"/apis/{api_version}/namespaces/{namespace}/{plural}"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def core_path(plural: str, namespace: str | None = None, name: str = "", sub: str = "") -> str:
    path = "/api/v1" + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def adapter_name(dgd: str, component: str) -> str:
    """The operator's DGDSA name (generateAdapterName): ``<dgd>-<lower(component)>``."""
    return f"{dgd}-{component.lower()}"


def service_name(dgd: str, component: str) -> str:
    """The Service the operator creates for a component: ``NormalizeKubeResourceName(<dgd>-<lower(comp)>)``,
    lower case with dots turned to ``-`` (Services reject dots; internal/dynamo/graph.go)."""
    return f"{dgd}-{component.lower()}".replace(".", "-").lower()
