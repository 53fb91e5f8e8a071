"""Read-only admin views: benchmark rows change only through benchmarks.services."""

from django.contrib import admin

from .models import BenchmarkRun, Recommendation, Study


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(ReadOnly):
    list_display = ("id", "graph", "profile", "label", "state", "progress", "requested_by", "via", "created_at")
    list_filter = ("state", "profile", "via")
    list_select_related = ("graph", "requested_by")


@admin.register(Study)
class StudyAdmin(ReadOnly):
    list_display = ("id", "graph", "profile", "state", "message", "requested_by", "created_at")
    list_select_related = ("graph", "requested_by")


@admin.register(Recommendation)
class RecommendationAdmin(ReadOnly):
    list_display = ("id", "graph", "shape", "met", "state", "created_by", "created_at")
    list_select_related = ("graph", "created_by")
