"""The audit log's read-only API, admins only, filtered like the page."""

from rest_framework import mixins, viewsets

from accounts.roles import Role

from ..selectors import filtered
from .serializers import AuditRecordSerializer


class AuditViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Append-only audit log; admins only. Filter with ?actor=&action=&target=&target_type=&via=."""

    serializer_class = AuditRecordSerializer
    required_roles = {"list": Role.ADMIN, "retrieve": Role.ADMIN}

    def get_queryset(self):
        return filtered(self.request.query_params)[0]
