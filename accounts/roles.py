"""The role matrix, enforced identically by HTML views and the API.

viewer   reads everything.
operator edits graphs, applies, scales and deletes them.
admin    also manages users, clusters and secrets.

A signed-in user with none of these roles gets nothing (default deny). Roles are Django
groups named after the role; superusers are admins."""

from __future__ import annotations

import enum
from functools import wraps
from typing import TYPE_CHECKING, TypeAlias

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    # Who acts: a signed-in user, the anonymous user of a request, or None (a script, a task).
    Actor: TypeAlias = AbstractBaseUser | AnonymousUser | None


class Role(enum.IntEnum):
    NONE = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3


ROLE_GROUPS = {"viewer": Role.VIEWER, "operator": Role.OPERATOR, "admin": Role.ADMIN}
# Who acts in a call made on the server without a user (manage.py create_token), as the audit log names it.
SERVER_ADMIN = "server administrator (CLI without --user)"


def user_role(user: Actor) -> Role:
    if not user or not user.is_authenticated or not user.is_active:
        return Role.NONE
    if user.is_superuser:
        return Role.ADMIN
    cached = getattr(user, "_controlplane_role", None)
    if cached is not None:
        return cached
    names = set(user.groups.values_list("name", flat=True))
    role = max((ROLE_GROUPS[n] for n in names if n in ROLE_GROUPS), default=Role.NONE)
    user._controlplane_role = role
    return role


def role_required(minimum: Role):
    """Decorator for HTML views: login first, then the role."""

    def decorator(view):
        @wraps(view)
        @login_required
        def wrapped(request, *args, **kwargs):
            if user_role(request.user) < minimum:
                raise PermissionDenied(f"This needs the {minimum.name.lower()} role.")
            return view(request, *args, **kwargs)

        wrapped.required_role = minimum
        return wrapped

    return decorator


class RolePermission(BasePermission):
    """DRF: reads need viewer, writes need operator, unless the view says otherwise with
    ``required_roles = {"action_name": Role.ADMIN}``."""

    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        role = user_role(request.user)
        action = getattr(view, "action", None)
        overrides = getattr(view, "required_roles", {})
        if action in overrides:
            needed = overrides[action]
        elif request.method in SAFE_METHODS:
            needed = Role.VIEWER
        else:
            needed = Role.OPERATOR
        if role >= needed:
            return True
        # DRF answers 403 with this message: say which role the request needs, and which one it has.
        self.message = (f"This needs the {needed.name.lower()} role"
                        + (f"; you have the {role.name.lower()} role." if role > Role.NONE else "."))
        return False


def role_context(request):
    role = user_role(getattr(request, "user", None))
    return {
        "user_role": role.name.lower(),
        "can_operate": role >= Role.OPERATOR,
        "is_admin": role >= Role.ADMIN,
    }
