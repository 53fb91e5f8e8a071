"""The audit of who signs in, who fails to, whose role changes (group membership, superuser and
active flags), whichever way it happens (the login page, the admin, a shell), and of API tokens
made and revoked, and of single sign-ons, refused and failed ones included (accounts.signals)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.db.models.signals import m2m_changed, post_save, pre_save
from django.dispatch import receiver

from accounts.models import ApiToken
from accounts.signals import sso_failed, sso_refused, sso_signed_in, token_created, token_revoked

from .services import audit_record

User = get_user_model()


def _client(request) -> str:
    return request.META.get("REMOTE_ADDR", "") if request is not None else ""


@receiver(user_logged_in)
def _logged_in(sender, request, user, **kwargs):
    if getattr(user, "_sso_sign_in", False):
        return  # a single sign-on: _sso_signed_in below records it, with the role and the groups
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


@receiver(token_created, sender=ApiToken)
def _token_created(sender, token, actor, via, **kwargs):
    audit_record(actor=actor, via=via, action="token.create", target_type="user", target=token.user.username,
                 after={"name": token.name, "prefix": token.prefix,
                        "expiry": token.expiry.isoformat() if token.expiry else None})


@receiver(token_revoked, sender=ApiToken)
def _token_revoked(sender, token, actor, via, **kwargs):
    audit_record(actor=actor, via=via, action="token.revoke", target_type="user", target=token.user.username,
                 before={"name": token.name, "prefix": token.prefix})


def _from(client: str, text: str = "") -> str:
    return f"{text} (from {client})" if text and client else (f"from {client}" if client else text)


@receiver(sso_signed_in)
def _sso_signed_in(sender, user, before, role, groups, client, **kwargs):
    audit_record(actor=user, via="ui", action="auth.sso_login", target_type="user", target=user.username,
                 before={"role": before}, after={"role": role, "groups": groups}, message=_from(client))


@receiver(sso_refused)
def _sso_refused(sender, user, who, reason, groups, issuer, subject, client, **kwargs):
    audit_record(actor=user, via="ui", action="auth.sso_refused", target_type="user", target=who,
                 after={"groups": groups, "issuer": issuer, "subject": subject}, message=_from(client, reason))


@receiver(sso_failed)
def _sso_failed(sender, kind, message, client, **kwargs):
    audit_record(via="ui", action="auth.sso_failed", target_type="user", target="", after={"kind": kind},
                 message=_from(client, message))
