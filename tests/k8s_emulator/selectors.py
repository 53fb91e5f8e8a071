"""Label selectors (``=, ==, !=, in, notin, key, !key, >, <``) and field selectors (dotted paths)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from .errors import bad_request

Matcher = Callable[[dict[str, Any]], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_RE = re.compile(rf"^({_KEY})\s+(in|notin)\s+\(([^)]*)\)$")
_OP_RE = re.compile(rf"^({_KEY})\s*(==|!=|=|>|<)\s*(.*)$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def _check_value(value: str, text: str) -> str:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise bad_request(f"unable to parse requirement: values[0][{text}]: Invalid value: \"{value}\": "
                          "a valid label must be an empty string or consist of alphanumeric characters, "
                          "'-', '_' or '.', and must start and end with an alphanumeric character")
    return value


def parse_label_selector(text: str | None) -> Matcher:
    """Compile a label selector; raises 400 BadRequest on a syntax error, like the API server."""
    if not text or not text.strip():
        return lambda _obj: True
    reqs: list[Callable[[dict[str, str]], bool]] = []
    for part in _split(text):
        if not part:
            raise bad_request(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        if m := _SET_RE.match(part):
            key, op = m.group(1), m.group(2)
            values = {_check_value(v.strip(), part) for v in m.group(3).split(",")}
            if op == "in":
                reqs.append(lambda lb, k=key, vs=values: k in lb and lb[k] in vs)
            else:
                reqs.append(lambda lb, k=key, vs=values: k not in lb or lb[k] not in vs)
        elif m := _OP_RE.match(part):
            key, op, value = m.group(1), m.group(2), m.group(3).strip()
            if op in ("=", "=="):
                checked = _check_value(value, part)
                reqs.append(lambda lb, k=key, v=checked: lb.get(k) == v)
            elif op == "!=":
                checked = _check_value(value, part)
                reqs.append(lambda lb, k=key, v=checked: lb.get(k) != v)
            else:
                try:
                    number = int(value)
                except ValueError:
                    raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value "
                                      f"must be an integer: {part}") from None
                reqs.append(_compare(key, op, number))
        elif re.fullmatch(rf"!\s*{_KEY}", part):
            absent = part[1:].strip()
            reqs.append(lambda lb, k=absent: k not in lb)
        elif re.fullmatch(_KEY, part):
            reqs.append(lambda lb, k=part: k in lb)
        else:
            raise bad_request(f"unable to parse requirement: invalid label selector: {part!r}")

    def match(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(req(labels) for req in reqs)

    return match


def _compare(key: str, op: str, number: int) -> Callable[[dict[str, str]], bool]:
    def check(labels: dict[str, str]) -> bool:
        try:
            have = int(labels[key])
        except (KeyError, ValueError):
            return False
        return have > number if op == ">" else have < number

    return check


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string form of a dotted path (``""`` when absent), as field selectors compare it."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return ""
        cur = cur[part]
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def parse_field_selector(text: str | None, allowed: Iterable[str] | None = None) -> Matcher:
    """Compile a field selector. ``allowed`` is the resource's supported field labels (None: any
    dotted path); other fields give 400 ``field label not supported``, as the API server does."""
    if not text or not text.strip():
        return lambda _obj: True
    allowed_set = set(allowed) if allowed is not None else None
    reqs: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        part = part.strip()
        m = re.match(r"^([A-Za-z0-9_.\-/]+)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = m.group(1), m.group(2), m.group(3).strip()
        if allowed_set is not None and field not in allowed_set:
            raise bad_request(f'field label not supported: {field}')
        reqs.append((field, op != "!=", value))

    def match(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, f) == v) == eq for f, eq, v in reqs)

    return match


def matcher(label_selector: str | None, field_selector: str | None,
            allowed_fields: Iterable[str] | None = None) -> Matcher:
    by_label = parse_label_selector(label_selector)
    by_field = parse_field_selector(field_selector, allowed_fields)
    return lambda obj: by_label(obj) and by_field(obj)
