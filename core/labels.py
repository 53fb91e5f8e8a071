"""Kubernetes label selectors as ``kubectl get -l`` reads them, for finding graphs by their
DynamoGraphDeployment's ``metadata.labels``.

The grammar and its bounds are apimachinery's (k8s.io/apimachinery/pkg/labels/selector.go,
Parse; pkg/util/validation/validation.go, IsQualifiedName and IsValidLabelValue):
requirements joined by commas, each ``key``, ``!key``, ``key=value``, ``key==value``,
``key!=value``, ``key in (v1,v2)`` or ``key notin (v1,v2)``. As there, ``!=`` and ``notin``
also match an object without the key. The numeric ``gt``/``lt`` forms are refused by name."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_NAME_RE = re.compile(rf"^{_NAME}$")
_PREFIX_RE = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")
_KEY = r"[^\s,=!()<>]+"
_FORMS = (
    (re.compile(rf"^!\s*({_KEY})$"), "!"),
    (re.compile(rf"^({_KEY})$"), "exists"),
    (re.compile(rf"^({_KEY})\s*(==|=|!=)\s*([^\s,=!()]*)$"), None),
    (re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$"), None),
)
OPERATORS = ("exists", "!", "=", "!=", "in", "notin")
FORMS_TEXT = "key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)"
MAX_SELECTOR = 1000


class SelectorError(ValueError):
    """A selector that cannot be read, in words that name the requirement."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # one of OPERATORS ("==" is read as "=")
    values: tuple[str, ...] = ()


def check_key(key: str) -> str | None:
    """Why ``key`` is not a label key (IsQualifiedName), or None."""
    prefix, _, name = key.rpartition("/") if "/" in key else ("", "", key)
    if "/" in key and not prefix:
        return f"label key {key!r} has an empty prefix before '/'"
    if prefix and (len(prefix) > 253 or not _PREFIX_RE.match(prefix)):
        return f"label key prefix {prefix!r} is not a DNS subdomain (lower-case letters, digits, '-' and '.')"
    if not _NAME_RE.match(name):
        return (f"label key {key!r}: the name part must be 1-63 letters, digits, '-', '_' or '.', starting and "
                "ending with a letter or digit")
    return None


def check_value(value: str) -> str | None:
    """Why ``value`` is not a label value (IsValidLabelValue: empty, or a name of up to 63), or None."""
    if value and not _NAME_RE.match(value):
        return (f"label value {value!r} must be empty or 1-63 letters, digits, '-', '_' or '.', starting and "
                "ending with a letter or digit")
    return None


def _split(text: str) -> list[str]:
    """The requirements: commas outside parentheses separate them."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError("a ')' closes no '('")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorError("a '(' is not closed")
    return [*parts, text[start:]]


def _requirement(part: str) -> Requirement:
    text = part.strip()
    if re.match(rf"^{_KEY}\s*(>|<|gt\b|lt\b)", text):
        raise SelectorError(f"{text!r}: the numeric comparisons (>, <) are not supported here; use {FORMS_TEXT}")
    for pattern, operator in _FORMS:
        found = pattern.match(text)
        if found is None:
            continue
        key = found.group(1)
        if operator is None:
            operator = found.group(2)
            raw = found.group(3)
            values = tuple(v.strip() for v in raw.split(",")) if operator in ("in", "notin") else (raw,)
            if operator in ("in", "notin") and not raw.strip():
                raise SelectorError(f"{text!r}: '{operator}' needs at least one value in its parentheses")
            operator = "=" if operator == "==" else operator
        else:
            values = ()
        if problem := check_key(key):
            raise SelectorError(problem)
        for value in values:
            if problem := check_value(value):
                raise SelectorError(problem)
        return Requirement(key, operator, tuple(dict.fromkeys(values)))
    raise SelectorError(f"{text!r} is not a requirement: write {FORMS_TEXT}" if text
                        else f"an empty requirement (a stray ','): write {FORMS_TEXT}")


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """A selector's requirements, all of which an object must meet; "" selects everything."""
    if len(text) > MAX_SELECTOR:
        raise SelectorError(f"a selector is at most {MAX_SELECTOR} characters (this one has {len(text)})")
    if not text.strip():
        return ()
    return tuple(_requirement(part) for part in _split(text))


def labels_of(metadata: dict | None) -> dict[str, str]:
    """A manifest metadata's labels, as strings (a mapping of anything else is no labels)."""
    labels = (metadata or {}).get("labels")
    if not isinstance(labels, dict):
        return {}
    return {str(k): str(v) for k, v in labels.items()}
