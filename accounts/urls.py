from django.urls import path

from . import sso_views, views

app_name = "accounts"

urlpatterns = [
    path("account/tokens/", views.token_list, name="tokens"),
    path("account/tokens/cli/", views.token_for_cli, name="token-cli"),
    path("account/tokens/<slug:prefix>/revoke/", views.token_revoke, name="revoke"),
    # Single sign-on (OpenID Connect): the callback is what the identity provider registers.
    path("auth/oidc/login/", sso_views.sso_login, name="sso-login"),
    path("auth/oidc/callback/", sso_views.sso_callback, name="sso-callback"),
]
