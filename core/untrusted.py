"""Bounds on data that comes from outside (a request body, a manifest, a query string), checked
before anything deeper parses, stores or validates it:

* nesting at most MAX_DEPTH levels (deeper input would exhaust Python's recursion limit);
* integers that fit in 64 bits, numbers that are finite and within that range too (a 5,000-digit
  integer passes Python's digit limit only to overflow every integer column; NaN and Infinity
  are not JSON; JSON Schema counts 1e300 as an integer);
* text that is valid, storable Unicode: no NUL (PostgreSQL refuses it in text) and no lone
  surrogate such as ``"\\ud800"`` (it cannot be encoded, so a row holding one could never be
  rendered again).

The first problem is reported with the path of the field that holds it (``spec.services[0].name``)."""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

MAX_DEPTH = 64
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# Longer literals are refused without converting them: int() of a huge literal is quadratic.
MAX_NUMBER_CHARS = 64
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class UntrustedInputError(ValueError):
    """Input outside the bounds above: ``path`` names the field, ``message`` what is wrong."""

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path or 'the document'}: {message}")


def text_problem(text: str) -> str | None:
    """Why this text cannot be stored, or None."""
    match = _UNSTORABLE.search(text)
    if match is None:
        return None
    char = match.group()
    if char == "\x00":
        return "contains a NUL character (\\u0000), which cannot be stored"
    return f"contains a lone surrogate (\\u{ord(char):04x}), which is not valid Unicode text"


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


class _BigNumber:
    """A number literal too large to hold, kept as text until check() names its path."""

    def __init__(self, literal: str):
        self.literal = literal


class ComplexKey:
    """A mapping key that was itself a list or a map, kept (hashable) until check() names its path."""

    def __init__(self, kind: str, line: int):
        self.kind, self.line = kind, line

    def __repr__(self) -> str:
        return f"<a {self.kind} (line {self.line})>"


def _key_problem(key: Any) -> str | None:
    """Why a mapping key cannot be one (Kubernetes objects and JSON have text keys only)."""
    if isinstance(key, str):
        problem = text_problem(key)
        return f"the key {key!r} {problem}" if problem else None
    if isinstance(key, ComplexKey):
        return f"a key is a {key.kind} (line {key.line}); keys must be text"
    literal = json.dumps(key) if isinstance(key, (bool, int, float)) or key is None else repr(key)
    kind = {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}.get(type(key), "not text")
    return f"the key {literal} is {kind}, not text: keys must be text; quote it (\"{literal}\") if it is a name"


def check(data: Any) -> None:
    """Raises UntrustedInputError for the first value outside the bounds (depth, numbers, text)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UntrustedInputError(path, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, str):
            problem = text_problem(node)
            if problem:
                raise UntrustedInputError(path, problem)
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if not INT_MIN <= node <= INT_MAX:
                raise UntrustedInputError(path, f"the integer {_short(str(node))} does not fit in 64 bits")
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise UntrustedInputError(path, f"{node} is not a finite number")
            if not INT_MIN <= node <= INT_MAX:  # the API's schema bounds every number so (JSONValue)
                raise UntrustedInputError(path, f"the number {node:g} is beyond the 64-bit integer range")
        elif isinstance(node, _BigNumber):
            raise UntrustedInputError(path, f"the number {_short(node.literal)} is too large "
                                            f"(at most {MAX_NUMBER_CHARS} characters; integers fit in 64 bits)")
        elif isinstance(node, dict):
            for key, value in reversed(list(node.items())):
                problem = _key_problem(key)
                if problem:
                    raise UntrustedInputError(path, problem)
                stack.append((value, _join(path, key), depth + 1))
        elif isinstance(node, (list, tuple)):
            for index in range(len(node) - 1, -1, -1):
                stack.append((node[index], _join(path, index), depth + 1))


def _short(literal: str) -> str:
    return literal if len(literal) <= 24 else f"{literal[:12]}…{literal[-6:]} ({len(literal):,} digits)"


# --------------------------------------------------------------------------------------- JSON

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth_exceeds(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether brackets outside strings nest deeper than ``limit``: checked before json.loads,
    whose recursion would otherwise reach Python's limit."""
    if text.count("[") + text.count("{") <= limit:  # it cannot nest deeper than it opens: no regex
        return False
    depth = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > limit:
            return True
    return False


def _parse_int(literal: str) -> int | _BigNumber:
    return _BigNumber(literal) if len(literal) > MAX_NUMBER_CHARS else int(literal)


def _parse_float(literal: str) -> float | _BigNumber:
    return _BigNumber(literal) if len(literal) > MAX_NUMBER_CHARS else float(literal)


def _refuse_constant(name: str):
    raise UntrustedInputError("", f"{name} is not a JSON number")


_local = threading.local()  # this thread's decoder, and whether it met a number out of bounds


def _parse_int_seen(literal: str) -> int | _BigNumber:
    value = _parse_int(literal)
    if isinstance(value, _BigNumber) or not INT_MIN <= value <= INT_MAX:
        _local.suspect = True
    return value


def _parse_float_seen(literal: str) -> float | _BigNumber:
    value = _parse_float(literal)
    if isinstance(value, _BigNumber) or not math.isfinite(value):
        _local.suspect = True
    return value


def load_json(text: str) -> Any:
    """JSON text parsed within the bounds; UntrustedInputError (with the path) otherwise, or
    ValueError (json.JSONDecodeError) for text that is not JSON.

    The walk that names a bad value's path (check) runs only when the text could hold one: a
    number out of bounds (the parse hooks see every number), a ``\\u`` escape (the only way a
    NUL or a lone surrogate gets into a string: json.loads refuses raw control characters), or
    such a character raw in the text. Nesting is bounded before parsing (json_depth_exceeds).
    Most documents (an ASCII chat request, say) are then parsed and nothing more."""
    if json_depth_exceeds(text):
        raise UntrustedInputError("", f"nested more than {MAX_DEPTH} levels deep")
    local = _local
    decoder = getattr(local, "decoder", None)
    if decoder is None:  # one a thread (its scanner is not shared), made once
        local.decoder = decoder = json.JSONDecoder(parse_int=_parse_int_seen, parse_float=_parse_float_seen,
                                                   parse_constant=_refuse_constant)
    local.suspect = False
    data = decoder.decode(text)
    if local.suspect or "\\u" in text or _UNSTORABLE.search(text):
        check(data)
    return data


# ------------------------------------------------------------------------------ query strings


class QueryParameterError(ValueError):
    """A query parameter that is not what the view needs: a 400 naming the parameter, both on
    pages (controlplane.middleware) and in the API (controlplane.api)."""

    def __init__(self, name: str, message: str):
        self.name = name
        self.message = message
        super().__init__(f"?{name}: {message}")


def query_int(params, name: str, *, default: int | None = None, minimum: int = 1,
              maximum: int = INT_MAX, strict: bool = False) -> int | None:
    """The integer query parameter ``name`` of a QueryDict (request.GET or query_params), or
    ``default`` when it is absent or empty. Every integer parameter of every page and endpoint
    goes through here, so none can overflow a database column or Python's digit limit.
    ``strict`` (the API, whose schema says "an integer"): given once, not empty, no spaces."""
    if strict:
        values = params.getlist(name)
        if len(values) > 1:
            raise QueryParameterError(name, f"given {len(values)} times; give it once")
        if values and not re.fullmatch(r"[-+]?[0-9]+", values[0]):
            raise QueryParameterError(name, f"{_short(values[0])!r} is not a whole number")
    raw = params.get(name)
    if raw is None or not str(raw).strip():
        return default
    return parse_int_text(str(raw).strip(), name, minimum=minimum, maximum=maximum)


def query_bool(params, name: str, *, default: bool = False) -> bool:
    """The boolean query parameter ``name`` as the API's schema states it: ``true`` or ``false``,
    given once; ``default`` when absent."""
    values = params.getlist(name)
    if not values:
        return default
    if len(values) > 1:
        raise QueryParameterError(name, f"given {len(values)} times; give it once")
    if values[0] not in ("true", "false"):
        raise QueryParameterError(name, f"{_short(values[0])!r} is not true or false")
    return values[0] == "true"


def query_ints(params, name: str, *, minimum: int = 1, maximum: int = INT_MAX, limit: int = 100) -> list[int]:
    """A comma-separated (or repeated) list of integers, such as ``?runs=3,4,7``."""
    parts = [p.strip() for value in params.getlist(name) for p in str(value).split(",") if p.strip()]
    if len(parts) > limit:
        raise QueryParameterError(name, f"at most {limit} values")
    return [parse_int_text(p, name, minimum=minimum, maximum=maximum) for p in parts]


def parse_int_text(text: str, name: str, *, minimum: int = 1, maximum: int = INT_MAX) -> int:
    """``text`` as an integer within [minimum, maximum], else QueryParameterError naming ``name``."""
    if not re.fullmatch(r"[-+]?[0-9]{1,20}", text):
        if re.fullmatch(r"[-+]?[0-9]+", text):
            raise QueryParameterError(name, f"{_short(text)} is out of range ({minimum} to {maximum})")
        raise QueryParameterError(name, f"{_short(text)!r} is not a whole number")
    value = int(text)
    if not minimum <= value <= maximum:
        raise QueryParameterError(name, f"{value} is out of range ({minimum} to {maximum})")
    return value


# ------------------------------------------------------------------------------ JSON types

_JSON_TYPE_NAMES = {str: "a string", bool: "true or false", list: "a list", dict: "an object", int: "an integer"}


def wrong_json_types(data: Any, expected: dict[str, type]) -> dict[str, list[str]]:
    """Field -> [message] for each field of a JSON object whose value is not of the JSON type
    the schema gives it (None is left to the field's own null rule). Form-style coercions
    (12 read as "12", "true" or 1 as true) would accept what the schema refuses."""
    if not isinstance(data, dict):
        return {}
    wrong = {}
    for name, kind in expected.items():
        value = data.get(name)
        if name not in data or value is None:
            continue
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            wrong[name] = [f"must be {_JSON_TYPE_NAMES.get(kind, kind.__name__)}"]
    return wrong
