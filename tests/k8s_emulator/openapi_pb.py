"""The protobuf form of ``/openapi/v2``: gnostic's ``openapi.v2.Document`` (google/gnostic,
``openapiv2/OpenAPIv2.proto``), which is what kubectl asks for
(``Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf``) and the only form it
decodes. Encoded by hand on the protobuf wire format: the document, its info and its
definitions (every schema keyword kubectl's validator reads; vendor extensions as YAML). Paths
are left out: kubectl reads them only from the v3 document."""

from __future__ import annotations

import json
import struct
from typing import Any

CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

_VARINT, _FIXED64, _BYTES = 0, 1, 2


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes(number: int, data: bytes) -> bytes:
    return _key(number, _BYTES) + _varint(len(data)) + data


def _str(number: int, text: str) -> bytes:
    return _bytes(number, text.encode()) if text else b""


def _int(number: int, value: int) -> bytes:
    return _key(number, _VARINT) + _varint(int(value))


def _bool(number: int, value: bool) -> bytes:
    return _int(number, 1) if value else b""


def _double(number: int, value: float) -> bytes:
    return _key(number, _FIXED64) + struct.pack("<d", float(value))


def _any(number: int, value: Any) -> bytes:
    """openapi.v2.Any: field 2 holds the value as YAML (JSON is YAML)."""
    return _bytes(number, _str(2, json.dumps(value)))


def _named_any(number: int, name: str, value: Any) -> bytes:
    return _bytes(number, _str(1, name) + _any(2, value))


_STRINGS = {"$ref": 1, "format": 2, "title": 3, "description": 4, "pattern": 13}
_INTS = {"maxLength": 11, "minLength": 12, "maxItems": 14, "minItems": 15, "maxProperties": 17,
         "minProperties": 18}
_DOUBLES = {"multipleOf": 6, "maximum": 7, "minimum": 9}
_BOOLS = {"exclusiveMaximum": 8, "exclusiveMinimum": 10, "uniqueItems": 16, "readOnly": 27}


def schema(s: dict[str, Any]) -> bytes:
    """openapi.v2.Schema."""
    out = bytearray()
    for key, value in s.items():
        if key in _STRINGS and isinstance(value, str):
            out += _str(_STRINGS[key], value)
        elif key in _INTS and isinstance(value, int):
            out += _int(_INTS[key], value)
        elif key in _DOUBLES and isinstance(value, int | float):
            out += _double(_DOUBLES[key], value)
        elif key in _BOOLS and isinstance(value, bool):
            out += _bool(_BOOLS[key], value)
        elif key == "default":
            out += _any(5, value)
        elif key == "example":
            out += _any(30, value)
        elif key == "required" and isinstance(value, list):
            for name in value:
                out += _str(19, name)
        elif key == "enum" and isinstance(value, list):
            for item in value:
                out += _any(20, item)
        elif key == "additionalProperties":
            item = _bytes(1, schema(value)) if isinstance(value, dict) else _int(2, bool(value))
            out += _bytes(21, item)
        elif key == "type":
            types = value if isinstance(value, list) else [value]
            out += _bytes(22, b"".join(_str(1, t) for t in types))
        elif key == "items":
            items = value if isinstance(value, list) else [value]
            out += _bytes(23, b"".join(_bytes(1, schema(i)) for i in items))
        elif key == "allOf" and isinstance(value, list):
            for sub in value:
                out += _bytes(24, schema(sub))
        elif key == "properties" and isinstance(value, dict):
            out += _bytes(25, b"".join(_bytes(1, _str(1, name) + _bytes(2, schema(sub)))
                                       for name, sub in value.items()))
        elif key.startswith("x-"):
            out += _named_any(31, key, value)
    return bytes(out)


def document(doc: dict[str, Any]) -> bytes:
    """openapi.v2.Document: swagger (1), info (2), definitions (9)."""
    info = doc.get("info") or {}
    out = _str(1, doc.get("swagger", "2.0"))
    out += _bytes(2, _str(1, info.get("title", "")) + _str(2, info.get("version", "")))
    definitions = b"".join(_bytes(1, _str(1, name) + _bytes(2, schema(s)))
                           for name, s in (doc.get("definitions") or {}).items())
    out += _bytes(9, definitions)
    return out
