"""Recording mutations. Every service that changes something calls ``audit_record`` in the
same transaction as the change, so a change without its record cannot be committed."""

from __future__ import annotations

import re
from typing import Any

from accounts.roles import SERVER_ADMIN

from .models import AuditRecord

REDACTED = "[redacted]"
# Keys whose values are never stored: token values, passwords, kubeconfig credentials.
_SECRET_KEY = re.compile(r"(token|password|secret_value|secret-value|credential|private|client-key|"
                         r"client_key|bearer|api[_-]?key|hf_token$)", re.I)
# Names of Secrets and of the fields that hold them are fine to keep: they are references.
_REFERENCE_KEY = re.compile(r"(secret(_name|Name)?$|hf_token_secret|envFromSecret|secretRef|token_secret)", re.I)


def redact(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if _SECRET_KEY.search(str(key)) and not _REFERENCE_KEY.search(str(key)):
                out[key] = REDACTED
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def audit_record(*, actor=None, via: str = "ui", action: str, target_type: str, target: str,
                 before: Any = None, after: Any = None, message: str = "") -> AuditRecord:
    user = actor if actor is not None and getattr(actor, "pk", None) else None
    return AuditRecord.objects.create(
        actor=user, actor_name=getattr(user, "username", "") if user else
        {"system": "system", "cli": SERVER_ADMIN}.get(via, ""),
        via=via, action=action, target_type=target_type, target=str(target)[:253],
        before=redact(before), after=redact(after), message=message[:2000],
    )
