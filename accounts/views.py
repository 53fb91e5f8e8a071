"""The API tokens page: a signed-in user lists, creates and revokes their own tokens, and makes
one for ``dynamo-cp login``."""

from __future__ import annotations

import re

from csp.decorators import csp_update
from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
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
                                                    "new_key": new_key, "lapse": tokens.tokens_lapse(request.user),
                                                    "lapse_days": tokens.sign_in_days()}, status=status)


@role_required(Role.VIEWER)
@require_POST
def token_revoke(request, prefix: str):
    token = get_object_or_404(ApiToken, user=request.user, token_key__startswith=prefix, name=request.POST.get("name"))
    tokens.token_revoke(token=token, actor=request.user, via="ui")
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("accounts:tokens")


# `dynamo-cp login` (dynamo_cp/login.py) listens on a loopback port for the token it asked for.
_CLI_STATE = re.compile(r"[A-Za-z0-9_-]{32,128}")


class CliTokenForm(forms.Form):
    port = forms.IntegerField(min_value=1024, max_value=65535)
    state = forms.RegexField(regex=_CLI_STATE)
    name = forms.CharField(max_length=60, required=False)


@role_required(Role.VIEWER)
@require_http_methods(["GET", "HEAD", "POST"])
@csp_update({"form-action": ["http://127.0.0.1:*"]})  # the hand-over form posts to dynamo-cp on loopback
def token_for_cli(request):
    """A token for ``dynamo-cp login``: the person confirms, we make a token of theirs (acting
    with their role, as any of their tokens) and hand it to the CLI's loopback listener in a
    form POST, so the key is never in a URL or the browser's history."""
    form = CliTokenForm(request.POST if request.method == "POST" else request.GET)
    if not form.is_valid():
        return render(request, "accounts/token_cli.html", {"form": form, "invalid": True}, status=400)
    label = (form.cleaned_data["name"] or "dynamo-cp").strip()
    if request.method != "POST":
        return render(request, "accounts/token_cli.html", {"form": form, "label": label})
    name = f"dynamo-cp login {label} {timezone.now():%Y-%m-%d %H:%M:%S}"
    try:
        _token, key = tokens.token_create(user=request.user, name=name[:100], days=tokens.DEFAULT_DAYS, via="ui")
    except tokens.TokenError as exc:
        return render(request, "accounts/token_cli.html", {"form": form, "label": label, "error": str(exc)},
                      status=400)
    return render(request, "accounts/token_cli_send.html", {
        "action": f"http://127.0.0.1:{form.cleaned_data['port']}/", "state": form.cleaned_data["state"], "key": key,
        "name": name})
