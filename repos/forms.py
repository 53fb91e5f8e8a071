from django import forms

from .models import Mode


class RepositoryForm(forms.Form):
    name = forms.SlugField(max_length=63, help_text="lower-case letters, digits and '-'")
    url = forms.CharField(max_length=500, help_text="https://…, ssh://…, git@host:org/repo.git or file:///…")
    branch = forms.CharField(max_length=200, initial="main")
    path = forms.CharField(max_length=500, required=False, help_text="the folder of manifests; empty: the root")
    mode = forms.ChoiceField(choices=Mode.choices, initial=Mode.DIRECT)
    username = forms.CharField(max_length=200, required=False)
    password = forms.CharField(max_length=4096, required=False, strip=False,
                               widget=forms.PasswordInput(render_value=False),
                               help_text="password or access token (https)")
    ssh_key = forms.CharField(max_length=16384, required=False, strip=False,
                              widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
                              help_text="a private key (ssh); never shown again")
    webhook_secret = forms.CharField(max_length=500, required=False, strip=False,
                                     widget=forms.PasswordInput(render_value=False),
                                     help_text="the secret the Git host's push webhook is configured with")

    def clean_name(self):
        name = self.cleaned_data["name"]
        if name != name.lower() or "_" in name:
            raise forms.ValidationError("use lower-case letters, digits and '-'")
        return name
