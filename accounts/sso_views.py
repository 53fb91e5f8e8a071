"""The sign-in and sign-out pages: the login page (local accounts and, when configured, single
sign-on), the two legs of the OpenID Connect authorization code flow, and sign-out (which also
ends the provider's session where the provider offers RP-initiated logout).

Every way a sign-in fails ends on a page that says what happened and leaves no session: a
provider that is down, refused client credentials, an ID token that fails a check, a callback
that was used already (its state is gone from the session once used), a person with no role."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from availability.waiting import waits_on

from . import idp, sso

log = logging.getLogger(__name__)
SESSION_BACKEND = "accounts.backends.SessionUserBackend"
# What each kind of failure is called on its page, and the status it is answered with.
FAILURES = {
    "unreachable": ("The identity provider cannot be reached", 502),
    "misconfigured": ("Single sign-on is misconfigured", 502),
    "client": ("The identity provider refused this control plane", 502),
    "code": ("This sign-in cannot be completed", 400),
    "token": ("The identity provider's answer was refused", 400),
    "denied": ("The identity provider did not sign you in", 403),
    "stale": ("This sign-in link has been used already or has expired", 400),
}


STALE = ("start again from the sign-in page (a sign-in link works once, in the browser that started it, for a "
         "few minutes)")


def _client(request) -> str:
    return request.META.get("REMOTE_ADDR", "")


def _failure(request, kind: str, message: str, *, record: bool = True):
    """The page of a failed sign-in; no session survives it. ``record``: an audit record too
    (not for a callback nobody started: anyone can send those, as often as they like)."""
    log.warning("single sign-on failed (%s): %s", kind, message)
    if record:
        sso.sso_failure_record(kind=kind, message=message, client=_client(request))
    auth.logout(request)  # flushes the session, signed in or not: no cookie survives a failure
    title, status = FAILURES[kind]
    return render(request, "registration/sso_failed.html", {"title": title, "message": message, "kind": kind},
                  status=status)


class SignInView(auth_views.LoginView):
    """Django's login page, with the single sign-on button. With local accounts switched off
    (OIDC_LOCAL_LOGIN=0) it goes straight to the provider, and refuses passwords."""

    def dispatch(self, request, *args, **kwargs):
        if not settings.OIDC_LOCAL_LOGIN:
            if request.method == "POST":
                return render(request, "registration/sso_failed.html", {
                    "title": "Local accounts are switched off",
                    "message": "Sign in with single sign-on. (Administrators on the server can still use manage.py.)",
                    "kind": "local"}, status=403)
            if settings.SSO is not None and not request.user.is_authenticated:
                url = reverse("accounts:sso-login")
                next_url = self.get_redirect_url()
                return HttpResponseRedirect(f"{url}?{urlencode({'next': next_url})}" if next_url else url)
        return super().dispatch(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "sso": settings.SSO is not None,
                "local_login": settings.OIDC_LOCAL_LOGIN}


def _config():
    if settings.SSO is None:
        raise Http404("Single sign-on is not configured.")
    return settings.SSO


@waits_on("the identity provider")
@require_GET
def sso_login(request):
    """Leg one: send the browser to the provider."""
    config = _config()
    try:
        provider = idp.discover(config)
    except idp.IdpError as exc:
        return _failure(request, exc.kind, str(exc))
    return idp.authorization_redirect(request, config=config, provider=provider)


@waits_on("the identity provider")
@require_GET
def sso_callback(request):
    """Leg two: the provider sends the browser back with a code (or an error)."""
    config = _config()
    states = request.session.get("oidc_states") or {}
    state = request.GET.get("state", "")
    entry = states.pop(state, None) if state else None
    if entry is not None:
        # Used once: a second visit to the same callback URL finds no state (a replay).
        request.session["oidc_states"] = states
        request.session.save()
    if entry is None:
        # Not a sign-in this browser started: nothing in the request comes from the provider,
        # so none of its text is shown or recorded (issue #42: an anonymous client wrote an
        # audit record of its own words per request through error_description).
        return _failure(request, "stale", STALE, record=False)
    if request.GET.get("error"):
        described = request.GET.get("error_description") or request.GET["error"]
        return _failure(request, "denied", f"the identity provider answered: {described[:300]}")
    if not request.GET.get("code"):
        return _failure(request, "stale", STALE)
    try:
        provider = idp.discover(config)
        # RFC 9207: a provider that names itself in the response must be the one we asked.
        if request.GET.get("iss") and request.GET["iss"] != provider.issuer:
            raise idp.IdpError("token", f"the answer came from {request.GET['iss']!r}, not {provider.issuer!r}")
        claims, id_token = idp.Client(config, provider).exchange(
            request, nonce=entry.get("nonce", ""), code_verifier=entry.get("code_verifier"))
    except idp.IdpError as exc:
        return _failure(request, exc.kind, str(exc))
    result = sso.sso_sign_in(config=config, claims=claims, client=_client(request))
    if result.user is None:
        auth.logout(request)
        return render(request, "registration/sso_refused.html", {"result": result}, status=403)
    next_url = request.session.get("oidc_login_next") or ""
    result.user._sso_sign_in = True  # audit/receivers.py: the sso_signed_in record stands for auth.login
    auth.login(request, result.user, backend=SESSION_BACKEND)
    request.session.set_expiry(config.session_seconds)
    request.session["oidc_id_token"] = id_token
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        next_url = resolve_url(settings.LOGIN_REDIRECT_URL)
    return HttpResponseRedirect(next_url)


@waits_on("the identity provider")  # its end-session endpoint
@require_POST
def sign_out(request):
    """End our session; for a single sign-on session also the provider's, where its discovery
    document offers an end_session_endpoint. The provider's logout page is reached through a
    page of ours rather than a redirect: the CSP's form-action allows our origin only, and
    browsers apply it to the redirects that follow a form's POST."""
    id_token = request.session.get("oidc_id_token", "")
    auth.logout(request)
    login_url = resolve_url(settings.LOGOUT_REDIRECT_URL)
    config = settings.SSO
    if not id_token or config is None:
        return HttpResponseRedirect(login_url)
    try:
        provider = idp.discover(config)
    except idp.IdpError:
        provider = None
    url = provider and idp.logout_url(provider, id_token=id_token, client_id=config.client_id,
                                      post_logout_redirect_uri=request.build_absolute_uri(login_url))
    if not url:
        return HttpResponseRedirect(login_url)
    return render(request, "registration/signed_out.html", {"idp_logout_url": url, "login_url": login_url})
