from django.contrib import admin

from .models import Cluster


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Read-only here: clusters are registered on the Clusters page, through the services."""

    list_display = ["name", "reachable", "server_version", "dgd_versions", "gpu_free", "checked_at"]
    readonly_fields = [f.name for f in Cluster._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
