from django.contrib import admin

from .models import Conversation, Message


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
