"""The parsed API request that the handlers work on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import bad_request
from .patches import parse_body
from .resources import Resource

TRUE = ("true", "True", "1")


@dataclass
class Request:
    method: str
    res: Resource
    version: str
    namespace: str | None
    name: str | None
    sub: str | None
    query: dict[str, str]
    raw_body: bytes = b""
    content_type: str = ""
    user_agent: str = ""
    warnings: list[str] = field(default_factory=list)
    user: str = "kubernetes-admin"  # the authenticated username (admission webhooks see it)

    @property
    def body(self) -> Any:
        return parse_body(self.raw_body, self.content_type)

    def flag(self, name: str) -> bool:
        return self.query.get(name, "") in TRUE

    @property
    def dry_run(self) -> bool:
        value = self.query.get("dryRun", "")
        if value not in ("", "All"):
            raise bad_request(f'Unsupported value: "{value}": supported values: "All"')
        return value == "All"

    @property
    def field_validation(self) -> str:
        value = self.query.get("fieldValidation", "") or "Warn"
        if value not in ("Strict", "Warn", "Ignore"):
            raise bad_request(f'fieldValidation: Unsupported value: "{value}": supported values: '
                              '"Ignore", "Strict", "Warn"')
        return value

    @property
    def manager(self) -> str:
        """``fieldManager``, or the user agent's product name (what the API server defaults to)."""
        return self.query.get("fieldManager") or (self.user_agent.split("/")[0] or "unknown")

    @property
    def api_version(self) -> str:
        return self.res.api_version(self.version)
