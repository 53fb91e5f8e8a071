"""A revision's companions on a cluster (graphs/companions.py): the ConfigMaps, PVCs, DRA claims and
other objects its manifest file held beside the DGD, applied before the DGD (a worker that mounts
a ConfigMap or a PVC needs it there first), as ``kubectl apply --server-side -f`` applies a file.

* Into the graph's namespace: a companion without a namespace goes there; one that names another
  namespace, or a kind the cluster serves cluster-wide (a ClusterRoleBinding), is refused before
  anything is sent: the control plane writes into the namespaces a cluster allows it, and nothing
  cluster-wide.
* Where each kind lives is read from the cluster's discovery (``/api/v1``, ``/apis/<group>/<v>``),
  as kubectl reads it: a kind the cluster does not serve (a ComputeDomain without NVIDIA's DRA
  driver) fails the apply, naming the object and what to install.
* Server-side apply under the DGD's field manager, first as a server dry run of every companion
  (a kind missing or an object refused writes nothing at all), then for real just before the
  DGD. A field another manager owns is a conflict naming it, unless the apply is forced.
* Not owned by the DGD: deleting the graph's deployment leaves them (a PVC holds model weights;
  a ConfigMap may be shared), and the deletion's message says so.
"""

from __future__ import annotations

import copy

from clusters.kubernetes import APPLY_PATCH, KubeClient, KubeFailure
from clusters.resources import core_path, custom_path

from ...companions import label


def placed(companions: list[dict], namespace: str) -> list[dict]:
    """Each companion as it is applied: in ``namespace``. Refuses one that names another
    namespace (before any cluster call)."""
    out = []
    for obj in companions:
        body = copy.deepcopy(obj)
        meta = body.setdefault("metadata", {})
        named = meta.get("namespace")
        if named and named != namespace:
            raise KubeFailure(f"{label(obj)} names namespace {named!r}, and the graph is applied in {namespace!r}: "
                              "a graph's companions are applied into its own namespace; remove the namespace from "
                              "the object (or apply the graph in that namespace)", status=422)
        meta["namespace"] = namespace
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
            meta.pop(key, None)  # server-set: an apply that carries them is refused or misread
        body.pop("status", None)
        out.append(body)
    return out


def resolve(kube: KubeClient, bodies: list[dict], cluster: str) -> list[tuple[dict, str]]:
    """(body, path) of each companion, from the cluster's discovery."""
    served: dict[str, list[dict] | None] = {}
    out = []
    for body in bodies:
        api_version, kind = body["apiVersion"], body["kind"]
        if api_version not in served:
            where = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            found = kube.get(where, what=f"read which kinds cluster {cluster} serves in {api_version}")
            served[api_version] = (found or {}).get("resources") if found else None
        resources = served[api_version]
        entry = next((r for r in resources or [] if r.get("kind") == kind and "/" not in r.get("name", "")), None)
        if entry is None:
            raise KubeFailure(f"apply {label(body)} on cluster {cluster}: the cluster does not serve {api_version} "
                              f"{kind}: install what provides it (its CRD or API group), or remove the object from "
                              "the graph's file", status=404)
        if not entry.get("namespaced", True):
            raise KubeFailure(f"apply {label(body)} on cluster {cluster}: {kind} is cluster-wide, and the control "
                              "plane applies a graph's companions into its namespace only: apply it separately "
                              "(kubectl apply), or remove it from the graph's file", status=422)
        meta = body["metadata"]
        plural = entry["name"]
        path = (core_path(plural, meta["namespace"], meta["name"]) if api_version == "v1"
                else custom_path(api_version, plural, meta["namespace"], meta["name"]))
        out.append((body, path))
    return out


def apply(kube: KubeClient, resolved: list[tuple[dict, str]], query: list, *, cluster: str,
          force: bool = False) -> list[tuple[dict | None, dict, str]]:
    """Server-side apply each companion, in order; (live before, after, what) of each."""
    results = []
    for body, path in resolved:
        meta = body["metadata"]
        what = f"apply {body['kind']} {meta['namespace']}/{meta['name']} on cluster {cluster}"
        live = kube.get(path, what=what)
        try:
            after = kube.call("PATCH", path, what=what, query=[*query, *([("force", "true")] if force else [])],
                              body=body, content_type=APPLY_PATCH)
        except KubeFailure as exc:
            if exc.status != 409:
                raise
            raise KubeFailure(f"{exc}. Another field manager owns these fields of {label(body)}; apply with force "
                              "to take them", status=409, body=exc.body) from None
        results.append((live, after, f"{body['kind']} {meta['namespace']}/{meta['name']}"))
    return results


def changed(results: list[tuple[dict | None, dict, str]]) -> bool:
    return any(live is None or (after.get("metadata") or {}).get("resourceVersion")
               != (live.get("metadata") or {}).get("resourceVersion") for live, after, _what in results)
