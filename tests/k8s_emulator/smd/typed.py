"""``ToFieldSet``, ``Compare``, ``Merge`` and ``RemoveItems`` (``typed/tofieldset.go``,
``typed/compare.go``, ``typed/merge.go``, ``typed/remove.go``, ``typed/helpers.go``).

``ABSENT`` is a value that is not there (upstream's nil ``value.Value``); JSON ``null`` is ``None``,
a value like any other. An empty map or list on both sides is a leaf (``emptyPromoteToLeaf``).
"""

from __future__ import annotations

from typing import Any

from .fieldpath import Path, PathElement, field, key, set_value, with_prefix
from .schema import ListType, MapType, resolve


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


class SchemaError(ValueError):
    """A value that does not fit its list's keys (``listItemToPathElement``'s errors)."""


def equals(a: Any, b: Any) -> bool:
    """``value.Equals``: numbers by value (1 == 1.0), booleans only equal booleans."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equals(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equals(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def item_element(t: ListType, item: Any) -> PathElement:
    """``listItemToPathElement``: a keyed item by its key fields (a missing one takes its schema
    default; without a default it is left out of the key), a set item by its value."""
    if not t.keys:
        return set_value(item)
    if not isinstance(item, dict):
        raise SchemaError("associative list with keys may not have " + ("a null element" if item is None
                                                                        else "non-map elements"))
    fields = {}
    for name in t.keys:
        if name in item:
            fields[name] = item[name]
        elif name in t.key_defaults:
            fields[name] = t.key_defaults[name]
    if not fields:
        raise SchemaError(f"associative list with keys has an element that omits all key fields {list(t.keys)!r} "
                          "(and doesn't have default values for any key fields)")
    return key(fields)


def _granular_map(a: Any, *values: Any) -> bool:
    return isinstance(a, MapType) and not a.atomic and any(isinstance(v, dict) and v for v in values)


def _granular_list(a: Any, *values: Any) -> bool:
    return isinstance(a, ListType) and a.associative and any(isinstance(v, list) and v for v in values)


# ------------------------------------------------------------------------------------ ToFieldSet


def to_field_set(value: Any, t: Any) -> set[Path]:
    out: set[Path] = set()
    _to_set(value, t, (), out)
    return out


def _to_set(v: Any, t: Any, path: Path, out: set[Path]) -> None:
    a = resolve(t, v)
    if isinstance(a, MapType) and isinstance(v, dict):
        if a.atomic:
            out.add(path)
            return
        for k, sub in v.items():
            p = (*path, field(k))
            _to_set(sub, a.field_type(k), p, out)
            if sub is None or (isinstance(sub, dict) and not sub) or not a.has_field(k):
                out.add(p)
    elif isinstance(a, ListType) and isinstance(v, list):
        if not a.associative:
            out.add(path)
            return
        pes = [item_element(a, item) for item in v]
        dups = {pe for pe in pes if pes.count(pe) > 1}
        for pe in dups:
            out.add((*path, pe))
        for pe, item in zip(pes, v, strict=True):
            if pe not in dups:
                _to_set(item, a.elem, (*path, pe), out)
                out.add((*path, pe))
    elif not isinstance(a, MapType | ListType):
        out.add(path)


# ------------------------------------------------------------------------------------ Compare


class Comparison:
    def __init__(self) -> None:
        self.removed: set[Path] = set()
        self.modified: set[Path] = set()
        self.added: set[Path] = set()

    def is_same(self) -> bool:
        return not (self.removed or self.modified or self.added)


def compare(lhs: Any, rhs: Any, t: Any) -> Comparison:
    c = Comparison()
    _compare(lhs, rhs, t, (), c)
    return c


def _compare(lhs: Any, rhs: Any, t: Any, path: Path, c: Comparison) -> None:
    a = resolve(t, rhs if rhs is not ABSENT else lhs)
    lm, rm = (v if v is not ABSENT else None for v in (lhs, rhs))
    if _granular_map(a, lm, rm) and all(v is None or isinstance(v, dict) for v in (lm, rm)):
        lmap, rmap = lm or {}, rm or {}
        for k in [*lmap, *(k for k in rmap if k not in lmap)]:
            _compare(lmap.get(k, ABSENT), rmap.get(k, ABSENT), a.field_type(k), (*path, field(k)), c)
    elif _granular_list(a, lm, rm) and all(v is None or isinstance(v, list) for v in (lm, rm)):
        _compare_items(a, lm or [], rm or [], path, c)
    else:  # a leaf
        if lhs is ABSENT:
            c.added.add(path)
        elif rhs is ABSENT:
            c.removed.add(path)
        elif not equals(lhs, rhs):
            c.modified.add(path)
        return
    if lhs is ABSENT:
        c.added.add(path)
    elif rhs is ABSENT:
        c.removed.add(path)


def _group(t: ListType, items: list[Any]) -> dict[PathElement, list[Any]]:
    out: dict[PathElement, list[Any]] = {}
    for item in items:
        out.setdefault(item_element(t, item), []).append(item)
    return out


def _compare_items(t: ListType, lhs: list[Any], rhs: list[Any], path: Path, c: Comparison) -> None:
    left, right = _group(t, lhs), _group(t, rhs)
    for pe in [*left, *(pe for pe in right if pe not in left)]:
        ls, rs = left.get(pe, []), right.get(pe, [])
        here = (*path, pe)
        if len(ls) <= 1 and len(rs) <= 1:
            _compare(ls[0] if ls else ABSENT, rs[0] if rs else ABSENT, t.elem, here, c)
        elif len(ls) >= 2 and len(rs) >= 2:
            if not equals(ls, rs):
                c.modified.add(here)
        elif len(ls) >= 2:
            if rs:
                _compare(ABSENT, rs[0], t.elem, here, c)
            c.removed.add(here)
        else:
            if ls:
                _compare(ls[0], ABSENT, t.elem, here, c)
            c.added.add(here)


# ------------------------------------------------------------------------------------ Merge


def merge(lhs: Any, rhs: Any, t: Any) -> Any:
    """``TypedValue.Merge`` with ``ruleKeepRHS``: ``rhs`` wins at every leaf, maps merge field by
    field and associative lists item by item."""
    a = resolve(t, rhs if rhs is not ABSENT else lhs)
    lm, rm = (v if v is not ABSENT else None for v in (lhs, rhs))
    if _granular_map(a, lm, rm) and all(v is None or isinstance(v, dict) for v in (lm, rm)):
        lmap, rmap = lm or {}, rm or {}
        out = {}
        for k in [*lmap, *(k for k in rmap if k not in lmap)]:
            merged = merge(lmap.get(k, ABSENT), rmap.get(k, ABSENT), a.field_type(k))
            if merged is not ABSENT:
                out[k] = merged
        return out if out else ABSENT
    if _granular_list(a, lm, rm) and all(v is None or isinstance(v, list) for v in (lm, rm)):
        return _merge_items(a, lm or [], rm or [])
    return rhs if rhs is not ABSENT else lhs


def _merge_items(t: ListType, lhs: list[Any], rhs: list[Any]) -> Any:
    """``visitListItems``: the live order, with the applied items in their applied order and new
    items placed after the shared item they follow."""
    rhs_pes = [item_element(t, item) for item in rhs]
    if len(set(rhs_pes)) != len(rhs_pes):
        dup = next(pe for pe in rhs_pes if rhs_pes.count(pe) > 1)
        raise SchemaError(f"duplicate entries for key {dup!r}")
    lhs_pes = [item_element(t, item) for item in lhs]
    observed_l: dict[PathElement, Any] = {}
    for pe, item in zip(lhs_pes, lhs, strict=True):
        observed_l[pe] = None if pe in observed_l else item  # a duplicated live item merges as absent
    observed_r = dict(zip(rhs_pes, rhs, strict=True))
    shared = [pe for pe in rhs_pes if pe in observed_l]
    next_shared = shared.pop(0) if shared else None
    merged_r: set[PathElement] = set()
    out: list[Any] = []

    def emit(left: Any, right: Any) -> None:
        value = merge(left, right, t.elem)
        if value is not ABSENT:
            out.append(value)

    li = ri = 0
    while li < len(lhs_pes) or ri < len(rhs_pes):
        if li < len(lhs_pes) and ri < len(rhs_pes):
            pe = lhs_pes[li]
            if pe == rhs_pes[ri]:
                merged_r.add(pe)
                emit(observed_l.get(pe) if observed_l.get(pe) is not None else ABSENT, observed_r[pe])
                li, ri = li + 1, ri + 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in observed_r and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < len(lhs_pes):
            pe = lhs_pes[li]
            if pe not in observed_r:
                emit(lhs[li], ABSENT)
                li += 1
                continue
            if pe in merged_r:
                li += 1
        if ri < len(rhs_pes):
            pe = rhs_pes[ri]
            merged_r.add(pe)
            left = observed_l.get(pe)
            emit(left if left is not None else ABSENT, observed_r[pe])
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
    return out if out else ABSENT


# ------------------------------------------------------------------------------------ RemoveItems


def remove_items(value: Any, members: set[Path], t: Any) -> Any:
    """``TypedValue.RemoveItems``: drop every member of ``members`` from ``value``."""
    a = resolve(t, value)
    if isinstance(a, ListType) and isinstance(value, list):
        if not value or not a.associative:
            return value
        items = []
        for item in value:
            pe = item_element(a, item)
            if (pe,) in members:
                continue
            sub = with_prefix(members, pe)
            items.append(remove_items(item, sub, a.elem) if sub else item)
        return items if items else ABSENT
    if isinstance(a, MapType) and isinstance(value, dict):
        if not value or a.atomic:
            return value
        out = {}
        for k, sub_value in value.items():
            pe = field(k)
            if (pe,) in members:
                continue
            sub = with_prefix(members, pe)
            kept = remove_items(sub_value, sub, a.field_type(k)) if sub else sub_value
            if kept is not ABSENT:
                out[k] = kept
        return out if out else ABSENT
    return value


def named_fields_are_members(members: set[Path], t: Any, value: Any) -> set[Path]:
    """``Set.EnsureNamedFieldsAreMembers``: every declared field that has members under it is a
    member too (so that removing it removes the field, not only what is under it)."""
    out = set(members)
    _ensure(members, t, value, (), out)
    return out


def _ensure(members: set[Path], t: Any, value: Any, prefix: Path, out: set[Path]) -> None:
    a = resolve(t, value)
    firsts = {p[0] for p in members if len(p) > 1}
    for pe in firsts:
        child_value = ABSENT
        child_t: Any = None
        if pe[0] == "f" and isinstance(a, MapType):
            child_t = a.field_type(pe[1])
            child_value = value.get(pe[1], ABSENT) if isinstance(value, dict) else ABSENT
            if a.has_field(pe[1]):
                out.add((*prefix, pe))
        elif pe[0] == "k" and isinstance(a, ListType):
            child_t = a.elem
            if isinstance(value, list):
                child_value = next((i for i in value if _safe_pe(a, i) == pe), ABSENT)
        _ensure(with_prefix(members, pe), child_t, None if child_value is ABSENT else child_value,
                (*prefix, pe), out)


def _safe_pe(t: ListType, item: Any) -> PathElement | None:
    try:
        return item_element(t, item)
    except SchemaError:
        return None
