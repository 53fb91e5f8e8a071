"""The CRD's ``x-kubernetes-validations`` rules, evaluated as the Kubernetes API server evaluates them,
with a real CEL implementation (cel-python, ``celpy``) and the Kubernetes CEL library functions the
rules use registered on it.

Kubernetes semantics (kubernetes ``staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/
validation.go``, ``Validator.validate``):

* a rule at a schema node is evaluated with ``self`` bound to that node's value, only where the value
  is present (a property that is absent is not visited);
* a *transition rule* (one that names ``oldSelf``) runs only on an update, and only where the old
  value can be correlated with the new one: the same property of an object, the same key of a map
  (``additionalProperties``), the item with the same keys of an ``x-kubernetes-list-type: map`` list
  (items of atomic and set lists never correlate). A rule with ``optionalOldSelf: true`` runs on
  create too, with ``oldSelf`` an optional (``oldSelf.hasValue()``);
* a failed rule is the field error ``<path>: Invalid value: "<schema type>": <message>``
  (``field.Invalid(fldPath, sts.Type, message)``), or ``failed rule: <rule>`` without a message.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes

# -- the Kubernetes CEL library (k8s.io/apiserver/pkg/cel/library) --------------------------------------

_SUFFIXES = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
             "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
             "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
             "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60)}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class Quantity:
    """A ``resource.Quantity`` for ``quantity()`` (library/quantity.go): exact, compared by value."""

    def __init__(self, text: str):
        match = _QUANTITY.match(str(text).strip())
        if not match:
            raise ValueError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
        number, exponent, suffix = match.groups()
        self.value = Fraction(number) * (Fraction(10) ** int(exponent[1:]) if exponent else _SUFFIXES[suffix or ""])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _quantity(text: Any) -> Quantity:
    return Quantity(str(text))


def _compare(a: Quantity, b: Quantity) -> int:
    return (a.value > b.value) - (a.value < b.value)


@dataclass(frozen=True)
class Optional:
    """CEL's ``optional_type`` for ``optionalOldSelf`` rules: ``oldSelf.hasValue()``, ``.value()``."""

    present: Any = None

    def has(self) -> bool:
        return self.present is not None


FUNCTIONS: dict[str, Any] = {
    # strings (library/strings.go: the cel-go ext.Strings functions Kubernetes enables)
    "lowerAscii": lambda s: celtypes.StringType("".join(c.lower() if c.isascii() else c for c in s)),
    "upperAscii": lambda s: celtypes.StringType("".join(c.upper() if c.isascii() else c for c in s)),
    "split": lambda s, sep, *n: celtypes.ListType([celtypes.StringType(p) for p in (
        s.split(sep, int(n[0]) - 1) if n and int(n[0]) > 0 else s.split(sep))]),
    "trim": lambda s: celtypes.StringType(s.strip()),
    "indexOf": lambda s, sub: celtypes.IntType(s.find(sub)),
    "replace": lambda s, old, new: celtypes.StringType(s.replace(old, new)),
    "join": lambda items, sep="": celtypes.StringType(sep.join(items)),
    # quantities (library/quantity.go)
    "quantity": _quantity,
    "isQuantity": lambda s: celtypes.BoolType(bool(_QUANTITY.match(str(s).strip()))),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "sign": lambda a: celtypes.IntType((a.value > 0) - (a.value < 0)),
    "isInteger": lambda a: celtypes.BoolType(a.value.denominator == 1),
    "asInteger": lambda a: celtypes.IntType(int(a.value)),
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(a.value)),
    # optionals (cel-go's optional library, for optionalOldSelf)
    "hasValue": lambda o: celtypes.BoolType(o.has()),
    "value": lambda o: o.present,
}

_env = celpy.Environment()
_programs: dict[str, Any] = {}
_lock = threading.Lock()


def _program(rule: str):
    with _lock:
        found = _programs.get(rule)
        if found is None:
            found = _programs[rule] = _env.program(_env.compile(rule), functions=FUNCTIONS)
        return found


def evaluate(rule: str, value: Any, old: Any = None, *, optional_old: bool = False) -> bool | str:
    """True or False as ``rule`` holds for ``self`` = ``value`` (``oldSelf`` = ``old``), or the text of
    the evaluation error."""
    activation = {"self": celpy.json_to_cel(value)}
    if optional_old:
        activation["oldSelf"] = Optional(celpy.json_to_cel(old) if old is not None else None)
    elif old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = _program(rule).evaluate(activation)
    except celpy.CELEvalError as exc:
        return str(exc.args[0] if exc.args else exc)
    if isinstance(result, celpy.CELEvalError):
        return str(result.args[0] if result.args else result)
    return bool(result)


# -- walking a schema and an object together -------------------------------------------------------------

_OLD_SELF = re.compile(r"\boldSelf\b")


@dataclass(frozen=True)
class RuleError:
    """A failed ``x-kubernetes-validations`` rule, as the API server reports it."""

    path: str  # spec.components[1], spec.services[worker]
    type: str  # the schema type at the path: "object", "array", "string"
    message: str
    rule: str
    transition: bool

    def __str__(self) -> str:
        return f'{self.path}: Invalid value: "{self.type}": {self.message}'

    @property
    def reason(self) -> str:
        return "FieldValueInvalid"

    @property
    def detail(self) -> str:
        return f'Invalid value: "{self.type}": {self.message}'


def is_transition(rule: dict[str, Any]) -> bool:
    return bool(_OLD_SELF.search(rule.get("rule", "")))


_MISSING = object()


def rule_errors(schema: dict[str, Any], new: Any, old: Any = _MISSING, *, path: str = "",
                only_transition: bool = False) -> list[RuleError]:
    """Every failed rule of ``schema`` (an ``openAPIV3Schema`` node) on ``new``; ``old`` is the object
    before an update (left out on a create). ``only_transition`` keeps the rules that name ``oldSelf``."""
    errors: list[RuleError] = []
    _walk(schema, new, old, path, errors, only_transition)
    return errors


def _walk(s: dict[str, Any], value: Any, old: Any, path: str, errors: list[RuleError],
          only_transition: bool) -> None:
    if not isinstance(s, dict) or value is None:
        return
    for rule in s.get("x-kubernetes-validations") or ():
        transition = is_transition(rule)
        optional = bool(rule.get("optionalOldSelf"))
        if only_transition and not transition:
            continue
        if transition and not optional and (old is _MISSING or old is None):
            continue  # no correlated old value: the transition rule is not evaluated
        held = evaluate(rule["rule"], value, None if old is _MISSING else old, optional_old=optional)
        if held is True:
            continue
        message = rule.get("message") or f"failed rule: {rule['rule']}"
        if held is not False:
            message = f"{message}: {held}" if rule.get("message") else f"rule evaluation error: {held}"
        errors.append(RuleError(path or "<nil>", _type(s, value), message, rule["rule"], transition))
    if isinstance(value, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        olds = old if isinstance(old, dict) else {}
        for key, child in value.items():
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if sub is None:
                continue
            here = f"{path}.{key}" if key in props else f"{path}[{key}]"
            _walk(sub, child, olds.get(key, _MISSING), here.lstrip("."), errors, only_transition)
    elif isinstance(value, list) and isinstance(s.get("items"), dict):
        keys = s.get("x-kubernetes-list-map-keys") or []
        by_key = {}
        if s.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
            by_key = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
        for i, item in enumerate(value):
            before = by_key.get(tuple(item.get(k) for k in keys), _MISSING) if isinstance(item, dict) else _MISSING
            _walk(s["items"], item, before, f"{path}[{i}]", errors, only_transition)


def _type(s: dict[str, Any], value: Any) -> str:
    if s.get("type"):
        return s["type"]
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")
