"""API tokens: the one write path (create, revoke) and the one way to authenticate a key.

Every caller that authenticates ``Authorization: Token <key>`` goes through
``authenticate_key`` (the DRF class ``TokenAuthentication`` below, the playground's OpenAI
endpoint, any later CLI or proxy), so hashing, expiry and revocation are decided in one place."""

from __future__ import annotations

import re
from datetime import timedelta

from django.db import IntegrityError, transaction
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.crypto import hash_token
from knox.settings import CONSTANTS
from rest_framework import exceptions

from .models import ApiToken
from .signals import token_created, token_revoked

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


def authenticate_key(key: str):
    """The active user a token key belongs to, or None (unknown, revoked, expired, malformed
    key, or an inactive user). Expired tokens are deleted when presented."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        return None
    digest = hash_token(key)
    token = (ApiToken.objects.select_related("user")
             .filter(token_key=key[:CONSTANTS.TOKEN_KEY_LENGTH], digest=digest).first())
    if token is None:
        return None
    if token.expired:
        ApiToken.objects.filter(pk=token.pk).delete()
        return None
    if not token.user.is_active:
        return None
    return token.user


class TokenAuthentication(KnoxTokenAuthentication):
    """DRF authentication for ``Authorization: Token <key>`` through ``authenticate_key``."""

    def authenticate_credentials(self, token: bytes):
        try:
            key = token.decode("ascii")
        except UnicodeDecodeError:
            key = ""
        user = authenticate_key(key)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return user, None
