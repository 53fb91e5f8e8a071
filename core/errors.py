"""Our own small error types. Adapters turn library exceptions into these."""

from __future__ import annotations

from core.findings import Finding, Severity, bounded


class Refused(Exception):
    """The one base of every refusal: a request the control plane will not carry out as asked,
    with the reason for the user. Pages show the message as is; the API's one exception
    handler (controlplane/api.py) answers ``as_dict()`` with ``status``: 409 for a conflict
    with the current state, 400 where the request itself is wrong."""

    status = 409

    def as_dict(self) -> dict:
        return {"detail": str(self)}


class Missing(Refused):
    """What the request names does not exist (a pod the graph does not have): HTTP 404."""

    status = 404


class Unprocessable(Refused):
    """A request of the shape the API's schema states whose content is refused by rules no
    schema states: a manifest's CRD and operational rules, a Planner's thresholds across fields,
    AIConfigurator's support matrix. HTTP 422 (RFC 9110 15.5.21): 400 stays for a request that
    does not match the schema (a wrong type, a missing field, a bound), so a client, and
    schemathesis, can tell "fix the request" from "fix what it describes"."""

    status = 422


# Findings of a text that is not one readable YAML document within bounds (core/specio.py), a
# file that does not hold one graph and only what may go beside it (core/documents.py), or an
# archive that cannot be built into one (graphs/archive.py, graphs/kustomize.py): the request's
# body itself is malformed, HTTP 400. Every other finding judges what the graph says: 422.
UNREADABLE = frozenset({"too_large", "encoding", "empty", "yaml", "unstorable", "many", "not_a_mapping",
                        "duplicate_graph", "too_many_graphs", "too_many_companions", "companion_list",
                        "companion_name", "companion_secret", "no_graph", "not_an_object", "metadata"})
UNREADABLE_PREFIXES = ("archive_", "kustomize_")


# The code a serializer field gives a ValidationError for content the rules refuse (graphs'
# SpecField): the API's exception handler answers it 422, like Unprocessable.
UNPROCESSABLE = "unprocessable"


class ManifestError(Unprocessable):
    """Input that cannot become a graph: unparsable YAML, a wrong shape, schema errors.
    Carries every finding so the caller can show all of them at once, with their paths.
    HTTP 400 when the text is not one readable document (UNREADABLE), else 422."""

    @property
    def status(self) -> int:
        unreadable = any(f.code in UNREADABLE or f.code.startswith(UNREADABLE_PREFIXES) for f in self.findings)
        return 400 if unreadable else 422

    def __init__(self, findings: list[Finding]):
        self.findings = bounded(findings)
        shown = self.findings[:10]
        more = f" (and {len(findings) - len(shown):,} more)" if len(findings) > len(shown) else ""
        super().__init__("; ".join(f"{f.path}: {f.message}" for f in shown) + more or "invalid manifest")

    @classmethod
    def single(cls, path: str, message: str, code: str = "invalid", fix: str = "") -> ManifestError:
        return cls([Finding(Severity.ERROR, code, path, message, fix)])

    def as_dict(self) -> dict:
        return {
            "detail": "The manifest is invalid: " + str(self),
            "findings": [f.as_dict() for f in self.findings],
        }


class OperationRefused(Refused):
    """An operation that cannot start: another one runs, the graph is invalid, bad counts.
    ``forceable``: the same request with force would be carried out (the page offers it)."""

    def __init__(self, message: str, *, forceable: bool = False):
        super().__init__(message)
        self.forceable = forceable


class RuntimeFailure(Exception):
    """A runtime could not do what was asked. The message is shown to the user as is."""

    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        self.transient = transient
