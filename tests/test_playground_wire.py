"""playground.wire / upstream: the HTTP/1.1 the proxy speaks to a frontend, against a scripted
loopback server: the relay gets every byte as soon as it arrives (and what arrived together,
together), byte for byte; the idle timeout; keep-alive reuse and a kept-alive connection the
server closed."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import pytest

from playground import native, upstream
from playground.wire import StreamTimeout


@pytest.fixture(params=["native", "python"])
def relay(request, settings):
    """Each pipe test runs with both relays of a piped stream: the native one (playground/relay.c,
    which ``make install`` builds) and Python's."""
    settings.PLAYGROUND_NATIVE_RELAY = request.param == "native"
    if request.param == "native":
        assert native.built(), "playground/librelay.so is not built: run make install"
    return request.param


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENTS = [b'data: {"n": %d, "text": "\xc3\xa9\\n"}\n\n' % i for i in range(5)]


class Script:
    """A loopback server: each connection reads a request and runs ``reply(writer, n)``."""

    def __init__(self, reply) -> None:
        self.reply = reply
        self.connections = 0
        self.requests = 0
        self.go = asyncio.Event()

    async def handle(self, reader, writer) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                self.requests += 1
                if not await self.reply(self, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


def run(coro):
    async def main():
        try:
            return await coro
        finally:
            await upstream.close()
    return asyncio.run(main())


async def first_then_three_together(script, writer) -> bool:
    """The first event, then (once ``script.go`` is set) three events in one write, then the last."""
    writer.write(HEAD + chunk(EVENTS[0]))
    await writer.drain()
    await script.go.wait()  # the relay must have the first event before anything else is sent
    writer.write(chunk(EVENTS[1]) + chunk(EVENTS[2]) + chunk(EVENTS[3]))  # three events in one write
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(chunk(EVENTS[4]) + b"0\r\n\r\n")
    await writer.drain()
    return True


def test_a_read_returns_what_has_arrived_at_once_and_what_arrived_together_together():
    async def main():
        script = Script(first_then_three_together)
        url = await script.start()
        response = await upstream.request("POST", url + "/v1/chat/completions", b"{}", {"accept": "text/event-stream"})
        assert response.status == 200 and response.headers["content-type"] == "text/event-stream"
        first = await asyncio.wait_for(response.read(), 2)  # not held back waiting for more
        script.go.set()
        reads = [first]
        while chunk_ := await response.read():
            reads.append(chunk_)
        response.release()
        return reads

    reads = run(main())
    assert reads[0] == EVENTS[0]
    assert b"".join(reads) == b"".join(EVENTS)  # byte for byte
    assert reads[1] == b"".join(EVENTS[1:4])  # arrived together: relayed in one send
    assert reads[-1] == EVENTS[4]


def test_a_frontend_that_stalls_mid_stream_times_out_after_the_idle_timeout(settings):
    settings.PLAYGROUND_IDLE_TIMEOUT = 0.3

    async def reply(script, writer):
        writer.write(HEAD + chunk(EVENTS[0]))
        await writer.drain()
        await asyncio.sleep(5)
        return False

    async def main():
        script = Script(reply)
        url = await script.start()
        response = await upstream.request("POST", url + "/v1/chat/completions", b"{}", {})
        assert await response.read() == EVENTS[0]
        started = time.monotonic()
        with pytest.raises(StreamTimeout):
            await response.read()
        response.close()
        return time.monotonic() - started

    assert 0.25 <= run(main()) < 1.0


def test_connections_are_kept_alive_and_one_the_frontend_closed_is_replaced():
    async def reply(script, writer):
        writer.write(HEAD + chunk(EVENTS[0]) + b"0\r\n\r\n")
        await writer.drain()
        return script.requests < 2  # the second request's connection is closed after its reply

    async def main():
        script = Script(reply)
        url = await script.start()
        bodies = []
        for _ in range(3):
            response = await upstream.request("POST", url + "/v1/chat/completions", b"{}", {})
            bodies.append(await upstream.read_all(response, 1 << 20))
            await asyncio.sleep(0.05)  # the close reaches the pooled connection
        return bodies, script.connections

    bodies, connections = run(main())
    assert bodies == [EVENTS[0]] * 3
    assert connections == 2  # the first two requests shared one; the third needed a new one


def test_a_frontend_that_is_down_is_an_upstream_error():
    async def main():
        script = Script(None)
        url = await script.start()
        script.server.close()
        await script.server.wait_closed()
        with pytest.raises(upstream.UpstreamError) as failed:
            await upstream.request("POST", url + "/v1/chat/completions", b"{}", {})
        return failed.value

    error = run(main())
    assert error.kind == "upstream_unavailable" and "not reachable" in error.message


class Client:
    """The far end of a client's connection, as the relay meets it under uvicorn: a transport
    with uvicorn's own flow control (paused and resumed by the transport's buffer), and a
    reader for what the client receives."""

    def __init__(self) -> None:
        self.received: asyncio.StreamReader | None = None
        self.ready = asyncio.Event()
        self.paused_times = 0

    async def start(self, high_water: int | None = None):
        from uvicorn.protocols.http.flow_control import FlowControl

        async def accepted(reader, writer):
            self.received, self.writer = reader, writer
            self.ready.set()

        self.server = await asyncio.start_server(accepted, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        client = self

        class Side(asyncio.Protocol):
            def connection_made(self, transport):
                client.flow = FlowControl(transport)

            def pause_writing(self):
                client.paused_times += 1
                client.flow.pause_writing()

            def resume_writing(self):
                client.flow.resume_writing()

        loop = asyncio.get_running_loop()
        self.transport, _ = await loop.create_connection(Side, "127.0.0.1", port)
        if high_water is not None:
            # A small kernel buffer: a client that does not read is felt at once.
            self.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
            self.transport.set_write_buffer_limits(high=high_water)
        await self.ready.wait()
        return self.transport, self.flow


def test_a_pipe_writes_each_arrival_as_one_chunk_straight_to_the_client(relay):
    async def main():
        script = Script(first_then_three_together)
        url = await script.start()
        client = Client()
        out, flow = await client.start()
        response = await upstream.request("POST", url + "/v1/chat/completions", b"{}", {})
        assert await response.read() == EVENTS[0]  # the first bytes: read (and stamped) by the relay
        script.go.set()
        tail = await asyncio.wait_for(response.pipe(out, flow), 2)
        response.release()
        out.close()
        return tail, await client.received.read()

    tail, received = run(main())
    assert len(tail) >= 2 and EVENTS[4].endswith(tail)
    # Byte for byte as the frontend framed them (what arrived together left together), without
    # its last chunk: the client's reply is ended by the ASGI server.
    assert received == chunk(EVENTS[1]) + chunk(EVENTS[2]) + chunk(EVENTS[3]) + chunk(EVENTS[4])


def _boundaries(framed: bytes) -> list[int]:
    """Where each chunk of ``framed`` ends."""
    out, at = [], 0
    while at < len(framed):
        end = framed.index(b"\r\n", at)
        at = end + 2 + int(framed[at:end].split(b";")[0], 16) + 2
        out.append(at)
    return out


async def piped(reply):
    """A scripted frontend running ``reply``, a client as under uvicorn, and a streamed request
    whose first bytes have been read: (script, response, (out, flow), client, the first bytes)."""
    script = Script(reply)
    url = await script.start()
    client = Client()
    lent = await client.start()
    response = await upstream.request("POST", url + "/v1/chat/completions", b"{}", {})
    return script, response, lent, client, await response.read()


def first_then(rest: bytes, *, first: bytes = b"data: first\n\n", then_close: bool = False, pause: float = 0.0):
    """A frontend's reply: the event ``first`` alone, then (once ``script.go`` is set) ``rest``,
    then ``pause`` seconds; ``then_close``: the connection closes then."""

    async def reply(script, writer):
        writer.write(HEAD + chunk(first))
        await writer.drain()
        await script.go.wait()
        writer.write(rest)
        await writer.drain()
        if pause:
            await asyncio.sleep(pause)
        return not then_close

    return reply


async def pipe_dropped(reply):
    """Pipe a stream the frontend (``reply``) drops: the pipe raises, the response is closed.
    (response, the client's transport, the client)."""
    script, response, (out, flow), client, _first = await piped(reply)
    script.go.set()
    with pytest.raises(upstream.STREAM_ERRORS):
        await asyncio.wait_for(response.pipe(out, flow), 2)
    response.close()
    return response, out, client


def dechunk(received: bytes) -> bytes:
    """The data of HTTP/1.1 chunks (a reply the test ended itself: no last chunk needed)."""
    body, at = bytearray(), 0
    while at < len(received):
        end = received.index(b"\r\n", at)
        size = int(received[at:end].split(b";")[0], 16)
        assert received[end + 2 + size:end + 4 + size] == b"\r\n", received[at:at + 80]
        body += received[end + 2:end + 2 + size]
        at = end + 2 + size + 2
    return bytes(body)


@pytest.mark.parametrize("seed", range(8))
def test_a_pipe_relays_the_frontends_framing_however_its_bytes_are_split(seed, relay):
    """Chunk-size lines, data, CRLFs and the last chunk split anywhere across reads, or one
    chunk a read (seeds 6 and 7: the short path), chunk extensions and a trailer: the client gets
    every byte of data in valid chunks, nothing of the last chunk, and the connection carries
    the next request."""
    import random

    rng = random.Random(seed)
    events = [b"data: %d %s\n\n" % (i, b"y" * rng.randrange(0, 300)) for i in range(40)]
    framed = b"".join((b"%x;ext=%d\r\n" % (len(e), i) if i % 7 == 3 else b"%x\r\n" % len(e)) + e + b"\r\n"
                      for i, e in enumerate(events))
    last = b"0\r\nx-trailer: done\r\n\r\n" if seed % 2 else b"0\r\n\r\n"
    body = framed + last
    cuts = sorted(rng.sample(range(1, len(body)), 60))
    if seed >= 6:  # at every chunk boundary
        cuts = _boundaries(framed)

    async def reply(script, writer):
        if script.requests > 1:  # the next request on the same connection
            writer.write(HEAD + chunk(b"data: again\n\n") + b"0\r\n\r\n")
            await writer.drain()
            return True
        writer.write(HEAD + chunk(b"data: first\n\n"))
        await writer.drain()
        await script.go.wait()
        for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True):
            writer.write(body[a:b])
            await writer.drain()
            await asyncio.sleep(0.002)  # separate reads, mostly
        return True

    async def main():
        script, response, (out, flow), client, first = await piped(reply)
        assert first == b"data: first\n\n"
        url = f"http://127.0.0.1:{script.server.sockets[0].getsockname()[1]}"
        script.go.set()
        await asyncio.wait_for(response.pipe(out, flow), 5)
        raw = response._conn.raw
        short_path = response._conn.chunk is not None and response.tail() == events[-1]
        response.release()
        out.close()
        received = await client.received.read()
        again = await upstream.request("POST", url + "/v1/chat/completions", b"{}", {})
        second = await upstream.read_all(again, 1000)
        return raw, short_path, received, second, script.connections

    raw, short_path, received, second, connections = run(main())
    assert raw  # relayed as framed, not re-framed
    if seed >= 6 and relay == "python":
        assert short_path  # a whole chunk a read took the short path
    assert dechunk(received) == b"".join(events)
    assert not received.endswith(b"0\r\n\r\n") and b"x-trailer" not in received
    assert second == b"data: again\n\n" and connections == 1  # the connection was reused


def test_a_stream_dropped_mid_chunk_leaves_the_client_valid_chunks_ending_the_event(relay):
    # half a chunk, then gone
    reply = first_then(chunk(EVENTS[1]) + chunk(EVENTS[2])[:12], first=EVENTS[0], then_close=True, pause=0.05)

    async def main():
        response, out, client = await pipe_dropped(reply)
        out.close()
        return response.tail(), await client.received.read()

    tail, received = run(main())
    data = dechunk(received)  # still valid chunks
    assert data.startswith(EVENTS[1] + chunk(EVENTS[2])[4:12])
    assert data.endswith(b"\n\n") and tail.endswith(b"\n\n")  # the half event is ended


def test_a_pipe_to_a_slow_client_pauses_the_frontend_and_loses_nothing(relay):
    events = [b"data: %06d %s\n\n" % (i, b"x" * 2000) for i in range(2000)]  # about 4 MB

    async def reply(script, writer):
        writer.write(HEAD + chunk(b"data: first\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)  # the relay has the first chunk alone: the pipe starts at a boundary
        for event in events:
            writer.write(chunk(event))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def main():
        script = Script(reply)
        url = await script.start()
        client = Client()
        out, flow = await client.start(high_water=64 * 1024)
        response = await upstream.request("POST", url + "/v1/chat/completions", b"{}", {})
        first = await response.read()
        piping = asyncio.ensure_future(response.pipe(out, flow))
        await asyncio.sleep(0.3)  # the client reads nothing meanwhile
        if relay == "native":  # the relay's thread waits for the client, and reads no more meanwhile
            paused = native.relay(asyncio.get_running_loop()).waiting() == 1 and not piping.done()
        else:
            paused = response._conn.paused and not piping.done()
        received = bytearray()
        started = time.monotonic()
        while not piping.done() and time.monotonic() - started < 10:  # the client reads again
            with contextlib.suppress(TimeoutError):
                received += await asyncio.wait_for(client.received.read(65536), 0.1)
        await asyncio.wait_for(piping, 1)
        raw = response._conn.raw
        response.release()
        out.close()
        received += await client.received.read()
        return raw, paused, client.paused_times, first, bytes(received)

    raw, paused, paused_times, first, received = run(main())
    assert raw and paused  # relayed as framed; the frontend's connection stopped being read
    if relay == "python":
        assert paused_times >= 1  # the client's transport told its flow control
    body, at = bytearray(), 0
    while True:  # undo the chunk framing
        end = received.index(b"\r\n", at)
        size = int(received[at:end], 16)
        body += received[end + 2:end + 2 + size]
        at = end + 2 + size + 2
        if at >= len(received):
            break
    assert first + bytes(body) == b"data: first\n\n" + b"".join(events)


def test_a_frontend_that_drops_a_piped_stream_raises_with_the_last_bytes_written(relay):
    async def reply(script, writer):
        writer.write(HEAD + chunk(EVENTS[0]) + chunk(EVENTS[1][:10]))
        await writer.drain()
        await asyncio.sleep(0.05)
        return False  # closes the connection mid-reply

    async def main():
        script = Script(reply)
        url = await script.start()
        client = Client()
        out, flow = await client.start()
        response = await upstream.request("POST", url + "/v1/chat/completions", b"{}", {})
        first = await response.read()
        with pytest.raises(upstream.STREAM_ERRORS):
            await asyncio.wait_for(response.pipe(out, flow), 2)
        response.close()
        out.close()
        return first, response.tail()

    first, tail = run(main())
    assert first + tail == EVENTS[0] + EVENTS[1][:10]


def test_a_frontend_that_announces_a_huge_chunk_and_drops_it_cuts_the_client_off(relay):
    """No gigabyte of newlines to seal the half-sent chunk: the client's reply is cut instead."""
    reply = first_then(b"40000000\r\ndata: {", first=EVENTS[0], then_close=True, pause=0.05)  # a 1 GiB chunk begun

    async def main():
        _response, out, client = await pipe_dropped(reply)
        return out.is_closing(), await asyncio.wait_for(client.received.read(), 2)

    closing, received = run(main())
    assert closing and len(received) < 1024
