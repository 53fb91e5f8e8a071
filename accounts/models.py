"""API tokens: hashed (SHA-512, django-rest-knox), expiring, named by their owner."""

from __future__ import annotations

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
