"""A PostgreSQL that stops answering in the middle of a query (paused, or behind a partition that
drops nothing) fails that query after DATABASE_QUERY_DEADLINE_S instead of holding its thread for as
long as it lasts (availability/database.py). The pause is a TCP relay between the product and the
real server that stops passing bytes while both connections stay open, as the kernel of a
SIGSTOPped server keeps them."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
import threading
import time

import pytest
from django.db import OperationalError, connection, connections

from availability import dependency_down

on_postgresql = pytest.mark.skipif(connection.vendor != "postgresql",
                                   reason="the deadline guards PostgreSQL connections (CI runs on PostgreSQL)")


@pytest.fixture(autouse=True)
def no_cut_outlives_its_test(monkeypatch):
    """A connection the watcher cut here makes a web process fail fast for a moment: not the
    tests after these."""
    from availability import database

    monkeypatch.setattr(database, "_last_cut", -1e9)


class PausingRelay:
    """Relays loopback TCP to the database; ``pause()`` stops passing bytes both ways."""

    def __init__(self, host: str, port: int):
        self.upstream = (host, port)
        self.flowing = threading.Event()
        self.flowing.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.flowing.wait()
            try:
                dst.sendall(data)
            except OSError:
                return

    def pause(self) -> None:
        self.flowing.clear()

    def close(self) -> None:
        self.flowing.set()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()


@pytest.fixture
def paused_alias(django_db_blocker, settings):
    # A connection of its own, outside the test's transaction: SELECTs only, on the configured
    # database (no table is read).
    real = connections.settings["default"]
    relay = PausingRelay(real.get("HOST") or "127.0.0.1", int(real.get("PORT") or 5432))
    cfg = copy.deepcopy(real)
    cfg.update(HOST="127.0.0.1", PORT=str(relay.port), NAME="postgres")  # always there
    cfg["OPTIONS"] = {k: v for k, v in cfg.get("OPTIONS", {}).items() if k != "pool"}
    connections.settings["through-relay"] = cfg
    settings.DATABASE_QUERY_DEADLINE_S = 2.0
    try:
        with django_db_blocker.unblock():
            yield connections["through-relay"], relay
    finally:
        relay.close()
        with contextlib.suppress(Exception):  # its socket was cut on purpose
            connections["through-relay"].close()
        del connections["through-relay"]
        del connections.settings["through-relay"]


@on_postgresql
def test_a_query_the_database_never_answers_fails_at_the_deadline(paused_alias):
    _conn, relay = paused_alias
    outcome: dict = {}

    def query():  # in a thread of its own, so that a hang fails the test instead of the suite
        conn = connections["through-relay"]
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT 1")
                outcome["before"] = cursor.fetchone()
            relay.pause()
            started = time.monotonic()
            try:
                with conn.cursor() as cursor:
                    cursor.execute("SELECT 2")
            except Exception as exc:
                outcome["error"] = exc
            outcome["took"] = time.monotonic() - started
        finally:
            with contextlib.suppress(Exception):  # its socket was cut on purpose
                conn.close()

    worker = threading.Thread(target=query)
    worker.start()
    worker.join(20)
    hung = worker.is_alive()
    relay.close()  # ends a query that hangs
    worker.join(10)
    assert not hung, "the query waited for as long as the database was paused"
    assert outcome["before"] == (1,)
    assert isinstance(outcome.get("error"), OperationalError), outcome
    assert 2.0 <= outcome["took"] < 10, outcome  # not before its deadline
    assert dependency_down(outcome["error"]) == "the database"  # answered as a 503 by every path


@on_postgresql
def test_a_commit_the_database_never_answers_fails_at_the_deadline(paused_alias):
    """COMMIT is sent by psycopg itself, not through a cursor: it is watched too."""
    from django.db import transaction

    _conn, relay = paused_alias
    outcome: dict = {}

    def commit():
        conn = connections["through-relay"]
        try:
            started = None
            try:
                with transaction.atomic(using="through-relay"), conn.cursor() as cursor:
                    cursor.execute("SELECT 1")
                    relay.pause()
                    started = time.monotonic()
            except Exception as exc:
                outcome["error"] = exc
            outcome["took"] = time.monotonic() - started if started else None
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    worker = threading.Thread(target=commit)
    worker.start()
    worker.join(20)
    hung = worker.is_alive()
    relay.close()
    worker.join(10)
    assert not hung, "the commit waited for as long as the database was paused"
    assert isinstance(outcome.get("error"), OperationalError), outcome
    assert 2.0 <= outcome["took"] < 10, outcome


@on_postgresql
def test_a_query_that_answers_within_its_deadline_is_left_alone(paused_alias, settings):
    conn, _relay = paused_alias
    settings.DATABASE_QUERY_DEADLINE_S = 1.0
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.3), 7")  # shorter than the deadline
        assert cursor.fetchone()[1] == 7
        for _ in range(5):  # the watcher passes over finished queries without touching them
            cursor.execute("SELECT 3")
            assert cursor.fetchone() == (3,)
            time.sleep(0.3)
        cursor.execute("SELECT 4")
        assert cursor.fetchone() == (4,)


@on_postgresql
def test_the_pools_check_of_a_connection_to_a_paused_database_ends_at_its_own_deadline(paused_alias, settings,
                                                                                       monkeypatch):
    """The pool checks a connection before handing it out: on a paused server that check would hold
    the request before any of its queries is watched."""
    import psycopg

    from availability import database
    from availability.database import CHECK_DEADLINE_S, check_connection

    monkeypatch.setattr(database, "_last_cut", -1e9)  # no cut of an earlier test's counts here
    _conn, relay = paused_alias
    real = connections.settings["default"]
    settings.DATABASE_QUERY_DEADLINE_S = 30.0
    outcome: dict = {}

    def check():
        with psycopg.connect(host="127.0.0.1", port=relay.port, dbname="postgres", user=real.get("USER") or "postgres",
                             autocommit=True) as conn:
            check_connection(conn)  # a live server: quiet
            relay.pause()
            started = time.monotonic()
            try:
                check_connection(conn)
            except Exception as exc:
                outcome["error"] = exc
            outcome["took"] = time.monotonic() - started

    worker = threading.Thread(target=check)
    worker.start()
    worker.join(20)
    hung = worker.is_alive()
    relay.close()
    worker.join(10)
    assert not hung, "the pool's check waited for as long as the database was paused"
    assert isinstance(outcome.get("error"), psycopg.OperationalError), outcome
    assert CHECK_DEADLINE_S <= outcome["took"] < CHECK_DEADLINE_S + 5, outcome
    # The pool's next idle connection is not checked for a deadline of its own: it fails at once.
    started = time.monotonic()
    with psycopg.connect(host=real.get("HOST") or "127.0.0.1", port=int(real.get("PORT") or 5432), dbname="postgres",
                         user=real.get("USER") or "postgres", autocommit=True) as live:
        with pytest.raises(psycopg.OperationalError, match="unanswered a moment ago"):
            check_connection(live)
        assert time.monotonic() - started < 1.0
        time.sleep(CHECK_DEADLINE_S)
        check_connection(live)  # then checked again as usual


def _lifespan(event: str) -> None:
    from controlplane.asgi import application

    messages = [{"type": f"lifespan.{event}"}]
    sent = []

    async def receive():
        return messages.pop(0) if messages else await asyncio.sleep(3600)

    async def send(message):
        sent.append(message["type"])
        raise asyncio.CancelledError  # one event at a time

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(application({"type": "lifespan"}, receive, send))
    assert sent == [f"lifespan.{event}.complete"]


def test_the_web_server_waits_less_for_the_database_than_the_workers(settings, monkeypatch):
    from availability import database

    monkeypatch.setattr(database, "_web", False)
    import controlplane.asgi  # noqa: F401 - importing the entry point marks nothing (the test process imports it)

    assert database._web is False
    _lifespan("startup")  # the ASGI server starting the application marks its process
    settings.DATABASE_QUERY_DEADLINE_S, settings.DATABASE_WEB_QUERY_DEADLINE_S = 35.0, 10.0
    assert database._web is True and database.deadline_seconds() == 10.0
    settings.DATABASE_QUERY_DEADLINE_S = 4.0
    assert database.deadline_seconds() == 4.0  # never longer than the process-wide deadline
    settings.DATABASE_QUERY_DEADLINE_S = 0.0
    assert database.deadline_seconds() == 0.0  # switched off stays off
    _lifespan("shutdown")  # and stopping it unmarks it, as a worker's task or a migration
    settings.DATABASE_QUERY_DEADLINE_S = 35.0
    assert database._web is False and database.deadline_seconds() == 35.0


@on_postgresql
def test_in_the_web_server_a_database_that_just_left_a_connection_unanswered_fails_at_once(paused_alias,
                                                                                          monkeypatch):
    """Pages are served on one thread per web process: requests queued behind one that waited
    for the database must not each wait again."""
    from availability import database

    conn, _relay = paused_alias
    monkeypatch.setattr(database, "_web", True)
    monkeypatch.setattr(database, "FAIL_FAST_S", 1.0)
    database.note_unanswered()
    started = time.monotonic()
    with pytest.raises(OperationalError, match="unanswered a moment ago"):
        conn.ensure_connection()
    assert time.monotonic() - started < 0.5
    time.sleep(1.1)  # then the next request tries again
    with conn.cursor() as cursor:
        cursor.execute("SELECT 5")
        assert cursor.fetchone() == (5,)
