"""Reading the environment for settings.py: every variable may also come from a file named by
``<NAME>_FILE`` (Kubernetes secrets mounted as files), and the installation's own secret key
is made once under var/. Nothing here imports Django."""

import os
from pathlib import Path


def env(name: str, default: str = "") -> str:
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        return Path(file_name).read_text().strip()
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    value = env(name, "1" if default else "0").lower()
    return value in {"1", "true", "yes", "on"}


def sso_env() -> tuple:
    """(SSO, OIDC_LOCAL_LOGIN, OIDC_VERIFY_SSL): single sign-on's settings, which
    accounts/sso_config.py reads from the OIDC_* variables and checks."""
    from accounts.sso_config import sso_settings as read

    return read(env, env_bool)


def installation_secret_key(var_dir: Path) -> str:
    """The key of this installation: made once, on first start, in var/secret_key (mode 0600),
    and read from there ever after, so sessions survive restarts and no two installations share
    a key. Every process started by ``up`` reads the same file; O_EXCL settles a race."""
    path = var_dir / "secret_key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if len(key) < 50:
            raise RuntimeError(f"{path} holds no usable secret key: delete it to make a new one") from None
        return key
    import secrets

    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def caches_from_url(url: str) -> dict:
    """CACHES: the default one CACHE_URL names, and ``fragments``, the rendered HTML each process
    remembers (graphs/fragments.py: memos of pure renderings, never shared state)."""
    return {"default": cache_from_url(url),
            "fragments": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "fragments",
                          "OPTIONS": {"MAX_ENTRIES": 2000}}}


def session_engine(url: str) -> str:
    """Sessions from a shared cache, written through to the database (a query less per page);
    with the per-process default cache, from the database: a logout must end a session in every
    process."""
    return "django.contrib.sessions.backends.cached_db" if url else "django.contrib.sessions.backends.db"


def cache_from_url(url: str) -> dict:
    """The Django cache a CACHE_URL names: file:///path (the processes of one host),
    redis://... (production), or, when empty, one cache per process."""
    if url.startswith("file://"):
        return {"BACKEND": "controlplane.filecache.LockedFileBasedCache", "LOCATION": url.removeprefix("file://")}
    if url:
        # Bounded: a Redis that hangs (paused, a dead peer) is down after this many seconds, and
        # the request that met it is a 503 (controlplane/unavailable.py), never a hang.
        timeout = float(os.environ.get("CACHE_TIMEOUT", "") or 2.0)
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url,
                "OPTIONS": {"socket_connect_timeout": timeout, "socket_timeout": timeout}}
    return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "controlplane"}
