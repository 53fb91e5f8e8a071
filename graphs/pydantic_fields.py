"""Form and API fields made from a pydantic model's own declarations, so that a setting is
declared once (its type, default, bounds, choices, label and help, in ``core/``) and the create
form and the API's schema cannot drift from it.

What each field reads from the model field:

* the type: ``int``, ``float``, a ``Literal`` of strings (choices), each optionally ``| None``;
* the default (``None`` or a default: optional, the model's default applies);
* ``ge``/``gt``/``le``/``lt``: the bounds, said in the form's widget and the API's schema
  (``gt`` as an exclusive bound: ``exclusiveMinimum`` in OpenAPI);
* ``title``: the form's label; ``description``: the help text of both.

Rules across fields stay in the model's validators; a form or serializer builds the model from
what it read and shows the model's message at the field it names."""

from __future__ import annotations

import types
import typing
from typing import Any

import annotated_types as at
from django import forms
from django.core.validators import BaseValidator
from drf_spectacular.utils import extend_schema_field
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rest_framework import serializers


class AboveValidator(BaseValidator):
    """An exclusive lower bound (pydantic's ``gt``), worded as Django words its bounds."""

    message = "Ensure this value is greater than %(limit_value)s."
    code = "min_value"

    def compare(self, a, b):
        return a <= b


class BelowValidator(BaseValidator):
    """An exclusive upper bound (pydantic's ``lt``)."""

    message = "Ensure this value is less than %(limit_value)s."
    code = "max_value"

    def compare(self, a, b):
        return a >= b


def _shape(info: FieldInfo) -> tuple[type, tuple[str, ...] | None, bool]:
    """(int | float | str, the choices of a Literal, whether None is allowed)."""
    annotation = info.annotation
    nullable = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(annotation))
        if len(args) != 1:
            raise TypeError(f"a field of one type or None, not {annotation}")
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Literal:
        return str, tuple(typing.get_args(annotation)), nullable
    if annotation in (int, float):
        return annotation, None, nullable
    raise TypeError(f"no form field for {annotation}")


def _bounds(info: FieldInfo) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in info.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if isinstance(item, getattr(at, name.capitalize())):
                found[name] = getattr(item, name)
    return found


def _default(info: FieldInfo) -> Any:
    return None if info.is_required() else info.get_default(call_default_factory=True)


def _number_kwargs(kind: type, bounds: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"validators": []}
    if "ge" in bounds:
        kwargs["min_value"] = bounds["ge"]
    if "le" in bounds:
        kwargs["max_value"] = bounds["le"]
    if "gt" in bounds:
        if kind is int:
            kwargs["min_value"] = bounds["gt"] + 1
        else:
            kwargs["validators"].append(AboveValidator(bounds["gt"]))
    if "lt" in bounds:
        if kind is int:
            kwargs["max_value"] = bounds["lt"] - 1
        else:
            kwargs["validators"].append(BelowValidator(bounds["lt"]))
    return kwargs


def form_field(info: FieldInfo) -> forms.Field:
    """The form field of one model field. Never required: left empty, the model's default applies."""
    kind, choices, _ = _shape(info)
    common = {"required": False, "initial": _default(info), "label": info.title or None,
              "help_text": info.description or ""}
    if choices is not None:
        return forms.ChoiceField(choices=[(c, c) for c in choices], **common)
    kwargs = _number_kwargs(kind, _bounds(info))
    if kind is float and kwargs["validators"]:
        kwargs["widget"] = forms.NumberInput({"step": "any"})
    return (forms.IntegerField if kind is int else forms.FloatField)(**common, **kwargs)


def form_fields(model: type[BaseModel], prefix: str = "") -> dict[str, forms.Field]:
    """Every field of ``model``, in its order, named ``prefix`` + the model's name."""
    return {prefix + name: form_field(info) for name, info in model.model_fields.items()}


def _exclusive_float(bounds: dict[str, Any]) -> type[serializers.FloatField]:
    """A FloatField whose schema says its exclusive bounds (OpenAPI 3.0: ``exclusiveMinimum:
    true`` beside ``minimum``), which the schema generator reads from no validator."""
    schema: dict[str, Any] = {"type": "number", "format": "double"}
    if "ge" in bounds:
        schema["minimum"] = bounds["ge"]
    if "gt" in bounds:
        schema.update(minimum=bounds["gt"], exclusiveMinimum=True)
    if "le" in bounds:
        schema["maximum"] = bounds["le"]
    if "lt" in bounds:
        schema.update(maximum=bounds["lt"], exclusiveMaximum=True)
    return extend_schema_field(schema)(type("BoundedFloatField", (serializers.FloatField,), {}))


def serializer_field(info: FieldInfo) -> serializers.Field:
    """The API field of one model field: with the model's default, or optional."""
    kind, choices, _ = _shape(info)
    default = _default(info)
    common: dict[str, Any] = {"help_text": info.description or info.title or None}
    common.update({"required": False} if default is None else {"default": default})
    if choices is not None:
        return serializers.ChoiceField(choices=list(choices), **common)
    bounds = _bounds(info)
    if kind is int:
        return serializers.IntegerField(**common, **_number_kwargs(kind, bounds))
    field = _exclusive_float(bounds) if {"gt", "lt"} & set(bounds) else serializers.FloatField
    return field(**common, **_number_kwargs(kind, bounds))


def serializer_class(model: type[BaseModel], name: str, doc: str, module: str) -> type[serializers.Serializer]:
    """A serializer with every field of ``model``, in its order (``name``: its name in the schema)."""
    fields = {field: serializer_field(info) for field, info in model.model_fields.items()}
    return type(name, (serializers.Serializer,), {"__doc__": doc, "__module__": module, **fields})
