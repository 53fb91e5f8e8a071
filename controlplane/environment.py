"""Reading the environment for settings.py: every variable may also come from a file named by
``<NAME>_FILE`` (Kubernetes secrets mounted as files), and the installation's own secret key
is made once under var/. Nothing here imports Django."""

import os
from pathlib import Path

import dj_database_url


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


def databases(var_dir: Path) -> tuple[dict, float, float]:
    """DATABASES from DATABASE_URL (else SQLite in ``var_dir``), and the deadlines of a query
    (availability/database.py): any query's, and one a person waits on in the web server."""
    default = dj_database_url.parse(env("DATABASE_URL", f"sqlite:///{var_dir / 'controlplane.sqlite3'}"),
                                    conn_max_age=int(env("DATABASE_CONN_MAX_AGE", "60")))
    # A slow database fails a request after this long instead of holding a worker forever.
    statement_timeout_ms = int(env("DATABASE_STATEMENT_TIMEOUT_MS", "30000"))
    # A database that stops answering mid-query (paused, partitioned) cannot enforce that: the
    # client closes a query's connection after this long (availability/database.py); 0: never.
    query_deadline = float(env("DATABASE_QUERY_DEADLINE_S", "") or (
        statement_timeout_ms / 1000 + 5 if statement_timeout_ms > 0 else 0))
    # In the web server, where a person waits: at most this long.
    web_query_deadline = float(env("DATABASE_WEB_QUERY_DEADLINE_S", "5"))
    if default["ENGINE"] == "django.db.backends.postgresql":
        # Under ASGI each request may run in another thread: persistent per-thread connections
        # pile up until PostgreSQL refuses clients. A shared pool (psycopg_pool) instead.
        default["CONN_MAX_AGE"] = 0
        default.setdefault("OPTIONS", {})["options"] = f"-c statement_timeout={statement_timeout_ms}"
        # After a failover: every pooled connection is checked when handed out, and reconnect
        # back-off restarts every 4 s, so requests are served again within seconds of the
        # database's return. The check runs under a deadline, so that a paused database does not
        # hold a request in it: Django's PostgreSQL backend with that one change
        # (availability/postgresql/base.py).
        default.update(CONN_HEALTH_CHECKS=True, ENGINE="availability.postgresql")
        default["OPTIONS"].update(connect_timeout=int(env("DATABASE_CONNECT_TIMEOUT", "5")), pool={
            "min_size": int(env("DATABASE_POOL_MIN", "1")), "max_size": int(env("DATABASE_POOL_MAX", "20")),
            "timeout": float(env("DATABASE_POOL_TIMEOUT", "10")), "reconnect_timeout": 4.0})
        # Prepared statements: parameters bound by the server (not pasted into the SQL text), so
        # that a page's queries are the same text every time and psycopg prepares each on a
        # connection after it has run twice; PostgreSQL then reuses the plan (planning a 9-table
        # join cost more than running it). Off (DATABASE_PREPARED_STATEMENTS=0) behind a
        # PgBouncer older than 1.21 in transaction mode, which cannot carry a statement prepared
        # on one server connection to another.
        if env_bool("DATABASE_PREPARED_STATEMENTS", True):
            default["OPTIONS"].update(server_side_binding=True, prepare_threshold=2)
    if default["ENGINE"] == "django.db.backends.sqlite3":
        # Several processes (web, worker, operator) share the file: wait instead of failing.
        default.setdefault("OPTIONS", {}).update({"timeout": 20, "transaction_mode": "IMMEDIATE",
                                                  "init_command": "PRAGMA journal_mode=WAL;"})
        default["CONN_MAX_AGE"] = 0
        # A file, not memory, so that the processes a test starts (worker, operator) share it.
        default["TEST"] = {"NAME": str(var_dir / f"test-{os.getpid()}.sqlite3")}
    return {"default": default}, query_deadline, web_query_deadline


def metrics_settings(var_dir: Path) -> tuple[Path, str]:
    """The folder every process writes its own metrics under (prometheus-client's
    multiprocess mode; `manage.py up` empties it at start), made and exported before anything
    imports prometheus-client, which reads it then; and the token a scrape must send."""
    folder = Path(env("PROMETHEUS_MULTIPROC_DIR", str(var_dir / "metrics-multiproc")))
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    # A METRICS_TOKEN_FILE that does not exist (a Secret without that key) leaves it unset:
    # closed to all but loopback, rather than a web process that does not start.
    token_file = os.environ.get("METRICS_TOKEN_FILE")
    token = env("METRICS_TOKEN", "") if not token_file or Path(token_file).is_file() else ""
    return folder, token
