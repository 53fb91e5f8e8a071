"""The validation pipeline: structure first (the real CRD schema), then operational checks.
Runs on every save, import, render and before every apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.checks import operational_findings
from core.dgd.parse import import_manifest
from core.dgd.render import conversion_losses, render
from core.dgd.webhook.findings import webhook_findings
from core.errors import ManifestError
from core.findings import Finding, Severity, bounded, has_errors, sort_findings
from core.schema import schema_used, structural_findings
from core.spec import GraphSpec

# A DGD runs a handful of components; more than this is a mistake or an attack, refused before
# the schema and the checks spend time on each one.
MAX_COMPONENTS = 100


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    spec: GraphSpec | None = None
    # Which CRD schema judged the structure (core.schema.schema_used); None when the
    # manifest names no API version the CRD serves, or was not YAML at all.
    schema: dict[str, Any] | None = None

    def __post_init__(self):
        self.findings = bounded(self.findings)

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)

    def counts(self) -> dict[str, int]:
        return {s.value: sum(1 for f in self.findings if f.severity == s) for s in Severity}

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.ok, "counts": self.counts(), "findings": [f.as_dict() for f in self.findings],
                "schema": self.schema}


def validate_manifest(obj: Any, *, dynamo_version: str | None = None) -> Report:
    """Findings for a manifest as the user wrote it. ``spec`` is set when it could be imported."""
    too_many = _too_many_components(obj)
    if too_many:
        return Report([too_many], None)
    findings = structural_findings(obj)
    api_version = obj.get("apiVersion") if isinstance(obj, dict) else None
    try:
        spec = import_manifest(obj, dynamo_version=dynamo_version)
    except ManifestError as exc:
        # The schema already named what is wrong at these paths: one finding per problem.
        known = {f.path for f in findings}
        findings += [f for f in exc.findings if f.path not in known]
        return Report(sort_findings(findings), None, schema_used(api_version, dynamo_version))
    findings += operational_findings(obj, dynamo_version=dynamo_version, spec=spec)
    findings += webhook_findings(obj)  # what the API server and the operator's webhook refuse on create
    return Report(sort_findings(findings), spec, schema_used(api_version, dynamo_version or spec.dynamo_version))


def validate_spec(spec: GraphSpec, *, api_version: str, dynamo_version: str | None = None) -> Report:
    """Findings for a spec as it renders in ``api_version``."""
    manifest = render(spec, api_version, dynamo_version)
    findings = structural_findings(manifest)
    schema = schema_used(manifest["apiVersion"], dynamo_version or spec.dynamo_version)
    if dynamo_version and dynamo_version != spec.dynamo_version:
        # Judge what was rendered for that release (flags, images, paths), not the stored spec.
        try:
            checked = import_manifest(manifest, dynamo_version=dynamo_version)
        except ManifestError as exc:
            return Report(sort_findings(findings + exc.findings), spec, schema)
    else:
        checked = spec
    findings += operational_findings(manifest, dynamo_version=dynamo_version, spec=checked)
    findings += [Finding(Severity.ERROR, "conversion_loses_field", path,
                         f"{path} would be lost in {manifest['apiVersion']}: {why}",
                         "keep the graph in the API version it was written in, or remove the field")
                 for path, why in conversion_losses(spec, manifest["apiVersion"])]
    return Report(sort_findings(findings), spec, schema)


def _too_many_components(obj: Any) -> Finding | None:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return None
    for key in ("components", "services"):
        items = spec.get(key)
        if isinstance(items, (list, dict)) and len(items) > MAX_COMPONENTS:
            return Finding(Severity.ERROR, "too_many_components", f"spec.{key}",
                           f"spec.{key} has {len(items):,} entries; a graph may have at most {MAX_COMPONENTS}")
    return None
