from django.contrib import admin

from .models import Conversation, Message, PlaygroundPolicy
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


class MessageInline(admin.TabularInline):
    model = Message
    fields = ("position", "role", "content", "timing")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title", "owner", "graph_name", "updated_at")
    list_filter = ("graph_name",)
    search_fields = ("title", "owner__username")
    readonly_fields = ("owner", "graph", "graph_name", "title", "system_prompt", "params", "created_at", "updated_at")
    inlines = [MessageInline]

    def has_add_permission(self, request):
        return False

