"""The API tokens page: a signed-in user lists, creates and revokes their own tokens."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from . import tokens
from .models import ApiToken
from .roles import Role, role_required


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What or who uses it, e.g. “ci-pipeline”.")
    days = forms.IntegerField(min_value=1, max_value=tokens.MAX_DAYS, initial=tokens.DEFAULT_DAYS,
                              label="Expires after (days)")


@role_required(Role.VIEWER)
@require_http_methods(["GET", "HEAD", "POST"])
def token_list(request):
    form = TokenForm(request.POST or None)
    new_key = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                _token, new_key = tokens.token_create(user=request.user, name=form.cleaned_data["name"],
                                                     days=form.cleaned_data["days"], via="ui")
            except tokens.TokenError as exc:
                form.add_error(exc.field, str(exc))
                status = 400
            else:
                form = TokenForm()
        else:
            status = 400
    return render(request, "accounts/tokens.html", {"tokens": tokens.tokens_of(request.user), "form": form,
                                                    "new_key": new_key}, status=status)


@role_required(Role.VIEWER)
@require_POST
def token_revoke(request, prefix: str):
    token = get_object_or_404(ApiToken, user=request.user, token_key__startswith=prefix, name=request.POST.get("name"))
    tokens.token_revoke(token=token, actor=request.user, via="ui")
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("accounts:tokens")
