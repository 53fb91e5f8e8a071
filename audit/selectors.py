"""Reading the audit log: the filters the page and the API share."""

from __future__ import annotations

from .models import AuditRecord

FILTERS = ("actor", "action", "target", "target_type", "via")


def filtered(params) -> tuple:
    qs = AuditRecord.objects.all()
    applied = {}
    for key in FILTERS:
        value = (params.get(key) or "").strip()
        if not value:
            continue
        applied[key] = value
        if key == "actor":
            qs = qs.filter(actor_name=value)
        elif key == "action":
            qs = qs.filter(action__startswith=value)
        else:
            qs = qs.filter(**{key: value})
    return qs, applied
