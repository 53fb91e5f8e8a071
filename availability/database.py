"""A client-side deadline for every query on PostgreSQL.

A database that stops answering in the middle of a query (a paused server, a network partition
that drops nothing: the peer's kernel still acknowledges, so TCP never gives up) holds the request,
and the thread serving it, for as long as it lasts; the server's own ``statement_timeout`` cannot
fire in a server that does not run. libpq and psycopg have no read timeout of their own. So every
query runs registered with a deadline (``DATABASE_QUERY_DEADLINE_S``: by default the server's
statement_timeout plus 5 s; 0 switches it off; in the web server, where a person waits, at most
``DATABASE_WEB_QUERY_DEADLINE_S``, 5 s), and one thread per process shuts down the socket of a query past its
deadline: libpq's blocked read returns at once, psycopg raises OperationalError, the request is
answered 503 "the database is unavailable" (availability.dependency_down), and the pool drops the
broken connection when it is next handed out (its check, ``check_connection``, has a deadline too).

``install()`` hooks every new PostgreSQL connection (Django's ``connection_created``)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time

from django.conf import settings
from django.db.backends.signals import connection_created

log = logging.getLogger(__name__)
CHECK_EVERY_S = 0.5

_running: dict[int, tuple[float, int]] = {}  # query -> (deadline on the monotonic clock, socket fd)
_lock = threading.Lock()
_ids = itertools.count()
_watcher: threading.Thread | None = None
_last_cut = -1e9  # when the watcher last closed a connection (monotonic clock)


_web = False  # this process serves pages and the API (serve_web()): DATABASE_WEB_QUERY_DEADLINE_S


def deadline_seconds() -> float:
    seconds = float(getattr(settings, "DATABASE_QUERY_DEADLINE_S", 35.0))
    if _web and seconds > 0:
        # Someone waits for the answer: shorter, as a page that cannot be served says so soon.
        return min(seconds, float(getattr(settings, "DATABASE_WEB_QUERY_DEADLINE_S", 5.0)))
    return seconds


# After a connection went unanswered (cut by the watcher) or the pool could give none, a web
# request does not wait again for the same database: it is answered 503 at once for this long,
# then the next request tries (and, if the database still does not answer, waits its deadline).
# The web server serves pages on one thread per process: requests queued behind one that waits
# would each wait too.
FAIL_FAST_S = 3.0


def note_unanswered() -> None:
    global _last_cut
    _last_cut = time.monotonic()


def serving_web() -> bool:
    return _web


def failing_fast() -> bool:
    """This process serves the web and the database left a connection unanswered moments ago."""
    return _web and time.monotonic() - _last_cut < FAIL_FAST_S


def serve_web(serving: bool = True) -> None:
    """This process answers requests (the ASGI server's lifespan startup): its queries get the
    web deadline; its shutdown ends that."""
    global _web
    _web = serving


def _cut(fd: int) -> None:
    """Shut the connection's socket down through a duplicate descriptor: libpq's own stays
    open (libpq closes it), and its blocked read sees the end of the stream."""
    try:
        dup = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        dup.close()


def _watch() -> None:
    global _last_cut
    while True:
        time.sleep(CHECK_EVERY_S)
        now = time.monotonic()
        # Under the lock: a query still registered is still running on that descriptor, so the
        # descriptor is still its connection's (it cannot be closed and reused meanwhile).
        with _lock:
            for key, (deadline, fd) in list(_running.items()):
                if deadline <= now:
                    del _running[key]
                    log.warning("a database query ran past %.0f s with no answer: its connection is closed "
                                "(DATABASE_QUERY_DEADLINE_S)", deadline_seconds())
                    _cut(fd)
                    _last_cut = time.monotonic()


def _ensure_watcher() -> None:
    global _watcher
    with _lock:
        if _watcher is None or not _watcher.is_alive():
            _watcher = threading.Thread(target=_watch, name="database-query-deadline", daemon=True)
            _watcher.start()


def _register(fd: int, seconds: float) -> int:
    key = next(_ids)
    with _lock:
        _running[key] = (time.monotonic() + seconds, fd)
    return key


def _unregister(key: int) -> None:
    with _lock:
        _running.pop(key, None)


CHECK_DEADLINE_S = 3.0


def check_connection(conn) -> None:
    """The pool's check of a connection it hands out (psycopg_pool's: an empty query), under a
    deadline of its own: an empty query answers in milliseconds, and a check that blocks on a
    paused server would hold the request before any query of its own is watched. The pool's
    ``check`` (availability/postgresql/base.py)."""
    import psycopg
    from psycopg_pool import ConnectionPool

    if time.monotonic() - _last_cut < CHECK_DEADLINE_S:
        # A connection went unanswered a moment ago: the pool's other idle connections are as
        # likely to, and checking each for its own deadline would hold the request for all of them.
        raise psycopg.OperationalError("the database left a connection unanswered a moment ago")
    seconds = deadline_seconds()
    if seconds <= 0:
        ConnectionPool.check_connection(conn)
        return
    _ensure_watcher()
    key = _register(conn.fileno(), min(seconds, CHECK_DEADLINE_S))
    try:
        ConnectionPool.check_connection(conn)
    finally:
        _unregister(key)


@contextlib.contextmanager
def watched(conn):
    """What runs inside ends at the deadline, answered or not (``conn``: a psycopg connection)."""
    seconds = deadline_seconds()
    try:
        fd = conn.fileno() if seconds > 0 else None
    except Exception:  # no socket to watch (closed): what runs raises its own error
        fd = None
    if fd is None:
        yield
        return
    _ensure_watcher()
    key = _register(fd, seconds)
    try:
        yield
    finally:
        _unregister(key)


def with_deadline(execute, sql, params, many, context):
    """A Django execute wrapper (``connection.execute_wrappers``)."""
    with watched(context["connection"].connection):
        return execute(sql, params, many, context)


def _on_connection(sender, connection, **kwargs) -> None:
    if connection.vendor == "postgresql" and with_deadline not in connection.execute_wrappers:
        _ensure_watcher()
        connection.execute_wrappers.append(with_deadline)


def install() -> None:
    connection_created.connect(_on_connection, dispatch_uid="availability.database.with_deadline")
