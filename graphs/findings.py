"""A validation finding: what is wrong, where in the manifest, how bad, and the fix."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass


class Severity(enum.StrEnum):
    ERROR = "error"  # the API server or the operator would refuse it, or it cannot work
    WARNING = "warning"  # it deploys but is likely to fail or misbehave at run time
    INFO = "info"  # worth knowing: deprecations, defaults that apply


SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str
    path: str  # dotted path into the manifest, e.g. spec.services.VllmPrefillWorker.sharedMemory
    message: str
    fix: str = ""

    def as_dict(self) -> dict:
        data = asdict(self)
        data["severity"] = str(self.severity)
        return data


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == Severity.ERROR for f in findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.path, f.code))
