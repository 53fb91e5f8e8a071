"""What the management-command CLIs share: who a call acts as, and whether that one may.

``--user NAME`` acts as that user, with that user's role, exactly as in the UI and the API: a
viewer reads, an operator also changes graphs and runs benchmarks, a user without a role (or
an inactive one) can do nothing. Without ``--user``, the CLI acts as the server administrator:
whoever can run manage.py on the server already holds its database credentials. Such calls are
recorded in the audit log as ``SERVER_ADMIN``."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from .roles import SERVER_ADMIN, Role, user_role

__all__ = ["SERVER_ADMIN", "acting_user"]


def acting_user(username: str | None, *, needs: Role = Role.VIEWER, action: str = "this"):
    """The user a CLI call acts as (``--user``), recorded on operations and in the audit log, or
    None for the server administrator. Raises CommandError for an unknown user or a role short
    of ``needs`` (naming both), before anything is read or changed."""
    if not username:
        return None
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"no user named {username!r}")
    role = user_role(user)
    if role < needs:
        has = "no role" if role == Role.NONE else f"the {role.name.lower()} role"
        inactive = " (the account is inactive)" if not user.is_active else ""
        raise CommandError(f"{username} has {has}{inactive}; {action} needs the {needs.name.lower()} role")
    return user
