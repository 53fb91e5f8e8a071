from django.contrib import admin

from . import services
from .models import Objectives


@admin.register(Objectives)
class ObjectivesAdmin(admin.ModelAdmin):
    list_display = ("graph", "ttft_ms", "itl_ms", "gpu_hour_price", "updated_by", "updated_at")
    readonly_fields = ("updated_by", "updated_at")

    def save_model(self, request, obj, form, change):
        saved = services.objectives_set(graph=obj.graph, ttft_ms=obj.ttft_ms, itl_ms=obj.itl_ms,
                                        gpu_hour_price=obj.gpu_hour_price, user=request.user)
        obj.pk = saved.pk
