"""The stream worker: one web process that relays every OpenAI-endpoint stream, whichever web
worker the client's connection reached. controlplane.serve starts it beside the page workers
(``--workers`` 2 or more); the page workers hand it each connection whose request is for
``/api/playground/<graph>/v1/...``, as the connection's socket (``SCM_RIGHTS`` over a Unix
``SOCK_SEQPACKET`` pair the supervisor made) and the bytes already read from it, and forget it.
The stream worker then serves that connection, its later requests included, with the same
application.

Why: the kernel spreads connections over the page workers' sockets by a hash, so with two page
workers each woke up for its own share of every burst of tokens the frontend wrote (at 16
concurrent streams the frontend writes the 16 streams' chunks in one go), and paid a cold cache
for every wake-up: measured in bench/proxy.py, the endpoint's CPU per streamed chunk was about a
fifth higher served by two page workers than by one process. One process for the streams also
keeps the pages' Python (their thread pool holds the GIL while it renders) out of the streams'
event loop, so a busy page never delays a token.

The hand-off happens at the start of a request on an idle connection (the first, or the next on
a keep-alive connection), before uvicorn parses a byte of it, so nothing is parsed twice and a
body not yet read is read by the stream worker from the socket itself. It costs one
``sendmsg`` per connection, not per request: OpenAI clients keep their connections. When the
stream worker cannot take it (not started yet, restarting, its queue full, a first read larger
than a hand-off message), the page worker serves the request itself, as it would without one.

uvicorn's HttpToolsProtocol is subclassed here and only here (uvicorn is pinned in
pyproject.toml)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

ENV = "CONTROLPLANE_HANDOFF_FD"  # the inherited end of the pair, in every worker
MESSAGE_BYTES = 512 * 1024  # a hand-off carries at most one read (uvloop reads up to 256 KiB)
# The start of an OpenAI-endpoint request (the paths controlplane.asgi sends to playground.asgi).
OPENAI_REQUEST = re.compile(rb"(?:GET|POST|HEAD|OPTIONS) /api/playground/[-a-zA-Z0-9_]+/v1/")

log = logging.getLogger("controlplane.serve")


def pair() -> tuple[socket.socket, socket.socket]:
    """(the page workers' end, the stream worker's end), inheritable, with room for a queue of
    hand-offs while the stream worker starts."""
    send_end, receive_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for end in (send_end, receive_end):
        end.set_inheritable(True)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):  # capped by net.core.wmem_max / rmem_max
                end.setsockopt(socket.SOL_SOCKET, option, 4 * MESSAGE_BYTES)
    return send_end, receive_end


def inherited() -> socket.socket | None:
    """The end of the pair this worker was started with, or None."""
    fd = os.environ.get(ENV)
    if not fd:
        return None
    try:
        sock = socket.socket(fileno=int(fd))
    except (ValueError, OSError):
        return None
    sock.setblocking(False)
    return sock


class Noticing(HttpToolsProtocol):
    """uvicorn's HTTP protocol, which also tells the relay of a streamed reply
    (playground.asgi) when the client goes away: the relay sets ``on_lost`` for the length of
    the stream, and connection_lost calls it. Without it the relay keeps a task per stream
    waiting on ASGI ``receive`` for the disconnect (and cancels it at the end): measured in
    bench/proxy.py, a few percent of the endpoint's CPU a request. One stream at a time per
    connection (uvicorn answers pipelined requests in turn)."""

    on_lost = None  # () -> None, set by the relay of the reply being streamed

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        callback, self.on_lost = self.on_lost, None
        if callback is not None:
            callback()


class HandingOff(Noticing):
    """A page worker's HTTP protocol: uvicorn's, except that a connection whose next request is
    for the OpenAI endpoint goes to the stream worker."""

    handoff: socket.socket | None = None  # set by serve() before the server starts

    def data_received(self, data: bytes) -> None:
        if self.handoff is not None and self._idle() and OPENAI_REQUEST.match(data) and self._hand_off(data):
            return
        super().data_received(data)

    def _idle(self) -> bool:
        """Between requests: ``data`` begins a new one."""
        cycle = self.cycle
        return (cycle is None or cycle.response_complete) and not self.pipeline

    def _hand_off(self, data: bytes) -> bool:
        if len(data) > MESSAGE_BYTES or self.transport.is_closing():
            return False
        try:
            fd = os.dup(self.transport.get_extra_info("socket").fileno())
        except (OSError, AttributeError):
            return False
        try:
            socket.send_fds(self.handoff, [data], [fd], socket.MSG_DONTWAIT)
        except OSError:  # no room (the stream worker is behind or restarting), or it is gone
            return False
        finally:
            os.close(fd)
        # The stream worker holds the connection now: close this process's descriptor of it
        # without a byte or a FIN (close(2), not shutdown: the socket lives on in the other
        # process) and without uvicorn answering the request it never parsed.
        self._unset_keepalive_if_required()
        self.transport.close()
        return True


class Adopted(Noticing):
    """The stream worker's HTTP protocol for a connection handed to it: uvicorn's, fed first
    with the bytes the page worker had read."""

    def __init__(self, *args, initial: bytes = b"", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.initial = initial

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        data, self.initial = self.initial, b""
        if data:  # before any byte the loop reads from the socket
            self.data_received(data)


class Receiver:
    """The stream worker's side: takes each handed-off connection into the running server."""

    def __init__(self, sock: socket.socket, server) -> None:
        self.sock = sock
        self.server = server  # uvicorn.Server, started
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(self.sock.fileno(), self._ready)

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.loop = None

    def _ready(self) -> None:
        while self.loop is not None:
            try:
                data, fds, flags, _ = socket.recv_fds(self.sock, MESSAGE_BYTES, 1, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.error("stream worker: the hand-off socket failed (%s); taking no more connections", exc)
                self.stop()
                return
            if not fds:
                if not data:  # every page worker and the supervisor are gone
                    self.stop()
                continue
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                for fd in fds:
                    os.close(fd)
                continue
            self._adopt(fds[0], data)

    def _adopt(self, fd: int, data: bytes) -> None:
        try:
            conn = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return
        conn.setblocking(False)
        server, loop = self.server, self.loop
        config = server.config

        def protocol() -> Adopted:
            return Adopted(config=config, server_state=server.server_state, app_state=server.lifespan.state,
                           _loop=loop, initial=data)

        async def adopt() -> None:
            try:
                await loop.connect_accepted_socket(protocol, conn)
            except OSError:  # the client left while it was being handed over
                conn.close()

        loop.create_task(adopt())
