"""HTML forms: they validate input and hand typed values to the services."""

from __future__ import annotations

from django import forms

from .services import HF_TOKEN_KEY, HF_TOKEN_SECRET, ClusterError, clean_namespaces


class ClusterForm(forms.Form):
    name = forms.SlugField(max_length=63, help_text="Lower-case letters, digits and '-'")
    description = forms.CharField(max_length=300, required=False)
    in_cluster = forms.BooleanField(required=False, label="Use the control plane's own service account (in-cluster)")
    kubeconfig = forms.CharField(max_length=500, required=False, label="Kubeconfig path",
                                 help_text="A file on the control plane's host; empty: $KUBECONFIG or ~/.kube/config")
    context = forms.CharField(max_length=200, required=False, help_text="Empty: the file's current context")
    namespaces = forms.CharField(max_length=2000, label="Allowed namespaces",
                                 help_text="The namespaces graphs may use, separated by commas or spaces")

    def clean_namespaces(self):
        try:
            names = clean_namespaces(self.cleaned_data["namespaces"])
        except ClusterError as exc:
            raise forms.ValidationError(str(exc)) from None
        if not names:
            raise forms.ValidationError("allow at least one namespace")
        return names


class HFTokenForm(forms.Form):
    """Write-only: the token field is never rendered back, not even after an error."""

    namespace = forms.ChoiceField()
    secret_name = forms.CharField(max_length=253, initial=HF_TOKEN_SECRET, label="Secret name")
    key = forms.CharField(max_length=253, initial=HF_TOKEN_KEY, label="Key")
    value = forms.CharField(max_length=4096, strip=True, label="Hugging Face token",
                            widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}))

    def __init__(self, *args, namespaces: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["namespace"].choices = [(n, n) for n in namespaces]
