from django import forms
from django.contrib.auth import get_user_model

from endpoint import admission
from graphs.models import Graph


class PolicyForm(forms.Form):
    graph = forms.ModelChoiceField(queryset=Graph.objects.all(), to_field_name="name")
    viewers_may_chat = forms.BooleanField(required=False, label="Viewers may chat")


class ApiLimitForm(forms.Form):
    """An admin's limits on the OpenAI endpoint for a user, or for one of the user's tokens
    (picked from the existing ones, stored under its non-secret id)."""

    user = forms.ModelChoiceField(queryset=get_user_model().objects.filter(is_active=True).order_by("username"),
                                  to_field_name="username")
    token = forms.ChoiceField(required=False, label="Token",
                              help_text="Empty: every request of the user without a token-specific limit.")
    requests_per_minute = forms.IntegerField(required=False, min_value=0, label="Requests per minute",
                                             help_text="Empty: the default. 0 refuses every request.")
    concurrent_streams = forms.IntegerField(required=False, min_value=0, label="Streams at once",
                                            help_text="Empty: the default.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token_labels = dict(admission.token_choices())
        self.fields["token"].choices = [("", "every request of the user"), *self.token_labels.items()]

    def clean(self):
        data = super().clean()
        user, token = data.get("user"), data.get("token") or ""
        if user is not None and token and not self.token_labels.get(token, "").startswith(f"{user.username} ·"):
            self.add_error("token", f"this token is not one of {user.username}'s")
        data["token_label"] = self.token_labels.get(token, "")
        return data
