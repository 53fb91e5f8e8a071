"""What the graph page says where Argo CD or Flux applies a graph: which tool, and the
settings that keep its syncs from reverting replicas that a scaling adapter owns.

``spec.components`` (v1beta1) is a list, so Argo CD needs a jq path
(``jqPathExpressions``), not a JSON pointer; v1alpha1's ``spec.services`` is a map. Flux's
kustomize-controller has no ignore list: it owns exactly the fields its manifest sets (server-side
apply), so the equivalent is a Kustomization patch that removes ``replicas`` from the pools an
adapter scales, before Flux applies it."""

from __future__ import annotations

import functools

from core.dgd.gitops import ARGOCD, FLUX
from core.dgd.render import V1ALPHA1, V1BETA1
from core.specio import dump_yaml


# Both snippets are pure functions of a few strings; the graph page shows them on every load, and
# dumping YAML is a third of its Git card: kept per process.
@functools.lru_cache(maxsize=4096)
def argocd_ignore_differences(name: str, namespace: str, api_version: str = V1BETA1) -> str:
    field = ".spec.services[].replicas" if api_version == V1ALPHA1 else ".spec.components[].replicas"
    patch = {"spec": {
        "ignoreDifferences": [{"group": "nvidia.com", "kind": "DynamoGraphDeployment", "name": name,
                               **({"namespace": namespace} if namespace else {}), "jqPathExpressions": [field]}],
        # Without it a sync still applies the whole manifest, replicas included.
        "syncPolicy": {"syncOptions": ["RespectIgnoreDifferences=true"]}}}
    return dump_yaml(patch)


def flux_patch(name: str, pools, api_version: str = V1BETA1) -> str:
    """``pools``: (index in spec.components, name) of each pool whose replicas Flux must leave alone."""
    return _flux_patch(name, tuple(pools), api_version)


@functools.lru_cache(maxsize=4096)
def _flux_patch(name: str, pools: tuple[tuple[int, str], ...], api_version: str) -> str:
    if api_version == V1ALPHA1:
        ops = [{"op": "remove", "path": f"/spec/services/{pool}/replicas"} for _i, pool in pools]
    else:
        ops = [{"op": "remove", "path": f"/spec/components/{i}/replicas"} for i, _pool in pools]
    kustomization = {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                     "spec": {"patches": [{"target": {"group": "nvidia.com", "kind": "DynamoGraphDeployment",
                                                      "name": name},
                                           "patch": dump_yaml(ops)}]}}
    return dump_yaml(kustomization)


def scaled_pools(spec) -> list[tuple[int, str]]:
    """Pools whose replicas are not Git's: those with a scaling adapter, else every worker pool."""
    services = list(spec.services)
    adapted = [(i, s.name) for i, s in enumerate(services) if s.scaling_adapter]
    return adapted or [(i, s.name) for i, s in enumerate(services) if s.role != "frontend"]


def gitops_view(graph, deployment) -> dict:
    owner = (deployment.ownership or {}).get("gitops") if deployment is not None else None
    spec = graph.head.graph_spec if graph.head else None
    if spec is None:
        return {"gitops": owner}
    namespace = (deployment.namespace if deployment is not None else "") or spec.namespace or ""
    api_version = (deployment.api_version if deployment is not None else "") or V1BETA1
    return {"gitops": owner, "argocd_tool": ARGOCD, "flux_tool": FLUX,
            "argocd_snippet": argocd_ignore_differences(graph.name, namespace, api_version),
            "flux_snippet": flux_patch(graph.name, scaled_pools(spec), api_version)}
