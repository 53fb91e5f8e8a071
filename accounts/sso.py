"""Single sign-on: the one write path from an identity provider's verified claims to a user of
ours with a role. Every sign-in sets the role anew from the groups the provider sends (the
highest mapped group wins), so a group taken away in the provider is a role taken away here at
the person's next sign-in, and with it what their API tokens may do (tokens act with their
owner's role: accounts/roles.py). A person whose groups map to no role is refused, and keeps
no role; nobody gets a role by default. Every sign-in, refusal and failure is told by signal
(accounts/signals.py), and the audit log records them, as it records every change of a user's
groups (audit/receivers.py)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import OidcIdentity
from .roles import ROLE_GROUPS
from .signals import sso_failed, sso_refused, sso_signed_in
from .sso_config import SsoConfig

# Django's username rule (UnicodeUsernameValidator): letters, digits and @ . + - _
_USERNAME = re.compile(r"^[\w.@+-]{1,150}$")


@dataclass
class SignIn:
    """What came of a sign-in: a ``user`` with a ``role``, or a ``refusal`` (a sentence)."""

    user: object | None
    role: str | None
    groups: list[str] = field(default_factory=list)
    refusal: str = ""
    username: str = ""


MAX_GROUPS = 200  # group names kept of one claim (the ones mapped to a role always are)
MAX_GROUP_NAME = 150  # django.contrib.auth's Group.name
SUBJECT_MAX = 255  # OidcIdentity.subject


def _printable(text: str) -> bool:
    return not any(unicodedata.category(c) == "Cc" for c in text)


def groups_from_claims(claims: dict, claim: str, mapped: frozenset[str] = frozenset()) -> list[str]:
    """The provider's groups as a sorted list of names. Providers send a list of strings, and a
    few a single string; anything else (numbers, objects, names with control characters or
    longer than a group name can be) is not a group name. A claim of thousands is cut to
    MAX_GROUPS names, keeping every one in ``mapped`` (those that give a role)."""
    value = claims.get(claim)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    names = sorted({item for item in value[:100_000] if isinstance(item, str) and item
                    and len(item) <= MAX_GROUP_NAME and _printable(item)})
    if len(names) <= MAX_GROUPS:
        return names
    keep = [n for n in names if n in mapped]
    return sorted(keep + [n for n in names if n not in mapped][:max(0, MAX_GROUPS - len(keep))])


def username_from_claims(claims: dict, names: tuple[str, ...]) -> str:
    """The first usable claim, in NFKC as Django stores user names (AbstractBaseUser.normalize_username):
    checked as it will be stored, so that a full-width "admin" is admin and the ligature "fi" + "le" is file."""
    for name in names:
        value = claims.get(name)
        if isinstance(value, str) and value.strip() and _printable(value):
            return unicodedata.normalize("NFKC", value).strip()
    return ""


def _current_role(user) -> str | None:
    held = set(user.groups.filter(name__in=ROLE_GROUPS).values_list("name", flat=True))
    return max(held, key=lambda name: ROLE_GROUPS[name], default=None)


def _set_role(user, role: str | None) -> None:
    """Exactly ``role`` of the role groups (none for None); groups that are not roles stay."""
    keep = [g for g in user.groups.all() if g.name not in ROLE_GROUPS]
    if role is not None:
        keep.append(Group.objects.get_or_create(name=role)[0])
    user.groups.set(keep)


def sso_sign_in(*, config: SsoConfig, claims: dict, client: str = "") -> SignIn:
    """The user the verified ``claims`` sign in as, their role set from their groups, or the
    refusal to show. ``client`` (the browser's address) goes into the audit record."""
    groups = groups_from_claims(claims, config.groups_claim,
                                mapped=frozenset().union(*config.role_groups.values()))
    username = username_from_claims(claims, config.username_claims)
    role = config.role_for(groups)
    issuer, subject = str(claims["iss"]), str(claims["sub"])
    unusable = not _printable(issuer + subject) or len(subject) > SUBJECT_MAX
    if unusable:  # kept only for the record of the refusal, escaped: nothing with a NUL is stored
        issuer, subject = (v.encode("unicode_escape").decode()[:SUBJECT_MAX] for v in (issuer, subject))
    who = username or subject
    sent = ", ".join(groups) or "no groups"

    def refuse(reason: str, user=None) -> SignIn:
        sso_refused.send(sender="sso", user=user, who=who, reason=reason, groups=groups, issuer=issuer,
                         subject=subject, client=client)
        return SignIn(user=None, role=None, groups=groups, refusal=reason, username=who)

    if unusable:
        # What PostgreSQL cannot store (NUL) or a column cannot hold: refused on the failure page.
        return refuse("the identity provider sent a subject (sub) with control characters or over "
                      f"{SUBJECT_MAX} characters")
    with transaction.atomic():
        identity = (OidcIdentity.objects.select_for_update().select_related("user")
                    .filter(issuer=issuer, subject=subject).first())
        user = identity.user if identity else None
        if user is not None and not user.is_active:
            return refuse(f"the account {user.username} is deactivated here", user)
        if role is None:
            reason = f"none of your groups ({sent}) is mapped to a role in this control plane"
            if user is not None and _current_role(user) is not None:
                _set_role(user, None)  # the role the provider took away goes now, tokens' with it
            return refuse(reason, user)
        if user is None:
            if not _USERNAME.match(username):
                return refuse(f"the identity provider sent no usable user name (claims "
                              f"{', '.join(config.username_claims)}: letters, digits and @ . + - _ only)")
            user_model = get_user_model()
            if user_model.objects.filter(username=username).exists():
                return refuse(f"a local account named {username} exists already: an administrator must rename "
                              f"or delete it before {username} can sign in with single sign-on")
            try:
                with transaction.atomic():
                    user = user_model.objects.create_user(username=username,
                                                          email=_email(claims))
            except IntegrityError:  # two first sign-ins of one name at once: one wins
                return refuse(f"another account named {username} was made at the same moment: sign in again")
            identity = OidcIdentity(user=user, issuer=issuer, subject=subject)
        before = _current_role(user)
        if before != role:
            _set_role(user, role)
        identity.groups = groups
        identity.last_sign_in = timezone.now()
        identity.save()
        sso_signed_in.send(sender="sso", user=user, before=before, role=role, groups=groups, client=client)
    return SignIn(user=user, role=role, groups=groups, username=user.username)


def _email(claims: dict) -> str:
    email = str(claims.get("email") or "")
    return email[:254] if _printable(email) else ""


def sso_failure_record(*, kind: str, message: str, client: str = "") -> None:
    """A sign-in that failed before anyone was known (the provider down, a bad token)."""
    sso_failed.send(sender="sso", kind=kind, message=message, client=client)
