"""A manifest file as ``kubectl apply -f`` reads it: one or more YAML documents, of which the
DynamoGraphDeployments become graphs and every other object (the ConfigMap a worker mounts, the
PersistentVolumeClaim its model lives on, a ResourceClaimTemplate or ComputeDomain its GPUs come
from) is a *companion*, kept with the graph's revision and applied beside it.

Upstream ships its graphs this way: at ai-dynamo/dynamo@2a6da14c, 99 of the 249 files holding a
DGD hold other objects too (recipes/*/deploy.yaml with their ConfigMaps, PVCs and DRA claims;
examples/global_planner/*.yaml with several DGDs and the planner's ConfigMap).

What the API server does before it stores a DGD is done here too, so that a manifest it takes
imports as written:

* ``null`` values are pruned wherever the CRD's structural schema does not declare the field
  ``nullable`` (Kubernetes' CRD defaulting and pruning: "null values for fields that either don't
  specify the nullable flag, or give it a false value, will be pruned before defaulting happens",
  k8s.io/apiextensions-apiserver pkg/apiserver/schema/defaulting/prunenulls.go); upstream writes
  ``containers: null`` and ``subComponentType: null`` in 16 of its manifests;
* ``status`` is dropped: the DGD CRD has the status subresource, so a create or an update of the
  main resource ignores it (apiextensions-apiserver pkg/registry/customresource/strategy.go,
  ``PrepareForCreate``/``PrepareForUpdate`` reset status when the subresource is enabled).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from core.errors import ManifestError
from core.schema import load_crd
from core.specio import load_documents

DGD_KIND = "DynamoGraphDeployment"
DGDR_KIND = "DynamoGraphDeploymentRequest"
DGD_GROUP = "nvidia.com"
# A file of a few graphs and their ConfigMaps, not a cluster dump.
MAX_COMPANIONS = 50
MAX_GRAPHS = 10
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass
class Bundle:
    """What a manifest file holds: its DGDs in file order, and every other object."""

    graphs: list[dict[str, Any]]
    companions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def manifest(self) -> dict[str, Any]:
        return self.graphs[0]


def is_dgd(document: Any) -> bool:
    return (isinstance(document, dict) and document.get("kind") == DGD_KIND
            and str(document.get("apiVersion", "")).startswith(DGD_GROUP + "/"))


def load_bundle(text: str | bytes, *, max_bytes: int) -> Bundle:
    """The DGDs of a manifest file (each as the API server would store it) and its companion
    objects. Raises ManifestError naming the document and the path of what is wrong."""
    documents = load_documents(text, max_bytes=max_bytes)
    requests = [d for d in documents if isinstance(d, dict) and d.get("kind") == DGDR_KIND]
    if requests and not any(is_dgd(d) for d in documents):
        raise ManifestError.single("kind", f"the file holds a {DGDR_KIND}, not a graph: the Dynamo operator "
                                           "profiles the model it names and writes the DynamoGraphDeployment itself",
                                   "graph_request",
                                   "import the DynamoGraphDeployment it wrote (kubectl get dgd NAME -o yaml), or "
                                   "send the request from Sizing")
    if len(documents) == 1:
        # One document is the graph itself, whatever it holds: its own errors name its paths.
        return Bundle([as_stored(documents[0])])
    graphs, companions = [], []
    for index, document in enumerate(documents):
        if is_dgd(document):
            graphs.append(as_stored(document))
        else:
            companions.append(_companion(document, index))
    if not graphs:
        kinds = ", ".join(sorted({str(c.get("kind")) for c in companions}))
        raise ManifestError.single("", f"the file holds {len(documents)} objects ({kinds}) and no "
                                       f"{DGD_KIND}", "no_graph", "add the graph's DynamoGraphDeployment")
    _refuse_secrets(documents)
    if len(graphs) > MAX_GRAPHS:
        raise ManifestError.single("", f"the file holds {len(graphs)} DynamoGraphDeployments; at most "
                                       f"{MAX_GRAPHS} are imported at once", "too_many_graphs")
    if len(companions) > MAX_COMPANIONS:
        raise ManifestError.single("", f"the file holds {len(companions)} objects beside its graphs; at most "
                                       f"{MAX_COMPANIONS} are kept with a graph", "too_many_companions")
    names = [(g.get("metadata") or {}).get("name") for g in graphs if isinstance(g.get("metadata"), dict)]
    repeated = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
    if repeated:
        raise ManifestError.single("metadata.name", f"the file holds two DynamoGraphDeployments named "
                                                    f"{repeated[0]!r}", "duplicate_graph")
    return Bundle(graphs, companions)


def _companion(document: Any, index: int) -> dict[str, Any]:
    where = f"document {index + 1}"
    if not isinstance(document, dict):
        raise ManifestError.single("", f"{where} is not a Kubernetes object (a mapping with apiVersion, kind "
                                       "and metadata.name)", "not_an_object")
    for key in ("apiVersion", "kind"):
        if not isinstance(document.get(key), str) or not document.get(key):
            raise ManifestError.single(key, f"{where} has no {key}", "not_an_object")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 253:
        raise ManifestError.single("metadata.name", f"{where} ({document['kind']}) has no valid metadata.name"
                                   + (f": {name!r}" if name else ""), "companion_name",
                                   "name it with lower-case letters, digits, '-' and '.'")
    if document.get("kind") == "List":
        raise ManifestError.single("kind", f"{where} is a List; write its items as documents of their own",
                                   "companion_list")
    return document


def _refuse_secrets(documents: list[Any]) -> None:
    """A revision is shown to viewers, diffed, exported and kept in Git: a Secret's values have
    no place in it. It is refused whole, not masked, so that nothing ever applies a stub of it."""
    for index, document in enumerate(documents):
        if isinstance(document, dict) and document.get("kind") == "Secret" and document.get("apiVersion") == "v1":
            name = (document.get("metadata") or {}).get("name", "")
            raise ManifestError.single("kind", f"document {index + 1} is Secret {name}: a Secret is never kept with "
                                       "a graph (its revisions are shown to viewers, diffed and exported)",
                                       "companion_secret", f"create Secret {name} in the graph's namespace "
                                       "separately (kubectl create secret, or the cluster page's token form) and "
                                       "leave it out of this file")


def as_stored(obj: Any) -> Any:
    """A DGD as the API server stores it from this body: nulls pruned where the schema does not
    allow them, status left out. Anything that is not a DGD of a served version is returned as
    it is, for the validation to name what is wrong with it."""
    if not is_dgd(obj):
        return obj
    schema = _schema(str(obj.get("apiVersion")))
    if schema is None:
        return obj
    out = {k: v for k, v in obj.items() if k != "status" and v is not None}
    if isinstance(out.get("metadata"), dict):
        # ObjectMeta is decoded into Go structs: a null there is the field's zero value.
        out["metadata"] = _drop_nulls(out["metadata"])
    if isinstance(out.get("spec"), dict):
        out["spec"] = prune_nulls(out["spec"], schema["properties"].get("spec") or {})
    return out


def _schema(api_version: str) -> dict[str, Any] | None:
    crd = load_crd()
    group, _, version = api_version.partition("/")
    for entry in crd["spec"]["versions"]:
        if group == crd["spec"]["group"] and entry["name"] == version and entry.get("served"):
            return entry["schema"]["openAPIV3Schema"]
    return None


def prune_nulls(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with every null removed whose schema does not say ``nullable: true`` (maps and
    objects lose the key; lists keep their items, as the API server's pruning does). Under
    ``x-kubernetes-preserve-unknown-fields`` without a schema, values are kept as written."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is None and not isinstance(additional, dict):
            return value if schema.get("x-kubernetes-preserve-unknown-fields") else _drop_nulls(value)
        out = {}
        for key, item in value.items():
            child = (properties or {}).get(key) if properties is not None and key in properties else (
                additional if isinstance(additional, dict) else None)
            if child is None:
                out[key] = item  # an unknown field: the schema check names it
            elif item is None and not child.get("nullable"):
                continue
            else:
                out[key] = prune_nulls(item, child)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune_nulls(item, schema["items"]) for item in value]
    return value


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def bundle_text(documents: list[dict[str, Any]]) -> str:
    """Several objects as one multi-document YAML file, in the order given."""
    from core.specio import dump_yaml

    return "---\n".join(dump_yaml(d) for d in documents)
