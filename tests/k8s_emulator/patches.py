"""Merge patch (RFC 7386), a strategic-merge approximation for core kinds, and JSON patch (RFC 6902)."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import jsonpointer
import yaml

from .errors import ApiError, bad_request

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE, STRATEGIC, APPLY)
CR_PATCH_TYPES = (JSON_PATCH, MERGE, APPLY)


def clone(obj: Any) -> Any:
    """A deep copy of a JSON value (faster than ``copy.deepcopy``)."""
    return json.loads(json.dumps(obj))


def parse_body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    try:
        if content_type.startswith("application/apply-patch+yaml") or content_type.endswith("yaml"):
            return yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loader
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_MERGE_KEYS = ("name", "type", "containerPort", "mountPath", "ip")


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Approximation of SMP: a merge patch in which lists of objects are merged by the first of
    ``name``/``type``/``containerPort``/... that every item carries (``$patch`` directives ignored)."""
    if isinstance(patch, list) and isinstance(target, list):
        key = _merge_key(target, patch)
        if key is None:
            return clone(patch)
        result = list(target)
        for item in patch:
            idx = next((i for i, t in enumerate(result) if t.get(key) == item.get(key)), None)
            if idx is None:
                result.append(clone(item))
            else:
                result[idx] = strategic_merge_patch(result[idx], item)
        return result
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_key(target: list[Any], patch: list[Any]) -> str | None:
    items = target + patch
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    return next((k for k in _MERGE_KEYS if all(k in i for i in items)), None)


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        return jsonpatch.apply_patch(target, operations, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError) as exc:
        raise ApiError(422, "the server rejected our request due to an error in our request", "Invalid",
                       {"causes": [{"reason": "UnexpectedServerResponse", "message": str(exc) or type(exc).__name__}]}
                       ) from None


def apply_patch(content_type: str, target: Any, patch: Any, *, custom: bool) -> Any:
    """Apply a merge, strategic or JSON patch; 415 for types the resource does not accept."""
    allowed = CR_PATCH_TYPES if custom else PATCH_TYPES
    if content_type not in allowed or content_type == APPLY:
        raise ApiError(415, f"the body of the request was in an unknown format - accepted media types "
                       f"include: {', '.join(allowed)}", "UnsupportedMediaType")
    if content_type == JSON_PATCH:
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
    if content_type == STRATEGIC:
        return strategic_merge_patch(target, patch)
    return merge_patch(target, patch)
