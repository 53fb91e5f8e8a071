"""The native relay (playground/relay.c, built by ``make install`` into librelay.so): the body of
a streamed reply copied from the frontend's socket to the client's by a C thread, with no
Python per chunk. wire.Connection.pipe hands it a stream at a chunk boundary; the event loop
hears back once, when the stream ends (one 32-byte record on a pipe the loop reads).

Why: what the Python relay costs per chunk is mostly one wake-up of the interpreter, the
read's bytes object and the callback into the protocol (bench/proxy_cost.py measured a bare
uvloop relay at about a third of the Dynamo frontend's CPU per chunk, the endpoint at about a
half); the C thread pays the read and the write, and batches whatever several streams send in
one wake-up.

Used when the library is built and loads, ``PLAYGROUND_NATIVE_RELAY`` is on (the default), and
both connections are plain TCP (TLS is relayed by Python). Otherwise the relay is Python's
(wire.py): same bytes to the client, same errors, same limits."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import struct
import threading
from pathlib import Path

from django.conf import settings

from telemetry import instruments

LIBRARY = Path(__file__).with_name("librelay.so")

# relay.c: enum status and the flags of struct record.
DONE, UPSTREAM_CLOSED, FRAMING, IDLE, CLIENT_GONE, CANCELLED = range(6)
ENDED, REUSABLE, IN_TRAILERS = 1, 2, 4
WHY = {1: "a chunk-size line of more than 1 KiB", 2: "a chunk size that is not hexadecimal",
       3: "a chunk's data not followed by CRLF", 4: "trailers that are not HTTP/1.1 or more than 64 KiB",
       5: "a chunk size too large"}
_RECORD = struct.Struct("<iiqiBBBx2s6x")


class Result:
    """How a stream handed to the relay ended."""

    __slots__ = ("bytes", "ended", "in_trailers", "reusable", "skip", "status", "tail", "why")

    def __init__(self, status: int, written: int, skip: int, why: int, flags: int, tail: bytes) -> None:
        self.status = status
        self.bytes = written
        self.skip = skip
        self.why = WHY.get(why, "")
        self.ended = bool(flags & ENDED)
        self.reusable = bool(flags & REUSABLE)
        self.in_trailers = bool(flags & IN_TRAILERS)
        self.tail = tail


class _Relay:
    """This process's relay: the C context, its thread, and the streams it holds (by id)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.ctx = lib.relay_new()
        if not self.ctx:
            raise OSError("the native relay could not be set up (epoll, eventfd or pipe)")
        self.fd = lib.relay_notify_fd(self.ctx)
        self.pid = os.getpid()
        self.streams: dict[int, tuple[asyncio.AbstractEventLoop, object]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.partial = b""  # a record not yet whole (the thread writes several at once)
        # ctypes lets go of the GIL for the call: the thread never holds it.
        threading.Thread(target=lib.relay_run, args=(self.ctx,), name="native-relay", daemon=True).start()

    def listen(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the records from ``loop`` (moved there from an earlier loop: tests run several)."""
        if self.loop is loop:
            return
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.fd)
        loop.add_reader(self.fd, self._records)
        self.loop = loop

    def _records(self) -> None:
        try:
            data = os.read(self.fd, _RECORD.size * 256)
        except BlockingIOError:
            return
        if self.partial or len(data) % _RECORD.size:
            data = self.partial + data
            whole = len(data) - len(data) % _RECORD.size
            data, self.partial = data[:whole], data[whole:]
        for sid, status, written, skip, why, flags, tail_len, tail in _RECORD.iter_unpack(data):
            entry = self.streams.pop(sid, None)
            if entry is None:  # cancelled: nobody waits for it
                continue
            loop, conn = entry
            result = Result(status, written, skip, why, flags, tail[:tail_len])
            if loop is self.loop:
                conn.native_done(result)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(conn.native_done, result)

    def add(self, conn, up: int, client: int, idle: float, end: bool) -> int:
        sid = self.lib.relay_add(self.ctx, up, client, max(1, round(idle * 1000)) if idle > 0 else 0, int(end))
        if sid < 0:
            raise OSError(-sid, os.strerror(-sid))
        self.streams[sid] = (conn.loop, conn)
        return sid

    def waiting(self) -> int:
        """How many of its streams wait for a slow client (their frontends no longer read)."""
        return self.lib.relay_waiting(self.ctx)

    def cancel(self, sid: int) -> None:
        if self.streams.pop(sid, None) is not None:
            self.lib.relay_cancel(self.ctx, sid)


_relay: _Relay | None = None
_lib: ctypes.CDLL | bool | None = None  # False: not built, or does not load
_lock = threading.Lock()


def _load() -> ctypes.CDLL | None:
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL(str(LIBRARY))
        except OSError:
            _lib = False
            return None
        lib.relay_new.restype = ctypes.c_void_p
        lib.relay_notify_fd.argtypes = [ctypes.c_void_p]
        lib.relay_add.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.relay_waiting.argtypes = [ctypes.c_void_p]
        lib.relay_cancel.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.relay_cancel.restype = None
        lib.relay_run.argtypes = [ctypes.c_void_p]
        lib.relay_run.restype = None
        lib.relay_forget.argtypes = [ctypes.c_void_p]
        lib.relay_forget.restype = None
        _lib = lib
    return _lib or None


def built() -> bool:
    """Whether librelay.so is built and loads here."""
    return _load() is not None


def relay(loop: asyncio.AbstractEventLoop) -> _Relay | None:
    """This process's relay, reading its records on ``loop``; None when it is off or not built."""
    global _relay
    if not settings.PLAYGROUND_NATIVE_RELAY:
        return None
    current = _relay
    if current is None:
        lib = _load()
        if lib is None:
            return None
        with _lock:
            if _relay is None:
                _relay = _Relay(lib)
            current = _relay
    current.listen(loop)
    return current


def _after_fork_in_child() -> None:
    """The thread did not come along: a child starts its own relay, and closes the parent's
    duplicates of its streams' sockets."""
    global _relay, _lock
    _lock = threading.Lock()
    if _relay is not None:
        _relay.lib.relay_forget(_relay.ctx)
        _relay = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def socket_fd(transport) -> int | None:
    """The file descriptor of a plain TCP transport, or None (TLS, or no socket)."""
    if transport.get_extra_info("sslcontext") is not None or transport.get_extra_info("ssl_object") is not None:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None:
        return None
    try:
        return sock.fileno()
    except (OSError, ValueError):
        return None


async def pipe(conn, relay: _Relay, out, end: bool) -> Result | None:
    """wire.Connection.pipe by the native relay, from a chunk boundary of the reply with
    nothing of ours unwritten to the client: how the stream ended (the connection's state set
    from it, and a half-sent chunk sealed for the client), for ``pipe`` to return or raise
    from; None if the relay cannot take this stream (TLS on either side, or no free slot),
    which Python's then relays."""
    up, client = socket_fd(conn.transport), socket_fd(out)
    if up is None or client is None:
        return None
    conn._stop_timer()  # the relay keeps the idle timeout
    conn.fast = False
    if not conn.paused:
        conn.transport.pause_reading()  # the frontend's bytes are the relay's now
    try:
        sid = relay.add(conn, up, client, conn.idle, end)
    except OSError:
        _resume(conn)
        conn._timer = conn.loop.call_later(conn.idle, conn._check_idle)
        return None
    instruments.count_relayed("native")
    try:
        while conn.native_result is None:
            if conn.error is not None:  # closed meanwhile (the client went away)
                raise conn.error
            await conn._wait()
    finally:
        if conn.native_result is None:
            relay.cancel(sid)
    result = conn.native_result
    conn.ended = result.ended
    conn.chunk = None
    conn.tail = result.tail
    if result.status == DONE:
        conn.complete = True
        conn.keep_alive = conn.keep_alive and result.reusable
        _resume(conn)  # an idle pooled connection notices the frontend closing it
        return result
    conn.skip = result.skip
    conn.trailer = b"" if result.in_trailers else None
    conn._seal(out)
    conn.lost = True  # the relay read past what the connection's parser knows: never reused
    return result


def failure(result: Result, idle: float) -> tuple[bool, str]:
    """(timed out, what happened) for a stream the native relay did not end with DONE."""
    if result.status == IDLE:
        return True, f"nothing from the frontend for {idle:g} s"
    if result.status == FRAMING:
        return False, f"the frontend's chunked framing is not HTTP/1.1 ({result.why})"
    if result.status == CLIENT_GONE:
        return False, "the client's connection failed"
    return False, "the frontend closed the connection"


def _resume(conn) -> None:
    conn.paused = False
    conn.last = conn.loop.time()
    conn.transport.resume_reading()
