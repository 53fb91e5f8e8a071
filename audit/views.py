"""The audit log, for admins: a filterable page (the read-only API is audit.api)."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_safe

from accounts.roles import Role, role_required

from .models import AuditRecord
from .selectors import filtered


@role_required(Role.ADMIN)
@require_safe
def audit_list(request):
    qs, applied = filtered(request.GET)
    page = Paginator(qs, 100).get_page(request.GET.get("page"))
    actions = AuditRecord.objects.order_by().values_list("action", flat=True).distinct()
    return render(request, "audit/list.html", {"page": page, "records": page.object_list, "applied": applied,
                                               "actions": sorted(set(actions))})
