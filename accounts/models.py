"""API tokens (hashed with SHA-512 by django-rest-knox, expiring, named by their owner) and the
identity-provider accounts people sign in with."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from knox.models import AbstractAuthToken


class ApiToken(AbstractAuthToken):
    """One API token of one user. Only a digest of the key is stored (knox); ``token_key`` is
    the key's first characters, enough to tell tokens apart in a list, useless to authenticate.
    Revoking deletes the row; an expired token is refused and removed when next presented."""

    name = models.CharField(max_length=100)

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="api_token_name_per_user")]

    def __str__(self) -> str:
        return f"{self.user} / {self.name}"

    @property
    def prefix(self) -> str:
        return self.token_key[:8]

    @property
    def expired(self) -> bool:
        return self.expiry is not None and self.expiry <= timezone.now()


class OidcIdentity(models.Model):
    """The identity-provider account a user signs in with: the ID token's (issuer, subject),
    which OpenID Connect guarantees stable and unique, unlike names or email addresses. A user
    without one is a local account; SSO never signs in as a local account of the same name."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # What the provider sent at the last sign-in, shown to admins and kept for the audit.
    groups = models.JSONField(default=list, blank=True)
    last_sign_in = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_per_subject")]

    def __str__(self) -> str:
        return f"{self.user} ({self.issuer} {self.subject})"
