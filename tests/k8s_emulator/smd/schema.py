"""Types as structured-merge-diff sees them (``schema/elements.go``), built from an OpenAPI v3
structural schema the way the API server converts a CRD's (an object with ``properties`` is a map
with fields, ``additionalProperties`` its element type, ``x-kubernetes-map-type: atomic`` makes it
atomic; arrays are atomic unless ``x-kubernetes-list-type`` is ``set`` or ``map``;
``x-kubernetes-int-or-string`` and scalars are scalars; anything else is the deduced type).

The deduced type (``schema/elements.go`` ``__untyped_deduced_``) reads its shape from the value:
a map is a granular map of deduced values, a list is atomic, anything else a scalar.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Scalar:
    pass


@dataclass(eq=False)
class ListType:
    elem: Any  # a type or Deduced
    associative: bool = False  # set or map; False: atomic
    keys: tuple[str, ...] = ()
    key_defaults: dict[str, Any] = field(default_factory=dict)  # key field -> its schema default


@dataclass(eq=False)
class MapType:
    fields: dict[str, Any] = field(default_factory=dict)  # name -> type (lazy: OpenAPI dicts)
    elem: Any = None  # additionalProperties / unknown fields; None: deduced
    atomic: bool = False

    def has_field(self, key: str) -> bool:
        return key in self.fields

    def field_type(self, key: str) -> Any:
        if key in self.fields:
            return self.fields[key]
        return self.elem if self.elem is not None else DEDUCED


class Deduced:
    """The type that takes its shape from the value."""


DEDUCED = Deduced()
SCALAR = Scalar()
_DEDUCED_MAP = MapType(elem=DEDUCED)
_DEDUCED_LIST = ListType(elem=DEDUCED)
_cache: dict[int, tuple[dict[str, Any], Any]] = {}


def resolve(t: Any, value: Any) -> Any:
    """The atom of type ``t`` (an OpenAPI dict, a built type or DEDUCED) for ``value``."""
    if isinstance(t, dict):
        t = resolve_openapi(t)
    if t is None or isinstance(t, Deduced):
        if isinstance(value, dict):
            return _DEDUCED_MAP
        if isinstance(value, list):
            return _DEDUCED_LIST
        return SCALAR
    return t


def resolve_openapi(s: dict[str, Any]) -> Any:
    hit = _cache.get(id(s))
    if hit is not None and hit[0] is s:
        return hit[1]
    atom = _convert(s)
    _cache[id(s)] = (s, atom)
    return atom


def _convert(s: dict[str, Any]) -> Any:
    if s.get("x-kubernetes-int-or-string"):
        return SCALAR
    kind = s.get("type")
    if kind == "array":
        items = s.get("items") if isinstance(s.get("items"), dict) else None
        list_type = s.get("x-kubernetes-list-type", "atomic")
        keys = tuple(s.get("x-kubernetes-list-map-keys") or ()) if list_type == "map" else ()
        props = (items or {}).get("properties") or {}
        defaults = {k: props[k]["default"] for k in keys if "default" in (props.get(k) or {})}
        return ListType(elem=items if items is not None else DEDUCED, associative=list_type in ("set", "map"),
                        keys=keys, key_defaults=defaults)
    if kind == "object" or "properties" in s or "additionalProperties" in s:
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        if not props and extra is None and s.get("x-kubernetes-preserve-unknown-fields"):
            return DEDUCED
        return MapType(fields=dict(props), elem=extra if isinstance(extra, dict) else None,
                       atomic=s.get("x-kubernetes-map-type") == "atomic")
    if kind in ("string", "integer", "number", "boolean"):
        return SCALAR
    return DEDUCED


# ObjectMeta as the API server types it (k8s.io/apimachinery/pkg/apis/meta/v1 ObjectMeta: labels
# and annotations are maps of strings, finalizers a set, ownerReferences a list keyed by uid).
OBJECT_META: dict[str, Any] = {
    "type": "object",
    "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "ownerReferences": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"],
                            "items": {"type": "object", "properties": {
                                "uid": {"type": "string"}, "apiVersion": {"type": "string"},
                                "kind": {"type": "string"}, "name": {"type": "string"},
                                "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}}}},
    },
}


def object_type(schema: dict[str, Any] | None) -> Any:
    """The type of a whole object: its CRD schema (or the deduced type) with ObjectMeta typed."""
    hit = _object_types.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    base = dict(schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    base["properties"] = {**(base.get("properties") or {}), "metadata": OBJECT_META}
    base.setdefault("type", "object")
    _object_types[id(schema)] = (schema, base)
    return base


_object_types: dict[int, tuple[Any, dict[str, Any]]] = {}
