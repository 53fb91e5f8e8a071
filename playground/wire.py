"""HTTP/1.1 to a graph's frontend on a bare asyncio Protocol with httptools' parser (C): what
upstream.py sends requests and relays streams with.

Why not aiohttp here: profiled under 16 concurrent streams (py-spy and perf on a web worker),
its per-chunk machinery was most of the proxy's own CPU per SSE event: ResponseHandler's
data_received re-arming the sock_read timer (a cancel and a new TimerHandle per chunk), the
StreamReader's buffers, chunk-split bookkeeping and waiter, iter_any's wake-up path, and about
0.3 ms of ClientSession/ClientRequest work per request. Here a chunk costs the parser's C
callback, one list append and at most one future: the body bytes that have arrived when the
reader wakes are handed over together (``read``), so nothing is ever held back waiting for
more, and chunks that arrived together leave together.

The idle timeout (no byte from the frontend for ``idle`` seconds, the headers included) is one
timer per connection re-armed at most once per ``idle`` period, not per chunk: when it fires it
looks at when the last bytes came and either fails the response or waits the rest of the
period. Reading is paused when the relay falls behind (``HIGH_WATER`` bytes not yet taken),
and a paused stream is never timed out: the wait is ours, not the frontend's.

``pipe`` goes further, for the server that can lend its client's transport (uvicorn's, see
playground/asgi.py): from then on the body leaves from ``data_received`` itself, the bytes of
one wake-up as one HTTP/1.1 chunk written to the client's transport, with no task woken, no
future and no ASGI message per chunk; the relay's task wakes only at the end, on an error, or
to wait for a slow client to drain (reading from the frontend pauses meanwhile). Once the reply
is at a chunk boundary (the frontend's framing is HTTP/1.1 chunks too), the bytes go out as the
frontend framed them, parsed by no more than finding each chunk's size line: no parser
callback and no copy per chunk, and for whole chunks a read (the common case) no more than a
few C calls a chunk (``data_received``'s short path; the rest in framing.py); the frontend's
last chunk (size 0, and trailers) is kept back, for the ASGI server ends the client's reply
itself. Where it is built, the native relay (native.py, relay.c) takes the body from that chunk
boundary on instead: no Python at all per chunk; this relay stays for TLS and for the rest."""

from __future__ import annotations

import asyncio

import httptools

from telemetry import instruments

from . import native
from .framing import RawRelay

HIGH_WATER = 256 * 1024


class StreamTimeout(TimeoutError):
    """The frontend sent nothing for the idle timeout."""


class StreamDropped(ConnectionError):
    """The frontend closed the connection, or sent what is not HTTP, before the end of the reply."""


class Connection(RawRelay, asyncio.Protocol):
    """One keep-alive connection to a frontend, carrying one request at a time."""

    # Slots: a streamed chunk wakes this process up with cold caches and TLB (other processes
    # ran since the last one), and what it costs is mostly how many distinct places in memory
    # it touches; attributes in the object itself are fewer of them than an instance dict.
    __slots__ = ("_busy", "_timer", "_waiter", "aligned", "chunk", "chunked", "complete", "end_client", "ended",
                 "ends_crlf", "error", "fast", "flow", "head_done", "headers", "held", "idle", "idle_since",
                 "keep_alive", "key", "last", "loop", "lost", "native_result", "out", "parser", "parts", "paused",
                 "raw", "received", "seen", "size", "skip", "status", "tail", "trailer", "transport")

    def __init__(self, loop: asyncio.AbstractEventLoop, key: tuple) -> None:
        self.loop = loop
        self.key = key  # (scheme, host, port): the pool it belongs to
        self.idle = 0.0
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_since = 0.0  # loop time it went back to the pool
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.keep_alive = False
        self.complete = False
        self.error: BaseException | None = None
        self.parts: list[bytes] = []
        self.size = 0
        self.received = False  # any byte of the current reply
        self.paused = False
        self.last = self.loop.time()
        self._waiter: asyncio.Future | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._busy = False
        self.out: asyncio.Transport | None = None  # pipe(): the client's transport
        self.flow = None  # pipe(): its write_paused / drain()
        self.tail = b""  # pipe(): the data of the last chunk written (unless ``chunk``)
        self.chunk: bytes | None = None  # raw: the short path's last read, framed (then it is the last written)
        self.seen: bytes | None = None  # ``chunk`` when the idle timer last looked
        self.fast = False  # raw, at a chunk boundary, nothing held: the short path may take a read
        self.chunked = False  # the reply's body comes in HTTP/1.1 chunks
        self.aligned = True  # httptools has stopped at a chunk boundary (with ends_crlf)
        self.ends_crlf = False  # the last bytes fed to httptools ended with CRLF
        self.raw = False  # pipe(): the frontend's chunks relayed as framed (_relay_raw)
        self.skip = 0  # raw: bytes left of the current chunk (its data and CRLF)
        self.held = b""  # raw: a chunk-size line not yet whole
        self.trailer: bytes | None = None  # raw: what followed the last chunk's size line
        self.end_client = False  # pipe(end=True): raw, write the client's last chunk too
        self.ended = False  # ... and it has been written
        self.native_result: native.Result | None = None  # how the native relay ended the stream

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.fast and data.endswith(b"\r\n"):
            # The common case, kept to a few C calls a chunk: whole chunks (not the last) from a
            # chunk boundary. It stamps no time (the idle timer looks at ``chunk``) and asks the
            # client's flow control only whether it is paused.
            n = len(data)
            at = 0
            try:
                while at < n:
                    end = data.find(b"\r\n", at, at + 18)
                    size = int(data[at:end], 16) if end > at else 0
                    if size <= 0:  # the last chunk, or no size line: the long way
                        break
                    at = end + size + 4
            except ValueError:  # an extension (";"), or not chunked framing: the long way
                at = -1
            if at == n:
                try:  # noqa: SIM105 (not contextlib.suppress: no context manager a chunk)
                    self.out.write(data)
                except RuntimeError:  # the client's transport is closed: the relay's watcher ends the stream
                    pass
                self.chunk = data
                if self.flow.write_paused:
                    self._after_write(self.out)
                return
        self.last = self.loop.time()
        if not self._busy:  # bytes on an idle pooled connection: it is not reusable
            self.lost = True
            self.transport.close()
            return
        self.received = True
        out = self.out
        if self.raw:
            try:
                self._relay_raw(out, data)
            except ValueError as exc:
                self._fail(StreamDropped(f"the frontend's chunked framing is not HTTP/1.1 ({exc})"))
                self.transport.close()
                return
        else:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError as exc:
                self._fail(StreamDropped(f"the frontend's reply is not HTTP/1.1 ({exc})"))
                self.transport.close()
                return
            self.ends_crlf = data.endswith(b"\r\n")
            if out is not None and self.parts:
                self._write_out(out, self.parts)
        if out is not None:
            self._after_write(out)
            return
        if self.size > HIGH_WATER and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def _after_write(self, out: asyncio.Transport) -> None:
        """pipe(): wake the relay's task at the end, or pause reading for a slow client."""
        if not (self.complete or self.flow.write_paused):
            return  # the relay's task sleeps on
        if self.flow.write_paused and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def connection_lost(self, exc) -> None:
        self.lost = True
        if self._busy and not self.complete:
            self._fail(StreamDropped("the frontend closed the connection"))

    # --- httptools callbacks -----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:  # an interim answer: the real one follows
            self.headers = {}
            return
        self.head_done = True
        # Asked here: after the message is complete, the parser no longer knows.
        self.keep_alive = self.parser.should_keep_alive() and not self.parser.should_upgrade()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()

    def on_chunk_header(self) -> None:
        self.aligned = False

    def on_chunk_complete(self) -> None:  # after the chunk's data and its CRLF
        self.aligned = True

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)
        self.size += len(body)

    def on_message_complete(self) -> None:
        if self.head_done:
            self.complete = True

    # --- the caller's side -------------------------------------------------------------------

    def start(self, request: bytes, idle: float) -> None:
        """Send one request (the whole of it: head and body); ``idle``: its idle timeout."""
        self._reset()
        self.idle = idle
        self._busy = True
        self.transport.write(request)
        self._timer = self.loop.call_at(self.last + self.idle, self._check_idle)

    async def head(self) -> None:
        """Wait for the response's status and headers."""
        while not self.head_done:
            if self.error is not None:
                raise self.error
            await self._wait()

    async def read(self) -> bytes:
        """The body bytes that have arrived since the last call, all of them; waits only when
        there are none. b"" at the end of the body."""
        while True:
            parts = self.parts
            if parts:
                self.parts = []
                self.size = 0
                if self.paused:
                    self.paused = False
                    self.last = self.loop.time()
                    self.transport.resume_reading()
                return parts[0] if len(parts) == 1 else b"".join(parts)
            if self.complete:
                return b""
            if self.error is not None:
                raise self.error
            await self._wait()

    async def pipe(self, out: asyncio.Transport, flow, *, end: bool = False) -> bytes:
        """Write the rest of the body to ``out`` as HTTP/1.1 chunks straight from
        ``data_received`` until it ends, or, from a chunk boundary, by the native relay
        (playground/native.py: no Python per chunk) where it is built and both connections are
        plain TCP; returns the end of the last chunk's data written (b"" if none: all of it from
        Python, at least its last two bytes from the native relay). ``flow``:
        the client's flow control (``write_paused``, ``drain()``): while the client is slow,
        reading from the frontend pauses. Raises as ``read`` does; a client gone (``out``
        closing) ends nothing here: whoever sees it closes this connection. ``end``: when the
        frontend's last chunk comes, write the client's (``0``, CRLF, CRLF) with the bytes before
        it, in one write (``ended`` says whether that happened; the caller then must not)."""
        self.out, self.flow, self.end_client = out, flow, end
        try:
            if self.parts:
                self._write_out(out, self.parts)
            # At a chunk boundary (a partial size line never ends with CRLF): from here on the
            # frontend's own framing is the client's.
            self.raw = self.fast = self.chunked and self.aligned and self.ends_crlf and not self.complete
            if self.raw and not flow.write_paused and not out.get_write_buffer_size():
                relay = native.relay(self.loop)
                if relay is not None:
                    result = await native.pipe(self, relay, out, end)
                    if result is not None:
                        if result.status == native.DONE:
                            return result.tail
                        timed_out, why = native.failure(result, self.idle)
                        self._fail(StreamTimeout(why) if timed_out else StreamDropped(why))
                        raise self.error
            instruments.count_relayed("python")
            while True:
                if self.error is not None:
                    if self.raw:
                        self._seal(out)
                    raise self.error
                if self.complete:
                    return self.last_bytes()
                if flow.write_paused:
                    await flow.drain()
                    continue
                if self.paused:  # paused for the client (or, before the pipe, for the relay)
                    self.paused = False
                    self.last = self.loop.time()
                    self.transport.resume_reading()
                await self._wait()
        finally:
            self.out = self.flow = None
            self.fast = False

    def native_done(self, result: native.Result) -> None:
        """The native relay has ended the stream it was handed (native.pipe)."""
        self.native_result = result
        self._wake()

    def _write_out(self, out: asyncio.Transport, parts: list[bytes]) -> None:
        self.parts = []
        self.size = 0
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        if not out.is_closing():
            out.write(b"%x\r\n%s\r\n" % (len(body), body))
        self.tail, self.chunk = body, None

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.lost and self.error is None

    def done(self) -> None:
        """The reply was read to its end: the connection may carry the next request."""
        self._busy = False
        self._stop_timer()
        self.parts = []

    def close(self) -> None:
        if self._busy and not self.complete:  # a relay waiting on it ends now
            self._fail(StreamDropped("the connection was closed"))
        self._busy = False
        self._stop_timer()
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    # --- internals ---------------------------------------------------------------------------

    async def _wait(self) -> None:
        self._waiter = waiter = self.loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.fast = False
        self._stop_timer()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._waiter = None
            waiter.set_result(None)

    def _check_idle(self) -> None:
        self._timer = None
        if not self._busy or self.complete or self.error is not None:
            return
        if self.paused:  # the relay is behind, not the frontend
            self._timer = self.loop.call_later(self.idle, self._check_idle)
            return
        now = self.loop.time()
        if self.chunk is not self.seen:  # the short path took reads since the last look: bytes came
            self.seen = self.chunk
            self.last = now
        deadline = self.last + self.idle
        if now < deadline:
            # While the short path may take reads, look every quarter of the timeout: a stall
            # is then noticed within a quarter more than the timeout.
            self._timer = self.loop.call_at(min(deadline, now + self.idle / 4) if self.fast else deadline,
                                            self._check_idle)
            return
        self._fail(StreamTimeout(f"nothing from the frontend for {self.idle:g} s"))

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
