"""The API takes JSON bodies as its schema states them: the types, and the fields.

DRF's text fields turn a JSON number into text (``"password": 0`` is stored as "0") and its
boolean fields take 0, 1, "yes" and "on" as well as true and false. Its schema says "string" and
"boolean", so a client's wrong type would be carried out instead of refused. Here a request
body read from JSON (a dict, not a query string or form) must give text fields text, number
fields numbers, boolean fields true or false and decimal fields (stated as text) text; query strings and forms, where
every value is text, read as DRF reads them. A refusal names the field, like every other 400.

A JSON body's unknown field is refused too, naming the fields the request takes: a misspelt
field ("replica") is never silently ignored, and the schema closes every request body
(``additionalProperties: false``, controlplane/openapi.py). Read-only fields a client sends back
(a GET's answer, changed and PUT) are known fields, not refused.

Installed once by controlplane/apps.py (the fields are DRF's own classes)."""

from __future__ import annotations

from collections.abc import Mapping

from django.http import QueryDict
from rest_framework import fields, serializers
from rest_framework.settings import api_settings

_installed = False


def _from_json(field: fields.Field) -> bool:
    data = getattr(field.root, "initial_data", None)
    return data is not None and not isinstance(data, QueryDict)


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    char_value = fields.CharField.to_internal_value
    bool_value = fields.BooleanField.to_internal_value

    def char_to_internal_value(self, data):
        if not isinstance(data, str) and _from_json(self):
            raise fields.ValidationError(f"must be text (a JSON string), not {_kind(data)}", code="invalid")
        return char_value(self, data)

    def bool_to_internal_value(self, data):
        if not isinstance(data, bool) and _from_json(self):
            raise fields.ValidationError(f"must be true or false, not {_kind(data)}", code="invalid")
        return bool_value(self, data)

    serializer_value = serializers.Serializer.to_internal_value

    def serializer_to_internal_value(self, data):
        if isinstance(data, Mapping) and _from_json(self):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                takes = ", ".join(name for name, field in self.fields.items() if not field.read_only)
                raise serializers.ValidationError(
                    {unknown[0][:200]: [f"unknown field; this request takes: {takes or 'no fields'}"]}, code="invalid")
        return serializer_value(self, data)

    decimal_value = fields.DecimalField.to_internal_value

    def decimal_to_internal_value(self, data):
        # The schema states a decimal as text (COERCE_DECIMAL_TO_STRING): a JSON number would be
        # read through a binary float first.
        as_text = getattr(self, "coerce_to_string", api_settings.COERCE_DECIMAL_TO_STRING)
        if as_text and not isinstance(data, str) and _from_json(self):
            raise fields.ValidationError(f'must be a decimal given as text, like "2.50", not {_kind(data)}',
                                         code="invalid")
        return decimal_value(self, data)

    int_value, float_value = fields.IntegerField.to_internal_value, fields.FloatField.to_internal_value

    def number(original, what: str):
        def to_internal_value(self, data):
            # DRF reads "5" and "0.5" (and float(True)): a JSON body gives numbers as numbers.
            if (isinstance(data, (str, bool)) or data is None) and _from_json(self):
                raise fields.ValidationError(f"must be {what}, not {_kind(data)}", code="invalid")
            return original(self, data)
        return to_internal_value

    fields.IntegerField.to_internal_value = number(int_value, "an integer (a JSON number)")
    fields.FloatField.to_internal_value = number(float_value, "a number")
    fields.DecimalField.to_internal_value = decimal_to_internal_value
    char_validation = fields.CharField.run_validation

    def char_run_validation(self, data=fields.empty):
        # DRF strips text before its checks: " v1beta1" and "name\n" would pass a pattern the
        # schema states without the strip. A JSON body's text is taken as given.
        if _from_json(self):
            self.trim_whitespace = False
        return char_validation(self, data)

    fields.CharField.run_validation = char_run_validation
    fields.CharField.to_internal_value = char_to_internal_value
    fields.BooleanField.to_internal_value = bool_to_internal_value
    serializers.Serializer.to_internal_value = serializer_to_internal_value


def _kind(value) -> str:
    if value is None:
        return "null"
    return {bool: "true or false", int: "a number", float: "a number", list: "a list", dict: "an object",
            str: "text"}.get(
        type(value), type(value).__name__)
