from django.contrib import admin

from .models import AuditRecord


@admin.register(AuditRecord)
class AuditRecordAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only, even for superusers."""

    list_display = ("at", "actor_name", "via", "action", "target_type", "target")
    list_filter = ("action", "via", "target_type")
    search_fields = ("target", "actor_name", "message")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
