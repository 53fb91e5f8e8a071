"""Resource descriptors (core kinds and CRD-defined kinds) and the discovery documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .schema import VersionSchema, compiled_schema

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_META_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass
class Resource:
    group: str
    versions: list[str]
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    short_names: list[str] = field(default_factory=list)
    status: bool = False
    scale: dict[str, str] | None = None
    field_labels: tuple[str, ...] | None = _META_FIELDS
    custom: bool = False
    storage_version: str = ""
    deprecations: dict[str, str] = field(default_factory=dict)
    crd: dict[str, Any] | None = None
    subresources: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def schema(self, version: str) -> VersionSchema | None:
        """The compiled schema of a served version (CRDs only), built on first use and cached."""
        if self.crd is None:
            return None
        for ver in self.crd["spec"]["versions"]:
            if ver["name"] == version and ver.get("schema", {}).get("openAPIV3Schema"):
                return compiled_schema(self.crd["metadata"]["name"], version, ver["schema"]["openAPIV3Schema"])
        return None

    def scoped(self, namespace: str | None) -> str | None:
        return namespace if self.namespaced else None


def _core(plural: str, kind: str, *, namespaced: bool = True, short: tuple[str, ...] = (),
          status: bool = False, fields: tuple[str, ...] = (), subs: tuple[str, ...] = ()) -> Resource:
    return Resource("", ["v1"], plural, kind.lower(), kind, namespaced, list(short), status,
                    field_labels=_META_FIELDS + fields, storage_version="v1", subresources=subs)


CORE_RESOURCES = [
    _core("pods", "Pod", short=("po",), status=True, subs=("log",), fields=(
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")),
    _core("events", "Event", short=("ev",), fields=(
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
        "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
        "reason", "reportingComponent", "source", "type")),
    _core("secrets", "Secret", fields=("type",)),
    _core("configmaps", "ConfigMap", short=("cm",)),
    _core("services", "Service", short=("svc",), status=True),
    _core("namespaces", "Namespace", namespaced=False, short=("ns",), status=True, fields=("status.phase",)),
    _core("nodes", "Node", namespaced=False, short=("no",), status=True, fields=("spec.unschedulable",)),
    # The DGDR controller's profiling Job (tests/k8s_emulator/dgdr.py).
    Resource("batch", ["v1"], "jobs", "job", "Job", short_names=[], status=True, field_labels=_META_FIELDS,
             storage_version="v1"),
    # Kinds upstream's manifests hold beside a DGD (a graph's companions): a PVC for the model,
    # DRA's ResourceClaimTemplate (resource.k8s.io/v1, GA in Kubernetes 1.34), a Deployment.
    # ComputeDomain is a CRD of NVIDIA's DRA driver: tests install it (crds/).
    _core("persistentvolumeclaims", "PersistentVolumeClaim", short=("pvc",), status=True),
    Resource("resource.k8s.io", ["v1"], "resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate",
             field_labels=_META_FIELDS, storage_version="v1"),
    Resource("apps", ["v1"], "deployments", "deployment", "Deployment", short_names=["deploy"], status=True,
             field_labels=_META_FIELDS, storage_version="v1", subresources=()),
    Resource("rbac.authorization.k8s.io", ["v1"], "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding",
             namespaced=False, field_labels=_META_FIELDS, storage_version="v1"),
]

CRD_RESOURCE = Resource(
    "apiextensions.k8s.io", ["v1"], "customresourcedefinitions", "customresourcedefinition",
    "CustomResourceDefinition", namespaced=False, short_names=["crd", "crds"], status=True,
    storage_version="v1")


def resource_from_crd(crd: dict[str, Any]) -> Resource | None:
    spec = crd["spec"]
    names = spec["names"]
    versions = [v for v in spec["versions"] if v.get("served", True)]
    if not versions:
        return None
    storage = next((v["name"] for v in spec["versions"] if v.get("storage")), versions[0]["name"])
    subres = versions[0].get("subresources") or {}
    selectable = [f["jsonPath"].lstrip(".") for v in versions for f in v.get("selectableFields") or []]
    return Resource(
        group=spec["group"],
        versions=[v["name"] for v in versions],
        plural=names["plural"],
        singular=names.get("singular", names["kind"].lower()),
        kind=names["kind"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=list(names.get("shortNames") or []),
        status="status" in subres,
        scale=subres.get("scale"),
        field_labels=_META_FIELDS + tuple(selectable),
        custom=True,
        storage_version=storage,
        deprecations={v["name"]: v.get("deprecationWarning")
                      or f"{spec['group']}/{v['name']} {names['kind']} is deprecated"
                      for v in versions if v.get("deprecated")},
        crd=crd,
    )


class Registry:
    """Core resources plus whatever the installed CRDs define (rebuilt when CRDs change)."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str, str], Resource] = {}
        self.rebuild([])

    def rebuild(self, crds: list[dict[str, Any]]) -> None:
        table: dict[tuple[str, str, str], Resource] = {}
        for res in [*CORE_RESOURCES, CRD_RESOURCE]:
            table[(res.group, "v1", res.plural)] = res
        for crd in crds:
            res = resource_from_crd(crd)
            if res is not None:
                for version in res.versions:
                    table[(res.group, version, res.plural)] = res
        self.by_key = table

    def lookup(self, group: str, version: str, plural: str) -> Resource | None:
        return self.by_key.get((group, version, plural))

    def by_group_resource(self, group: str, plural: str) -> Resource | None:
        return next((r for r in self.by_key.values() if r.group == group and r.plural == plural), None)

    # -- discovery -----------------------------------------------------------------------------
    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred (storage) version first."""
        out: dict[str, list[str]] = {}
        for (group, version, _plural), res in self.by_key.items():
            if not group:
                continue
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
            versions.sort(key=lambda v, r=res: (v != r.storage_version, v))
        return out

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = self.groups().get(group)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries,
                "preferredVersion": entries[0]}

    def api_group_list(self) -> dict[str, Any]:
        groups = [g for g in (self.api_group(name) for name in sorted(self.groups())) if g]
        for g in groups:
            g.pop("kind")
            g.pop("apiVersion")
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        resources = []
        for (g, v, plural), res in sorted(self.by_key.items()):
            if g != group or v != version:
                continue
            entry = {"name": plural, "singularName": res.singular, "namespaced": res.namespaced,
                     "kind": res.kind, "verbs": VERBS}
            if res.short_names:
                entry["shortNames"] = res.short_names
            if res.custom:
                entry["categories"] = ["all"]
                entry["storageVersionHash"] = ""
            resources.append(entry)
            if res.status:
                resources.append({"name": f"{plural}/status", "singularName": "", "namespaced": res.namespaced,
                                  "kind": res.kind, "verbs": ["get", "patch", "update"]})
            if res.scale:
                resources.append({"name": f"{plural}/scale", "singularName": "", "namespaced": res.namespaced,
                                  "group": "autoscaling", "version": "v1", "kind": "Scale",
                                  "verbs": ["get", "patch", "update"]})
            for sub in res.subresources:
                resources.append({"name": f"{plural}/{sub}", "singularName": "", "namespaced": res.namespaced,
                                  "kind": res.kind, "verbs": ["get"]})
        if not resources:
            return None
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": resources}
