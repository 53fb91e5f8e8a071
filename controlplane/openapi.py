"""The OpenAPI schema says what the API does (drf-spectacular postprocessing hook):

* every operation documents the 4xx answers it can give (400 malformed or refused input, 401
  no or bad credentials, 403 the role does not allow it, 404 no such object), writes also 409
  (a conflict: another operation runs, the graph changed, the name is taken) and 422 (content
  of the stated shape that rules no schema states refuse: core.errors.Unprocessable; reads too
  where a query parameter has such rules: CONTENT_PARAMETERS) and, with
  a body, 415, and every one 503 (a dependency down: controlplane/unavailable.py); all of them JSON, in
  the shape of ``Error``;
* every request body of a serializer refuses unknown fields and says so (``additionalProperties:
  false``, controlplane/json_types.py); free-form objects inside them take any JSON;
* integers are bounded to 64 bits and numbers to that range, as the server enforces;
* text is UTF-8 without NUL (``x-text`` note in the description): the server refuses the rest
  with a 400 naming the field (core/untrusted.py)."""

from __future__ import annotations

from core.untrusted import INT_MAX, INT_MIN

ERROR = {
    "type": "object",
    "description": "What is wrong and where: `detail` (a sentence), or one list of messages per field "
                   "(`{\"replicas\": [\"must be at least 0\"]}`), or a manifest's `findings` with their paths.",
    "properties": {"detail": {}, "findings": {"type": "array", "items": {"type": "object"}}},
    "additionalProperties": True,
}
REASONS = {
    "400": "The request is malformed or refused; the body names the field and the problem.",
    "401": "No credentials, or a token that is unknown, expired or revoked.",
    "403": "Your role does not allow this; `detail` names the role it needs.",
    "404": "No such object (or not yours).",
    "409": "Conflicts with the current state (another operation runs, the object changed, the name is taken).",
    "415": "The body's media type is not one this operation reads.",
    "422": "The request has the shape this schema states, and what it says is refused by rules no schema states "
           "(a manifest's CRD and operational rules, a Planner's thresholds across fields, AIConfigurator's support "
           "matrix); the body names the field or path and the rule.",
    "503": "A dependency is down (the database or the task broker); `Retry-After` says when to try again.",
}
UNSAFE = {"post", "put", "patch", "delete"}
# Decimal fields whose model validators refuse negatives (metrics.models.Objectives).
NON_NEGATIVE_DECIMALS = (("ObjectivesRequest", "gpu_hour_price"), ("PatchedObjectivesRequest", "gpu_hour_price"))
# The GPU-hour price: 0 to metrics.models.PRICE_MAX (10000) with 4 decimals, as a decimal string
# (a string's schema has no maximum: the pattern states it), at least one digit; -0 is 0, and
# empty clears the price (the global one applies).
PRICE_PATTERN = (r"^$|^(?:0?\d{1,4}(?:\.\d{0,4})?|0?\d{0,4}\.\d{1,4}|10000(?:\.0{0,4})?"
                 r"|-(?:0{1,5}(?:\.0{0,4})?|0{0,5}\.0{1,4}))$")
# Rules across fields that serializers check in code, stated for the schema too.
_BLANK = {"type": "string", "pattern": r"^\s*$"}
_IN_CLUSTER_OR_KUBECONFIG = {"anyOf": [{"properties": {"in_cluster": {"enum": [False]}}},
                                     {"not": {"required": ["in_cluster"]}},
                                     {"properties": {"kubeconfig": _BLANK, "context": _BLANK}}]}
CROSS_FIELD_RULES = {
    # clusters.services: the in-cluster service account, or a kubeconfig (and context), not both;
    # a change asks the same of what it sends (against what is stored, it is a 409).
    "PatchedClusterRequest": _IN_CLUSTER_OR_KUBECONFIG,
    "ClusterRequest": _IN_CLUSTER_OR_KUBECONFIG,
}


def _error_response(code: str) -> dict:
    schema = {"$ref": "#/components/schemas/Error"}
    response = {"description": REASONS[code], "content": {"application/json": {"schema": schema}}}
    if code == "503":
        response["headers"] = {"Retry-After": {"schema": {"type": "integer", "minimum": 1},
                                               "description": "Seconds to wait before trying again."}}
    return response


# Query parameters whose strings follow rules no JSON Schema states (the graph list's: a label
# selector kubectl would refuse, a cursor the list did not write): a read that takes one also
# answers 422 (content), as writes do.
CONTENT_PARAMETERS = {"label", "cursor"}


def document_errors(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "head", "options", *UNSAFE}:
                continue
            codes = ["400", "401", "403", "404", "503"]
            if method in UNSAFE:
                codes += ["409", "422"]
            elif any(p.get("name") in CONTENT_PARAMETERS for p in operation.get("parameters", [])):
                codes.append("422")
            if "requestBody" in operation:
                codes.append("415")
                if "application/yaml" in operation["requestBody"].get("content", {}):
                    operation["requestBody"]["required"] = True  # a manifest: an empty body is refused
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(code, _error_response(code))
    schemas = result["components"]["schemas"]
    for name, schema in schemas.items():
        if name.endswith("Request") and schema.get("type") == "object":
            schema["additionalProperties"] = False  # serializers refuse unknown fields (json_types)
    for name, rule in CROSS_FIELD_RULES.items():
        schemas[name].update(rule)
    schemas["JSONValue"] = JSON_VALUE
    for name, field in NON_NEGATIVE_DECIMALS:
        prop = schemas.get(name, {}).get("properties", {}).get(field, {})
        if prop.get("pattern", "").startswith("^-?") and prop["pattern"].endswith("$"):
            # drf-spectacular's decimal pattern allows a minus and up to 99999.9999.
            prop["pattern"] = PRICE_PATTERN
    for name, schema in schemas.items():
        if name.endswith("Request"):
            _open_objects_take_json(schema)
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            if isinstance(operation, dict):
                for media in operation.get("requestBody", {}).get("content", {}).values():
                    _open_objects_take_json(media.get("schema", {}))
    _bound_integers(result)
    return result


# Any JSON the server reads: what an open object's unknown fields may hold.
_REF = {"$ref": "#/components/schemas/JSONValue"}
JSON_VALUE = {"description": "Any JSON value within the server's bounds: numbers within the 64-bit integer range.",
              "nullable": True,
              "anyOf": [{"type": "string"}, {"type": "boolean"},
                        {"type": "number", "minimum": INT_MIN, "maximum": INT_MAX},
                        {"type": "array", "items": _REF}, {"type": "object", "additionalProperties": _REF}]}


def _open_objects_take_json(node) -> None:
    """Request objects that ignore unknown fields still read them within bounds: say so."""
    if isinstance(node, dict):
        if node.get("type") == "object" and "additionalProperties" not in node and "$ref" not in node:
            node["additionalProperties"] = _REF
        for key, value in node.items():
            if key != "additionalProperties":
                _open_objects_take_json(value)
    elif isinstance(node, list):
        for value in node:
            _open_objects_take_json(value)


def _bound_integers(node) -> None:
    """Integers fit in 64 bits and numbers stay within that range (the server refuses others,
    core/untrusted.py): say so wherever a schema gives no tighter bound."""
    if isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            node.setdefault("maximum", INT_MAX)
            node.setdefault("minimum", INT_MIN)
        for value in node.values():
            _bound_integers(value)
    elif isinstance(node, list):
        for value in node:
            _bound_integers(value)
