"""Structural validation against the real Dynamo CRD files in core/crds/ (copied verbatim
from ai-dynamo/dynamo; see SOURCE.txt there). Nothing here is a hand-written copy of the
schema: the CRD's openAPIV3Schema is turned into a JSON Schema with Kubernetes' structural
rules (unknown fields are errors unless x-kubernetes-preserve-unknown-fields; nullable)."""

from __future__ import annotations

import copy
import hashlib
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator

from core.findings import Finding, Severity

CRD_DIR = Path(__file__).resolve().parent / "crds"
DGD_CRD = "nvidia.com_dynamographdeployments.yaml"

_SKIP_KEYS = {"description", "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
              "x-kubernetes-map-type", "format"}


# The newest release whose CRDs are in core/crds/ is unknown: the files are a snapshot of
# upstream main (SOURCE.txt), which declares this version. Releases after it (1.6.x, 1.7.0
# with its v1beta2) could not be obtained, so the snapshot validates every target release.
SNAPSHOT_DECLARES = "1.5.0"


@cache
def schema_source() -> dict[str, str]:
    """Where the CRD files came from, read from SOURCE.txt beside them (one place states it)."""
    text = (CRD_DIR / "SOURCE.txt").read_text()
    commit = re.search(r"^commit:\s+([0-9a-f]{40})\s+\((\d{4}-\d{2}-\d{2})", text, re.M)
    with open(CRD_DIR / DGD_CRD, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    return {"repository": "github.com/ai-dynamo/dynamo", "ref": "main", "commit": commit.group(1) if commit else "",
            "date": commit.group(2) if commit else "", "declares": SNAPSHOT_DECLARES, "file": DGD_CRD,
            "sha256": digest}


def schema_used(api_version: str | None, target_release: str | None) -> dict[str, Any] | None:
    """Which schema judged a manifest, for the validation page and API: the CRD snapshot,
    the API version's schema in it, and how it relates to the release the graph targets."""
    if api_version not in served_versions():
        return None
    source = schema_source()
    out: dict[str, Any] = {
        "api_version": api_version, **source, "target_release": target_release,
        "summary": (f"{api_version} schema of the DynamoGraphDeployment CRD from {source['repository']} "
                    f"{source['ref']} at {source['commit'][:7]} ({source['date']}, declaring {source['declares']})"),
    }
    from core.facts import DynamoVersion

    try:
        target = DynamoVersion.parse(target_release) if target_release else None
    except ValueError:
        target = None
    declared = DynamoVersion.parse(SNAPSHOT_DECLARES)
    if target is None:
        out["note"] = "This snapshot is used for every target release."
    elif (target.major, target.minor) == (declared.major, declared.minor):
        out["note"] = f"The snapshot declares {declared.major}.{declared.minor}, the target release's line."
    elif target > declared:
        out["note"] = (f"The CRD shipped with {target} could not be obtained here; this {SNAPSHOT_DECLARES} snapshot "
                       "is used instead, so fields added after it are reported as unknown.")
    else:
        out["note"] = (f"This snapshot is newer than {target}: it may accept fields the {target} operator "
                       "does not know.")
    return out


@cache
def load_crd(filename: str = DGD_CRD) -> dict[str, Any]:
    with open(CRD_DIR / filename, "rb") as handle:
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def served_versions(filename: str = DGD_CRD) -> list[str]:
    crd = load_crd(filename)
    group = crd["spec"]["group"]
    return [f"{group}/{v['name']}" for v in crd["spec"]["versions"] if v.get("served")]


def _structural(node: Any) -> Any:
    """openAPIV3Schema → JSON Schema, recursively."""
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _structural(v) for k, v in node.items() if k not in _SKIP_KEYS}
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        out.pop("nullable", None)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        for key in ("apiVersion", "kind"):
            props.setdefault(key, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def openapi_schema(api_version: str, filename: str = DGD_CRD) -> dict[str, Any] | None:
    """The served version's ``openAPIV3Schema`` as the CRD has it, ``x-kubernetes-validations`` (CEL
    rules, evaluated by core.cel) included; None for a version the CRD does not serve."""
    crd = load_crd(filename)
    group, _, version = str(api_version).partition("/")
    if group != crd["spec"]["group"]:
        return None
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version and entry.get("served"):
            return entry["schema"]["openAPIV3Schema"]
    return None


@cache
def validator_for(api_version: str, filename: str = DGD_CRD) -> Draft7Validator:
    crd = load_crd(filename)
    group, _, version = api_version.partition("/")
    if group != crd["spec"]["group"]:
        raise KeyError(api_version)
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version and entry.get("served"):
            schema = _structural(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))
            schema["properties"]["metadata"] = {
                "type": "object",
                "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                               "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                               "annotations": {"type": "object", "additionalProperties": {"type": "string"}}},
            }
            schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata", "spec"})
            return Draft7Validator(schema)
    raise KeyError(api_version)


def _path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error) -> tuple[str, str]:
    """(path, message) in words an operator reads: unknown fields named by path."""
    path = _path(error.absolute_path)
    if error.validator == "additionalProperties":
        extras = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        names = ", ".join(f"{path}.{e}" if path else e for e in extras)
        return (f"{path}.{extras[0]}" if path and extras else path), (
            f"unknown field{'s' if len(extras) > 1 else ''} {names}: the CRD does not define "
            f"{'them' if len(extras) > 1 else 'it'} (check the spelling and the API version)"
        )
    if error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return path, f"{path or 'the manifest'} must be of type {expected}, not {_json_type(error.instance)}"
    if error.validator == "required":
        return path, error.message.replace("is a required property", f"is required under {path or 'the top level'}")
    if error.validator == "minimum":
        return path, f"{path} must be at least {error.validator_value}, not {error.instance}"
    if error.validator == "enum":
        allowed = ", ".join(map(str, error.validator_value))
        return path, f"{path} is {error.instance!r}; allowed values are {allowed}"
    if error.validator == "pattern":
        return path, f"{path} value {error.instance!r} is not in the accepted format"
    if error.validator == "anyOf" and isinstance(error.instance, (list, dict, bool, float)):
        return path, f"{path} must be a number or a string, not {_json_type(error.instance)}"
    return path, f"{path}: {error.message}"


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def structural_findings(obj: Any) -> list[Finding]:
    """Every schema error of a DGD object, or one finding if the apiVersion is not served."""
    if not isinstance(obj, dict):
        return [Finding(Severity.ERROR, "not_a_mapping", "", "a manifest must be a YAML mapping")]
    api_version = obj.get("apiVersion")
    try:
        validator = validator_for(str(api_version))
    except KeyError:
        versions = " or ".join(served_versions())
        return [Finding(Severity.ERROR, "api_version", "apiVersion",
                        f"apiVersion {api_version!r} is not served by the DynamoGraphDeployment CRD",
                        f"use {versions}")]
    findings = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        path, message = _message(error)
        findings.append(Finding(Severity.ERROR, f"schema_{error.validator}", path, message))
        if len(findings) >= 50:
            break
    return findings
