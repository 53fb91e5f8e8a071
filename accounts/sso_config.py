"""Single sign-on (OpenID Connect) configuration, read from the environment, and the rule that
turns the groups an identity provider sends into one of our roles. Pure: settings.py calls
``sso_config`` before Django is set up, and the tests call both functions directly."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_SCOPES = "openid email profile groups"
DEFAULT_USERNAME_CLAIMS = ("preferred_username", "email")
# A signed-in SSO session lasts this long, then the person signs in again: the next sign-in
# is when a role taken away in the identity provider is taken away here.
DEFAULT_SESSION_SECONDS = 8 * 3600
# The API tokens of a person who signs in with SSO act only while they have signed in within
# this many days: someone offboarded in the identity provider never signs in again, and their
# tokens stop with it, instead of keeping their role for up to a year (Rancher CVE-2026-44946).
DEFAULT_TOKEN_SIGN_IN_DAYS = 30
# Highest first: a person in groups mapped to several roles gets the highest.
ROLE_ORDER = ("admin", "operator", "viewer")


class SsoConfigError(ValueError):
    """A setting that cannot be used: names the variable and what is wrong with it."""


@dataclass(frozen=True)
class SsoConfig:
    issuer: str  # the issuer URL exactly as the provider's discovery document states it
    client_id: str
    client_secret: str
    scopes: str
    groups_claim: str
    username_claims: tuple[str, ...]
    role_groups: dict[str, frozenset[str]]  # role name -> the IdP groups that grant it
    session_seconds: int
    timeout: float  # seconds for each call to the provider
    token_sign_in_days: int = DEFAULT_TOKEN_SIGN_IN_DAYS  # 0: tokens do not depend on sign-ins

    def role_for(self, groups: Iterable[str]) -> str | None:
        return role_for_groups(groups, self.role_groups)


def role_for_groups(groups: Iterable[str], role_groups: dict[str, frozenset[str]]) -> str | None:
    """The highest role any of ``groups`` is mapped to, or None (the person is refused: no
    role is ever given by default). Group names compare exactly, as IdPs send them."""
    held = set(groups)
    for role in ROLE_ORDER:
        if held & role_groups.get(role, frozenset()):
            return role
    return None


def _names(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def sso_config(env: Callable[[str, str], str]) -> SsoConfig | None:
    """The SSO configuration, or None when OIDC_ISSUER_URL is unset (local accounts only).
    ``env(name, default)`` reads a variable, or the file its ``_FILE`` variant names."""
    issuer = env("OIDC_ISSUER_URL", "").strip()
    if not issuer:
        return None
    parts = urlsplit(issuer)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.query or parts.fragment:
        raise SsoConfigError(f"OIDC_ISSUER_URL must be the issuer's URL, like https://idp.example.com/realms/x, "
                             f"not {issuer!r}")
    client_id = env("OIDC_CLIENT_ID", "").strip()
    if not client_id:
        raise SsoConfigError("OIDC_CLIENT_ID is required when OIDC_ISSUER_URL is set")
    client_secret = env("OIDC_CLIENT_SECRET", "").strip()
    if not client_secret:
        raise SsoConfigError("OIDC_CLIENT_SECRET (or OIDC_CLIENT_SECRET_FILE) is required when OIDC_ISSUER_URL is set")
    scopes = " ".join(env("OIDC_SCOPES", DEFAULT_SCOPES).replace(",", " ").split())
    if "openid" not in scopes.split():
        raise SsoConfigError(f"OIDC_SCOPES must include openid, not {scopes!r}")
    username_claims = tuple(c for c in (part.strip() for part in env("OIDC_USERNAME_CLAIM", "").split(",")) if c)
    role_groups = {"admin": _names(env("OIDC_ADMIN_GROUPS", "")), "operator": _names(env("OIDC_OPERATOR_GROUPS", "")),
                   "viewer": _names(env("OIDC_VIEWER_GROUPS", ""))}
    if not any(role_groups.values()):
        raise SsoConfigError("map at least one IdP group to a role: OIDC_ADMIN_GROUPS, OIDC_OPERATOR_GROUPS or "
                             "OIDC_VIEWER_GROUPS (comma-separated group names)")
    return SsoConfig(
        issuer=issuer,
        client_id=client_id,
        client_secret=client_secret,
        scopes=scopes,
        groups_claim=env("OIDC_GROUPS_CLAIM", "groups").strip() or "groups",
        username_claims=username_claims or DEFAULT_USERNAME_CLAIMS,
        role_groups=role_groups,
        session_seconds=_positive_int(env, "OIDC_SESSION_SECONDS", DEFAULT_SESSION_SECONDS),
        timeout=float(_positive_int(env, "OIDC_TIMEOUT_SECONDS", 10)),
        token_sign_in_days=_whole_days(env, "OIDC_TOKEN_SIGN_IN_DAYS", DEFAULT_TOKEN_SIGN_IN_DAYS),
    )


def sso_settings(env: Callable[[str, str], str], env_bool: Callable[[str, bool], bool]) -> tuple:
    """settings.py's SSO (the configuration, or None), OIDC_LOCAL_LOGIN and OIDC_VERIFY_SSL.

    OIDC_ISSUER_URL turns single sign-on on; then OIDC_CLIENT_ID, OIDC_CLIENT_SECRET (or
    OIDC_CLIENT_SECRET_FILE) and at least one of OIDC_ADMIN_GROUPS, OIDC_OPERATOR_GROUPS and
    OIDC_VIEWER_GROUPS are required. Local accounts stay the break-glass way in; OIDC_LOCAL_LOGIN=0
    switches them off for the web (manage.py on the server still manages users and makes tokens),
    and needs single sign-on, or nobody could sign in."""
    config = sso_config(env)
    local_login = env_bool("OIDC_LOCAL_LOGIN", True)
    if config is None and not local_login:
        raise SsoConfigError("OIDC_LOCAL_LOGIN=0 needs single sign-on (OIDC_ISSUER_URL): otherwise nobody can sign in")
    return config, local_login, env_bool("OIDC_VERIFY_SSL", True)


def _whole_number(env: Callable[[str, str], str], name: str, default: int, *, unit: str, minimum: int,
                  maximum: int | None = None, words: str = "") -> int:
    """A whole number of ``unit`` from the environment, within bounds, or SsoConfigError naming it."""
    raw = env(name, str(default)).strip()
    try:
        value = int(raw)
    except ValueError:
        raise SsoConfigError(f"{name} must be a whole number of {unit}, not {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        raise SsoConfigError(f"{name} must be {words or f'at least {minimum}'}, not {value}")
    return value


def _positive_int(env: Callable[[str, str], str], name: str, default: int) -> int:
    return _whole_number(env, name, default, unit="seconds", minimum=1, words="more than 0")


def _whole_days(env: Callable[[str, str], str], name: str, default: int) -> int:
    return _whole_number(env, name, default, unit="days", minimum=0, maximum=3650,
                         words="between 0 (off) and 3650 days")
