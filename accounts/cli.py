"""What the management-command CLIs share."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError


def acting_user(username: str | None):
    """The user a CLI call acts as (``--user``), recorded on operations and in the audit log;
    None when no name is given. A name that matches no user is refused."""
    if not username:
        return None
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"no user named {username!r}")
    return user
