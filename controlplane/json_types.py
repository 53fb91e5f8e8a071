"""The API takes JSON types as its schema states them.

DRF's text fields turn a JSON number into text (``"password": 0`` is stored as "0") and its
boolean fields take 0, 1, "yes" and "on" as well as true and false. Its schema says "string" and
"boolean", so a client's wrong type would be carried out instead of refused. Here a request
body read from JSON (a dict, not a query string or form) must give text fields text and
boolean fields true or false; query strings and forms, where every value is text, read as DRF
reads them. A refusal names the field, like every other 400.

Installed once by controlplane/apps.py (the fields are DRF's own classes)."""

from __future__ import annotations

from django.http import QueryDict
from rest_framework import fields

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

    fields.CharField.to_internal_value = char_to_internal_value
    fields.BooleanField.to_internal_value = bool_to_internal_value


def _kind(value) -> str:
    if value is None:
        return "null"
    return {int: "a number", float: "a number", list: "a list", dict: "an object", str: "text"}.get(
        type(value), type(value).__name__)
