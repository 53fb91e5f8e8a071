from django.contrib import admin

from .models import PlaygroundPolicy
from .services import policy_set


@admin.register(PlaygroundPolicy)
class PlaygroundPolicyAdmin(admin.ModelAdmin):
    list_display = ("graph", "viewers_may_chat", "updated_by", "updated_at")
    list_editable = ("viewers_may_chat",)
    fields = ("graph", "viewers_may_chat")

    def save_model(self, request, obj, form, change):
        # Through the service, like every other write.
        policy = policy_set(graph=obj.graph, viewers_may_chat=obj.viewers_may_chat, user=request.user)
        obj.pk = policy.pk
