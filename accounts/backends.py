"""Who a signed-in session belongs to, remembered by each web process for a few seconds.

Every page and API call made with a session cookie loads its user (Django's ModelBackend:
one query) and, for a user who is not a superuser, their groups (another) to find the role.
This backend keeps both per process for ``SESSION_USER_TTL`` seconds (5), as the OpenAI
endpoint keeps a caller's admission. A change to a user (password, active flag, superuser),
to their groups or to a group is seen at once by the process that made it (the signals below)
and within the TTL by the others. Django still checks every request's session against the
user's password hash, so a password change ends the other sessions (in another process, once
its copy of the user is older than the TTL).

Each request gets its own copy of the user: nothing one request sets on it reaches another."""

from __future__ import annotations

import copy
import threading
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from .roles import user_role

MAX_USERS = 1024
_users: dict = {}  # user id -> (monotonic deadline, the user with its role worked out)
_lock = threading.Lock()


def _ttl() -> float:
    return float(getattr(settings, "SESSION_USER_TTL", 5))


class SessionUserBackend(ModelBackend):
    """ModelBackend whose ``get_user`` (the session's user, on every request) is cached.
    Passwords are checked only while local accounts are on (OIDC_LOCAL_LOGIN): off, every
    password sign-in (the login page, the admin's) fails, and only manage.py reaches users."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not getattr(settings, "OIDC_LOCAL_LOGIN", True):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_user(self, user_id):
        now = time.monotonic()
        found = _users.get(user_id)
        if found is None or found[0] <= now:
            user = super().get_user(user_id)
            if user is None or _ttl() <= 0:
                return user
            user_role(user)  # remembered on the instance, and so on every copy of it
            with _lock:
                if len(_users) >= MAX_USERS:
                    _users.clear()
                _users[user_id] = found = (now + _ttl(), user)
        return copy.copy(found[1])


def forget(user_id=None) -> None:
    """Drop one user (or every user) from this process's memory."""
    with _lock:
        if user_id is None:
            _users.clear()
        else:
            _users.pop(user_id, None)


@receiver(post_save, sender=get_user_model())
@receiver(post_delete, sender=get_user_model())
def _user_changed(sender, instance, **kwargs):
    forget(instance.pk)


@receiver(m2m_changed, sender=get_user_model().groups.through)
def _groups_changed(sender, instance, reverse, **kwargs):
    forget(None if reverse else instance.pk)  # reverse: a group's members changed


@receiver(post_save, sender=Group)
@receiver(post_delete, sender=Group)
def _group_changed(sender, **kwargs):
    forget()
