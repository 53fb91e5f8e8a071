"""The audit of who signs in, who fails to, and whose role changes (group membership,
superuser and active flags), whichever way it happens (the login page, the admin, a shell)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.db.models.signals import m2m_changed, post_save, pre_save
from django.dispatch import receiver

from audit.services import audit_record

User = get_user_model()


def _client(request) -> str:
    return request.META.get("REMOTE_ADDR", "") if request is not None else ""


@receiver(user_logged_in)
def _logged_in(sender, request, user, **kwargs):
    if getattr(user, "_sso_sign_in", False):
        return  # accounts/sso.py recorded it, with the role and the provider's groups
    audit_record(actor=user, via="ui", action="auth.login", target_type="user", target=user.username,
                 message=f"from {_client(request)}")


@receiver(user_login_failed)
def _login_failed(sender, credentials, request=None, **kwargs):
    # The username as typed (credentials never include the password here: Django cleans it).
    username = str(credentials.get("username", ""))[:150].replace("\x00", "")
    audit_record(via="ui", action="auth.login_failed", target_type="user", target=username,
                 message=f"from {_client(request)}")


@receiver(m2m_changed, sender=User.groups.through)
def _groups_changed(sender, instance, action, pk_set, reverse, **kwargs):
    if action not in ("post_add", "post_remove", "post_clear") or reverse:
        return
    from django.contrib.auth.models import Group

    names = sorted(Group.objects.filter(pk__in=pk_set or []).values_list("name", flat=True))
    verb = {"post_add": "added", "post_remove": "removed", "post_clear": "cleared"}[action]
    audit_record(via="system", action="user.roles", target_type="user", target=instance.username,
                 after={"groups": sorted(instance.groups.values_list("name", flat=True))},
                 message=f"groups {verb}: {', '.join(names) or '(all)'}")


@receiver(pre_save, sender=User)
def _remember_flags(sender, instance, **kwargs):
    old = User.objects.filter(pk=instance.pk).values("is_superuser", "is_active").first() if instance.pk else None
    instance._audit_flags = old


@receiver(post_save, sender=User)
def _flags_changed(sender, instance, created, **kwargs):
    old = getattr(instance, "_audit_flags", None)
    new = {"is_superuser": instance.is_superuser, "is_active": instance.is_active}
    if created:
        if instance.is_superuser:
            audit_record(via="system", action="user.roles", target_type="user", target=instance.username,
                         after=new, message="created as a superuser")
        return
    if old is not None and old != new:
        audit_record(via="system", action="user.roles", target_type="user", target=instance.username,
                     before=old, after=new, message="superuser or active flag changed")
