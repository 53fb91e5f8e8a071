from django import forms
from django.contrib import admin

from . import admission
from .models import ApiLimit, Conversation, Message, PlaygroundPolicy
from .services import api_limit_delete, api_limit_set, policy_set


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


class ApiLimitForm(forms.ModelForm):
    """The token is picked from the existing ones (stored under its non-secret id)."""

    token = forms.ChoiceField(required=False, help_text="Empty: the limits apply to every request of the user "
                                                        "(session or any token) that has no token-specific row.")

    class Meta:
        model = ApiLimit
        fields = ("user", "token", "requests_per_minute", "concurrent_streams")
        help_texts = {"requests_per_minute": "Empty: PLAYGROUND_RATE_PER_MINUTE. 0 refuses every request.",
                      "concurrent_streams": "Empty: PLAYGROUND_MAX_CONCURRENT_STREAMS."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token_labels = dict(admission.token_choices())
        choices = [("", "every request of the user"), *self.token_labels.items()]
        if self.instance.token_id and self.instance.token_id not in self.token_labels:
            choices.append((self.instance.token_id, f"{self.instance.token_label} (revoked)"))
        self.fields["token"].choices = choices
        self.initial.setdefault("token", self.instance.token_id)

    def clean(self):
        data = super().clean()
        user, token = data.get("user"), data.get("token") or ""
        if user is not None and token and not self.token_labels.get(token, "").startswith(f"{user.username} ·"):
            self.add_error("token", f"this token is not one of {user.username}'s")
        return data


@admin.register(ApiLimit)
class ApiLimitAdmin(admin.ModelAdmin):
    """Per-user and per-token limits of the OpenAI endpoint (the playground's API)."""

    form = ApiLimitForm
    list_display = ("user", "token_label", "requests_per_minute", "concurrent_streams", "updated_by", "updated_at")
    search_fields = ("user__username", "token_label")

    def save_model(self, request, obj, form, change):
        token = form.cleaned_data.get("token") or ""
        if change and (obj.user_id, obj.token_id) != (form.initial.get("user"), form.initial.get("token")):
            ApiLimit.objects.filter(pk=obj.pk).delete()  # the row now names another user or token
        limit = api_limit_set(user=obj.user, token_id=token, token_label=form.token_labels.get(token, ""),
                              requests_per_minute=obj.requests_per_minute,
                              concurrent_streams=obj.concurrent_streams, by=request.user)
        obj.pk = limit.pk

    def delete_model(self, request, obj):
        api_limit_delete(limit=obj, by=request.user)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            api_limit_delete(limit=obj, by=request.user)
