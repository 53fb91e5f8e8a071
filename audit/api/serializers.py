"""The audit API's serializer: every field of a record, read-only."""

from rest_framework import serializers

from ..models import AuditRecord


class AuditRecordSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditRecord
        fields = ["id", "at", "actor_name", "via", "action", "target_type", "target", "before", "after", "message"]
