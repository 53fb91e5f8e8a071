"""Path elements and the FieldsV1 format (``fieldpath/element.go``, ``fieldpath/serialize-pe.go``,
``fieldpath/serialize.go``).

A path element is a hashable tuple:
* ``("f", name)``: a field of a map;
* ``("k", ((key, json), ...))``: an item of a list keyed by its key fields, sorted by name, each
  value as JSON text;
* ``("v", json)``: an item of a set;
* ``("i", index)``: a list index.
"""

from __future__ import annotations

import json
from typing import Any

PathElement = tuple[str, Any]
Path = tuple[PathElement, ...]


def canonical(value: Any) -> str:
    """A value as JSON text, for use in keys (jsoniter's compact output, maps sorted by key)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def field(name: str) -> PathElement:
    return ("f", name)


def key(fields: dict[str, Any]) -> PathElement:
    return ("k", tuple(sorted((name, canonical(value)) for name, value in fields.items())))


def set_value(value: Any) -> PathElement:
    return ("v", canonical(value))


def element_string(pe: PathElement) -> str:
    """``PathElement.String()``: ``.name``, ``[k1=v1,k2=v2]``, ``[=value]``, ``[3]``."""
    kind, data = pe
    if kind == "f":
        return "." + data
    if kind == "k":
        return "[" + ",".join(f"{name}={text}" for name, text in data) + "]"
    if kind == "v":
        return f"[={data}]"
    return f"[{data}]"


def path_string(path: Path) -> str:
    return "".join(element_string(pe) for pe in path)


def _serialize_pe(pe: PathElement) -> str:
    kind, data = pe
    if kind == "f":
        return "f:" + data
    if kind == "k":
        return "k:{" + ",".join(f"{json.dumps(name)}:{text}" for name, text in data) + "}"
    if kind == "v":
        return "v:" + data
    return f"i:{data}"


def _parse_pe(text: str) -> PathElement:
    kind, _, rest = text.partition(":")
    if kind == "f":
        return ("f", rest)
    if kind == "k":
        return key(json.loads(rest))
    if kind == "v":
        return ("v", canonical(json.loads(rest)))
    if kind == "i":
        return ("i", int(rest))
    raise ValueError(f"unknown path element {text!r}")


def to_fields_v1(members: set[Path]) -> dict[str, Any]:
    """A field set as FieldsV1: one object per path element; ``"."`` marks a member that has
    children; a member without children is ``{}``."""
    root: dict[str, Any] = {}
    for path in sorted(members, key=lambda p: [_serialize_pe(pe) for pe in p]):
        node = root
        for pe in path:
            node = node.setdefault(_serialize_pe(pe), {})
    _mark(root, members, ())
    return root


def _mark(node: dict[str, Any], members: set[Path], prefix: Path) -> None:
    for text, child in node.items():
        if text == ".":
            continue
        path = (*prefix, _parse_pe(text))
        if child and path in members:
            child["."] = {}
        _mark(child, members, path)


def from_fields_v1(node: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for text, child in (node or {}).items():
        if text == ".":
            continue
        path = (*prefix, _parse_pe(text))
        children = {k: v for k, v in (child or {}).items() if k != "."}
        if not children or "." in (child or {}):
            out.add(path)
        out |= from_fields_v1(children, path)
    return out


def with_prefix(members: set[Path], pe: PathElement) -> set[Path]:
    """``Set.WithPrefix``: the members under ``pe``, without it."""
    return {p[1:] for p in members if len(p) > 1 and p[0] == pe}
