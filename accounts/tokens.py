"""API tokens: the one write path (create, revoke) and the one way to authenticate a key.

Every caller that authenticates ``Authorization: Token <key>`` goes through
``authenticate_key`` (the DRF class ``TokenAuthentication`` below, the playground's OpenAI
endpoint, any later CLI or proxy), so hashing, expiry and revocation are decided in one place."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.crypto import hash_token
from knox.settings import CONSTANTS
from rest_framework import exceptions

from .models import ApiToken, OidcIdentity
from .signals import token_created, token_revoked
from .sso_config import DEFAULT_TOKEN_SIGN_IN_DAYS

DEFAULT_DAYS = 90
MAX_DAYS = 365
MAX_TOKENS_PER_USER = 50
# knox's keys: 64 hex characters. Anything else is refused before any lookup.
_KEY = re.compile(r"[0-9a-f]{64}")


class TokenError(ValueError):
    """A token request that cannot be honoured: ``field`` names what is wrong."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


class TokenNameTaken(TokenError):
    """The user has a token of that name already (the API answers 409)."""


def token_create(*, user, name: str, days: int | None = DEFAULT_DAYS, actor=None,
                 via: str = "ui") -> tuple[ApiToken, str]:
    """A new token for ``user``; returns (token, key). The key is shown once and never stored:
    only its digest is. ``days`` None makes a token that never expires (the CLI's choice only)."""
    name = name.strip()
    if not name:
        raise TokenError("name", "give the token a name (what or who uses it)")
    if len(name) > 100:
        raise TokenError("name", "at most 100 characters")
    if days is not None and not 1 <= days <= MAX_DAYS:
        raise TokenError("days", f"between 1 and {MAX_DAYS} days")
    if ApiToken.objects.filter(user=user).count() >= MAX_TOKENS_PER_USER:
        raise TokenError("name", f"{user.username} has {MAX_TOKENS_PER_USER} tokens already: revoke some first")
    try:
        with transaction.atomic():
            token, key = ApiToken.objects.create(user=user, name=name,
                                                 expiry=timedelta(days=days) if days is not None else None)
            token_created.send(sender=ApiToken, token=token, actor=actor or user, via=via)
    except IntegrityError:
        raise TokenNameTaken("name", f"{user.username} already has a token named {name!r}") from None
    return token, key


@transaction.atomic
def token_revoke(*, token: ApiToken, actor=None, via: str = "ui") -> None:
    token_revoked.send(sender=ApiToken, token=token, actor=actor, via=via)
    ApiToken.objects.filter(pk=token.pk).delete()


def tokens_of(user):
    return ApiToken.objects.filter(user=user).order_by("-created")


def sign_in_days() -> int:
    sso = getattr(settings, "SSO", None)
    return sso.token_sign_in_days if sso is not None else DEFAULT_TOKEN_SIGN_IN_DAYS


def tokens_lapse(user) -> datetime | None:
    """When the API tokens of ``user`` stop acting unless they sign in again: for a person who
    signs in with single sign-on, OIDC_TOKEN_SIGN_IN_DAYS after their last sign-in (an
    offboarded person never signs in again). None: a local account, or the rule is off."""
    days = sign_in_days()
    if not days:
        return None
    try:
        identity = user.oidc_identity
    except OidcIdentity.DoesNotExist:
        return None
    return (identity.last_sign_in or timezone.now() - timedelta(days=days + 1)) + timedelta(days=days)


def key_owner(key: str):
    """(the active user a token key belongs to, or None; why not, a sentence when it is worth
    telling the caller)."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        return None, ""
    digest = hash_token(key)
    token = (ApiToken.objects.select_related("user", "user__oidc_identity")
             .filter(token_key=key[:CONSTANTS.TOKEN_KEY_LENGTH], digest=digest).first())
    if token is None:
        return None, ""
    if token.expired:
        ApiToken.objects.filter(pk=token.pk).delete()
        return None, ""
    if not token.user.is_active:
        return None, ""
    lapse = tokens_lapse(token.user)
    if lapse is not None and lapse <= timezone.now():
        return None, (f"the token's owner has not signed in with single sign-on for {sign_in_days()} days: "
                      "their tokens act again once they sign in")
    return token.user, ""


def authenticate_key(key: str):
    """The active user a token key belongs to, or None (unknown, revoked, expired, malformed
    key, an inactive user, or a single-sign-on user who has not signed in for
    OIDC_TOKEN_SIGN_IN_DAYS). Expired tokens are deleted when presented."""
    return key_owner(key)[0]


class TokenAuthentication(KnoxTokenAuthentication):
    """DRF authentication for ``Authorization: Token <key>`` through ``authenticate_key``."""

    def authenticate_credentials(self, token: bytes):
        try:
            key = token.decode("ascii")
        except UnicodeDecodeError:
            key = ""
        user, why = key_owner(key)
        if user is None:
            raise exceptions.AuthenticationFailed(f"Invalid, expired or revoked token{': ' + why if why else ''}.")
        return user, None
