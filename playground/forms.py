from django import forms

from graphs.models import Graph


class PolicyForm(forms.Form):
    graph = forms.ModelChoiceField(queryset=Graph.objects.all(), to_field_name="name")
    viewers_may_chat = forms.BooleanField(required=False, label="Viewers may chat")
