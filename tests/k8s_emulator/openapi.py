"""``/openapi/v3`` and ``/openapi/v2`` built from the installed CRDs, as kube-apiserver publishes them.

kubectl (1.27+) reads them before every ``apply``/``create``/``diff`` with ``--validate=strict`` (its
default): the v3 document tells it whether the server does field validation (a ``fieldValidation``
query parameter on the kind's PATCH operation; then validation is left to the server), the v2
document (protobuf, gnostic's ``openapi_v2.Document``) is its client-side schema. Without them it
refuses to apply ("failed to download openapi ... turn validation off with --validate=false").

What is published, per served CRD version (kube-apiserver ``pkg/controlplane/.../builder``):
* schema ``<reversed group>.<version>.<Kind>`` (``com.nvidia.v1beta1.DynamoGraphDeployment``): the
  CRD's ``openAPIV3Schema`` with ``metadata`` a reference to ObjectMeta, ``apiVersion``/``kind``
  described, and ``x-kubernetes-group-version-kind``; and its ``...List``;
* paths for list/create, get/replace/patch/delete, ``/status`` and ``/scale`` with the query
  parameters ``dryRun``, ``fieldManager``, ``fieldValidation`` (and ``force`` on PATCH).
Core kinds are not described (kubectl then skips client-side validation of them, as for any kind
missing from the schema). v2 drops what Swagger 2 cannot say (``nullable``, ``anyOf`` of
int-or-string), as the real server's v2 conversion does.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from .resources import Registry, Resource

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
SCALE = "io.k8s.api.autoscaling.v1.Scale"

_QUERY = {
    "dryRun": "When present, indicates that modifications should not be persisted.",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is making these changes.",
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the request containing "
                       "unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
    "force": "Force is going to \"force\" Apply requests.",
}
_META_SCHEMAS: dict[str, Any] = {
    OBJECT_META: {"type": "object", "description": "ObjectMeta is metadata that all persisted resources must have.",
                  "properties": {k: {"type": "string"} for k in ("name", "namespace", "generateName", "uid",
                                                                 "resourceVersion", "creationTimestamp")}
                  | {"labels": {"type": "object", "additionalProperties": {"type": "string"}},
                     "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                     "generation": {"type": "integer", "format": "int64"}}},
    LIST_META: {"type": "object", "properties": {"resourceVersion": {"type": "string"},
                                                 "continue": {"type": "string"}}},
    STATUS: {"type": "object", "properties": {"kind": {"type": "string"}, "apiVersion": {"type": "string"},
                                              "status": {"type": "string"}, "message": {"type": "string"},
                                              "reason": {"type": "string"}, "code": {"type": "integer"}}},
    SCALE: {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "replicas": {"type": "integer", "format": "int32"}}}, "status": {"type": "object", "properties": {
            "replicas": {"type": "integer", "format": "int32"}, "selector": {"type": "string"}}}},
            "x-kubernetes-group-version-kind": [{"group": "autoscaling", "kind": "Scale", "version": "v1"}]},
}


def schema_name(res: Resource, version: str, kind: str | None = None) -> str:
    reversed_group = ".".join(reversed(res.group.split(".")))
    return f"{reversed_group}.{version}.{kind or res.kind}"


def _gvk(res: Resource, version: str, kind: str | None = None) -> dict[str, str]:
    return {"group": res.group, "kind": kind or res.kind, "version": version}


def _crd_schema(res: Resource, version: str) -> dict[str, Any] | None:
    ver = next((v for v in (res.crd or {}).get("spec", {}).get("versions", []) if v["name"] == version), None)
    schema = ((ver or {}).get("schema") or {}).get("openAPIV3Schema")
    return copy.deepcopy(schema) if schema else None


def _object_schema(res: Resource, version: str, ref: str) -> dict[str, Any]:
    schema = _crd_schema(res, version) or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "description": "APIVersion defines the versioned schema of this "
                                                            "representation of an object."}
    props["kind"] = {"type": "string", "description": "Kind is a string value representing the REST resource."}
    props["metadata"] = {"$ref": ref + OBJECT_META}
    schema["x-kubernetes-group-version-kind"] = [_gvk(res, version)]
    return schema


def _list_schema(res: Resource, version: str, ref: str) -> dict[str, Any]:
    return {"type": "object", "required": ["items"], "description": f"{res.kind}List is a list of {res.kind}",
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "items": {"type": "array", "items": {"$ref": ref + schema_name(res, version)}},
                           "metadata": {"$ref": ref + LIST_META}},
            "x-kubernetes-group-version-kind": [_gvk(res, version, res.list_kind)]}


def _operation(res: Resource, version: str, verb: str, action: str, params: tuple[str, ...], body: str | None,
               v3: bool, sub: str = "") -> dict[str, Any]:
    kind = "Scale" if sub == "scale" else res.kind
    op: dict[str, Any] = {
        "operationId": f"{verb}{'Namespaced' if res.namespaced else ''}{kind}{sub.title()}",
        "tags": [f"{res.group.replace('.', '')}_{version}"],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": ({"group": "autoscaling", "kind": "Scale", "version": "v1"}
                                            if sub == "scale" else _gvk(res, version)),
        "parameters": [_param(name, v3) for name in params],
    }
    ref = "#/components/schemas/" if v3 else "#/definitions/"
    target = SCALE if sub == "scale" else (schema_name(res, version, res.list_kind) if action == "list"
                                           else schema_name(res, version))
    if v3:
        op["responses"] = {"200": {"description": "OK", "content": {
            "application/json": {"schema": {"$ref": ref + target}}}}}
        if body is not None:
            op["requestBody"] = {"content": {ctype: {"schema": {"$ref": ref + target} if body == "object"
                                                     else {"type": "object"}}
                                             for ctype in _body_types(action)}, "required": True}
    else:
        op["responses"] = {"200": {"description": "OK", "schema": {"$ref": ref + target}}}
        op["consumes"] = _body_types(action) if body is not None else ["*/*"]
        op["produces"] = ["application/json", "application/yaml"]
        if body is not None:
            op["parameters"].append({"name": "body", "in": "body", "required": True,
                                     "schema": {"$ref": ref + target} if body == "object" else {"type": "object"}})
    return op


def _body_types(action: str) -> list[str]:
    if action == "patch":
        return ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
    return ["application/json", "application/yaml"]


def _param(name: str, v3: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "in": "query", "description": _QUERY[name], "uniqueItems": True}
    kind = "boolean" if name == "force" else "string"
    if v3:
        out["schema"] = {"type": kind, "uniqueItems": True}
        out.pop("uniqueItems")
    else:
        out["type"] = kind
    return out


_WRITE = ("dryRun", "fieldManager", "fieldValidation")


def _paths(res: Resource, version: str, v3: bool) -> dict[str, Any]:
    prefix = f"/apis/{res.group}/{version}/" + ("namespaces/{namespace}/" if res.namespaced else "")
    collection = prefix + res.plural
    item = collection + "/{name}"
    paths: dict[str, Any] = {
        collection: {
            "get": _operation(res, version, "list", "list", (), None, v3),
            "post": _operation(res, version, "create", "post", _WRITE, "object", v3),
        },
        item: {
            "get": _operation(res, version, "read", "get", (), None, v3),
            "put": _operation(res, version, "replace", "put", _WRITE, "object", v3),
            "patch": _operation(res, version, "patch", "patch", (*_WRITE, "force"), "patch", v3),
            "delete": _operation(res, version, "delete", "delete", ("dryRun",), None, v3),
        },
    }
    for sub, present in (("status", res.status), ("scale", res.scale)):
        if present:
            paths[f"{item}/{sub}"] = {
                "get": _operation(res, version, "read", "get", (), None, v3, sub),
                "put": _operation(res, version, "replace", "put", _WRITE, "object", v3, sub),
                "patch": _operation(res, version, "patch", "patch", (*_WRITE, "force"), "patch", v3, sub),
            }
    for path in paths.values():
        path["parameters"] = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
                              if v3 else {"name": "name", "in": "path", "required": True, "type": "string"}]
    return paths


def _custom(registry: Registry) -> list[tuple[Resource, str]]:
    return sorted({(res.group, version, res.plural): (res, version)
                   for (_g, version, _p), res in registry.by_key.items() if res.custom}.values(),
                  key=lambda rv: (rv[0].group, rv[1], rv[0].plural))


def v3_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """The OpenAPI 3 document of one group-version (``/openapi/v3/apis/<group>/<version>``)."""
    found = [(res, v) for res, v in _custom(registry) if res.group == group and v == version]
    if not found:
        return None
    ref = "#/components/schemas/"
    schemas: dict[str, Any] = dict(copy.deepcopy(_META_SCHEMAS))
    paths: dict[str, Any] = {}
    for res, ver in found:
        schemas[schema_name(res, ver)] = _object_schema(res, ver, ref)
        schemas[schema_name(res, ver, res.list_kind)] = _list_schema(res, ver, ref)
        paths.update(_paths(res, ver, v3=True))
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
            "paths": paths, "components": {"schemas": schemas}}


def v3_root(registry: Registry) -> dict[str, Any]:
    """``/openapi/v3``: where each group-version's document is, with a hash that changes with it."""
    out: dict[str, Any] = {}
    for group, version in sorted({(res.group, v) for res, v in _custom(registry)}):
        doc = v3_document(registry, group, version)
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()
        out[f"apis/{group}/{version}"] = {"serverRelativeURL": f"/openapi/v3/apis/{group}/{version}?hash={digest}"}
    return {"paths": out}


def _to_swagger2(schema: Any) -> Any:
    """Swagger 2 has no ``nullable`` and no ``anyOf``/``oneOf``: int-or-string stays as its extension."""
    if isinstance(schema, list):
        return [_to_swagger2(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("nullable", "anyOf", "oneOf", "not"):
            continue
        if key == "$ref" and isinstance(value, str):
            value = value.replace("#/components/schemas/", "#/definitions/")
        out[key] = _to_swagger2(value) if key not in ("enum", "default", "example") else value
    return out


def v2_document(registry: Registry) -> dict[str, Any]:
    """The Swagger 2 document of every CRD version (``/openapi/v2``, as JSON)."""
    ref = "#/definitions/"
    definitions: dict[str, Any] = {k: _to_swagger2(v) for k, v in copy.deepcopy(_META_SCHEMAS).items()}
    paths: dict[str, Any] = {}
    for res, version in _custom(registry):
        definitions[schema_name(res, version)] = _to_swagger2(_object_schema(res, version, ref))
        definitions[schema_name(res, version, res.list_kind)] = _list_schema(res, version, ref)
        paths.update(_paths(res, version, v3=False))
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.31.0"}, "paths": paths,
            "definitions": definitions}
