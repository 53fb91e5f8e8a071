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


# What one validation may answer: a manifest with 20,000 broken components gets the first
# MAX_FINDINGS findings and a note, each message at most MAX_MESSAGE_CHARS (a schema message
# may quote a whole array).
MAX_FINDINGS = 100
MAX_MESSAGE_CHARS = 500


def bounded(findings: list[Finding]) -> list[Finding]:
    """``findings`` within MAX_FINDINGS and MAX_MESSAGE_CHARS, saying how many were left out."""
    if findings and findings[-1].code == "truncated":
        return findings  # bounded already
    out = [f if max(len(f.message), len(f.path), len(f.fix)) <= MAX_MESSAGE_CHARS
           else Finding(f.severity, f.code, _cut(f.path), _cut(f.message), _cut(f.fix))
           for f in findings[:MAX_FINDINGS]]
    if len(findings) > MAX_FINDINGS:
        out.append(Finding(Severity.INFO, "truncated", "",
                           f"{len(findings) - MAX_FINDINGS:,} more findings are not shown; fix these first"))
    return out


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == Severity.ERROR for f in findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.path, f.code))
