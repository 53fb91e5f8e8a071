"""Field ownership (``metadata.managedFields``) and server-side apply.

Fields are leaf paths: ``("f:spec", "f:replicas")``; an element of an ``x-kubernetes-list-type: map``
list is ``k:{"name":"x"}``; other lists and empty objects are leaves (atomic). This is an approximation
of structured-merge-diff: enough for ownership, conflicts (409 unless ``force``), pruning of fields
a manager stopped applying, and ``managedFields`` in the FieldsV1 format.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from .errors import ApiError
from .patches import clone

Path = tuple[str, ...]
Owners = dict[tuple[str, str, str], set[Path]]  # (manager, operation, subresource) -> fields

_SKIP_TOP = ("apiVersion", "kind", "metadata", "status")


def _child(schema: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if not schema:
        return None
    props = schema.get("properties") or {}
    if key in props:
        return props[key]
    addl = schema.get("additionalProperties")
    return addl if isinstance(addl, dict) else None


def _map_keys(schema: dict[str, Any] | None) -> list[str] | None:
    if schema and schema.get("x-kubernetes-list-type") == "map":
        return schema.get("x-kubernetes-list-map-keys") or None
    return None


def _ident(item: dict[str, Any], keys: list[str]) -> str:
    return "k:" + json.dumps({k: item.get(k) for k in keys}, sort_keys=True, separators=(",", ":"))


def leaves(value: Any, schema: dict[str, Any] | None, prefix: Path = ()) -> set[Path]:
    if isinstance(value, dict) and value:
        out: set[Path] = set()
        for key, sub in value.items():
            out |= leaves(sub, _child(schema, key), (*prefix, f"f:{key}"))
        return out
    keys = _map_keys(schema)
    if isinstance(value, list) and keys and all(isinstance(i, dict) for i in value) and value:
        items = (schema or {}).get("items")
        out = set()
        for item in value:
            out |= leaves(item, items, (*prefix, _ident(item, keys)))
        return out
    return {prefix}


def object_fields(obj: dict[str, Any], schema: dict[str, Any] | None, subresource: str) -> set[Path]:
    """The fields of ``obj`` a write through the main endpoint or ``/status`` manages."""
    out: set[Path] = set()
    for key, value in obj.items():
        if subresource == "status":
            if key == "status":
                out |= leaves(value, _child(schema, key), ("f:status",))
        elif key == "metadata":
            for meta_key in ("labels", "annotations"):
                if (value or {}).get(meta_key):
                    out |= leaves(value[meta_key], None, ("f:metadata", f"f:{meta_key}"))
        elif key not in _SKIP_TOP:
            out |= leaves(value, _child(schema, key), (f"f:{key}",))
    return out


_MISSING = object()


def get_path(obj: Any, path: Path) -> Any:
    cur = obj
    for seg in path:
        if seg.startswith("f:") and isinstance(cur, dict) and seg[2:] in cur:
            cur = cur[seg[2:]]
        elif seg.startswith("k:") and isinstance(cur, list):
            want = json.loads(seg[2:])
            cur = next((i for i in cur if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())),
                       _MISSING)
            if cur is _MISSING:
                return _MISSING
        else:
            return _MISSING
    return cur


def remove_path(obj: Any, path: Path) -> None:
    parent = get_path(obj, path[:-1])
    seg = path[-1]
    if seg.startswith("f:") and isinstance(parent, dict):
        parent.pop(seg[2:], None)
    elif seg.startswith("k:") and isinstance(parent, list):
        target = get_path(obj, path)
        if target is not _MISSING:
            parent.remove(target)


def changed_fields(old: dict[str, Any] | None, new: dict[str, Any], schema: dict[str, Any] | None,
                   subresource: str) -> tuple[set[Path], set[Path]]:
    """(fields set or changed by a write, fields it removed)."""
    new_fields = object_fields(new, schema, subresource)
    if old is None:
        return new_fields, set()
    old_fields = object_fields(old, schema, subresource)
    changed = {p for p in new_fields if p not in old_fields or get_path(old, p) != get_path(new, p)}
    return changed, old_fields - new_fields


def read_owners(obj: dict[str, Any] | None) -> Owners:
    owners: Owners = {}
    for entry in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        key = (entry.get("manager", ""), entry.get("operation", "Update"), entry.get("subresource", ""))
        owners[key] = set(_from_fields_v1(entry.get("fieldsV1") or {}, ()))
    return owners


def write_owners(obj: dict[str, Any], owners: Owners, api_version: str,
                 stamps: dict[tuple[str, str, str], str] | None = None) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    entries = []
    for (manager, operation, sub), fields in owners.items():
        if not fields:
            continue
        entry = {"manager": manager, "operation": operation, "apiVersion": api_version,
                 "time": (stamps or {}).get((manager, operation, sub), now), "fieldsType": "FieldsV1",
                 "fieldsV1": _to_fields_v1(fields)}
        if sub:
            entry["subresource"] = sub
        entries.append(entry)
    obj["metadata"]["managedFields"] = entries


def _to_fields_v1(fields: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(fields):
        node = root
        for i, seg in enumerate(path):
            node = node.setdefault(seg, {})
            if i < len(path) - 1 and seg.startswith("k:"):
                node.setdefault(".", {})
    return root


def _from_fields_v1(node: dict[str, Any], prefix: Path) -> list[Path]:
    out: list[Path] = []
    for seg, sub in node.items():
        if seg == ".":
            continue
        children = {k: v for k, v in sub.items() if k != "."}
        out.extend(_from_fields_v1(children, (*prefix, seg)) if children else [(*prefix, seg)])
    return out


def record_update(owners: Owners, manager: str, subresource: str, changed: set[Path],
                  removed: set[Path]) -> None:
    """A non-apply write: the updater takes the fields it changed; removed fields lose all owners."""
    for key, fields in owners.items():
        if key != (manager, "Update", subresource):
            fields -= changed
        fields -= removed
    owners.setdefault((manager, "Update", subresource), set()).update(changed)


class _Index:
    """Answers "does this path overlap (equal, contain or lie inside) one of these paths?"."""

    def __init__(self, paths: set[Path]):
        self.paths = paths
        self.prefixes = {p[:i] for p in paths for i in range(1, len(p) + 1)}

    def overlap(self, path: Path) -> Path | None:
        """The shorter of the two overlapping paths, or None."""
        if path in self.prefixes:
            return path
        return next((path[:i] for i in range(1, len(path)) if path[:i] in self.paths), None)


def merge_applied(live: Any, applied: Any, schema: dict[str, Any] | None) -> Any:
    if isinstance(applied, dict) and isinstance(live, dict):
        out = dict(live)
        for key, value in applied.items():
            out[key] = merge_applied(live.get(key), value, _child(schema, key))
        return out
    keys = _map_keys(schema)
    if keys and isinstance(applied, list) and isinstance(live, list):
        out_list = list(live)
        for item in applied:
            idx = next((i for i, cur in enumerate(out_list)
                        if isinstance(cur, dict) and all(cur.get(k) == item.get(k) for k in keys)), None)
            if idx is None:
                out_list.append(clone(item))
            else:
                out_list[idx] = merge_applied(out_list[idx], item, (schema or {}).get("items"))
        return out_list
    return clone(applied)


def server_side_apply(live: dict[str, Any], applied: dict[str, Any], owners: Owners, manager: str,
                      schema: dict[str, Any] | None, subresource: str, force: bool,
                      api_version: str) -> dict[str, Any]:
    """Merge ``applied`` into a copy of ``live``, updating ``owners`` in place; 409 on conflicts."""
    me = (manager, "Apply", subresource)
    new_fields = object_fields(applied, schema, subresource)
    mine = _Index(new_fields)
    conflicts: list[tuple[str, Path]] = []
    for key, fields in owners.items():
        if key == me:
            continue
        for theirs in fields:
            shorter = mine.overlap(theirs)
            if shorter is not None:
                have = get_path(live, shorter)
                if have is not _MISSING and have != get_path(applied, shorter):
                    conflicts.append((key[0], theirs))
    if conflicts and not force:
        causes = [{"reason": "FieldManagerConflict", "field": _dotted(p),
                   "message": f'conflict with "{m}" using {api_version}: {_dotted(p)}'}
                  for m, p in sorted(set(conflicts))]
        plural = "conflict" if len(causes) == 1 else "conflicts"
        message = f"Apply failed with {len(causes)} {plural}: " + "\n".join(c["message"] for c in causes)
        raise ApiError(409, message, "Conflict", {"causes": causes})
    # Forcing takes only the conflicting fields; one applied with the value it already has is shared.
    taken = {(m, p) for m, p in conflicts} if force else set()
    for key, fields in owners.items():
        if key != me:
            fields -= {t for t in fields if (key[0], t) in taken}
    previous = owners.get(me, set())
    result = merge_applied(live, {k: v for k, v in applied.items() if k not in ("apiVersion", "kind")}, schema)
    result["apiVersion"] = applied.get("apiVersion", live.get("apiVersion"))
    owners[me] = set(new_fields)
    owned = _Index(set().union(*owners.values()))
    for path in sorted(previous - new_fields, key=len, reverse=True):
        if owned.overlap(path) is None:
            remove_path(result, path)
            _drop_empty_parents(result, path, owned)
    return result


def _drop_empty_parents(obj: dict[str, Any], path: Path, owned: _Index) -> None:
    for cut in range(len(path) - 1, 0, -1):
        parent = path[:cut]
        value = get_path(obj, parent)
        if value in ({}, []) and parent not in owned.prefixes:
            remove_path(obj, parent)
        else:
            return


def _dotted(path: Path) -> str:
    """structured-merge-diff's ``Path.String()``: ``.spec.components[name="decode"].replicas``."""
    text = ""
    for seg in path:
        if seg.startswith("k:"):
            keys = json.loads(seg[2:])
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(keys.items())) + "]"
        else:
            text += f".{seg[2:]}"
    return text
