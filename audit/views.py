"""The audit log, for admins: a filterable page and a read-only API."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_safe
from rest_framework import mixins, serializers, viewsets

from accounts.roles import Role, role_required

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


@role_required(Role.ADMIN)
@require_safe
def audit_list(request):
    qs, applied = filtered(request.GET)
    page = Paginator(qs, 100).get_page(request.GET.get("page"))
    actions = AuditRecord.objects.order_by().values_list("action", flat=True).distinct()
    return render(request, "audit/list.html", {"page": page, "records": page.object_list, "applied": applied,
                                               "actions": sorted(set(actions))})


class AuditRecordSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditRecord
        fields = ["id", "at", "actor_name", "via", "action", "target_type", "target", "before", "after", "message"]


class AuditViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Append-only audit log; admins only. Filter with ?actor=&action=&target=&target_type=&via=."""

    serializer_class = AuditRecordSerializer
    required_roles = {"list": Role.ADMIN, "retrieve": Role.ADMIN}

    def get_queryset(self):
        return filtered(self.request.query_params)[0]
