"""playground.native / relay.c: the native relay of a piped stream, against a scripted loopback
frontend and a client as uvicorn lends it (what tests/test_playground_wire.py runs with both
relays, plus what only the native one has: its own framing errors, idle timeout, cancel, many
streams at once, and nothing left open afterwards)."""

from __future__ import annotations

import asyncio
import os

import pytest

from playground import native, upstream
from playground.wire import StreamDropped, StreamTimeout
from tests.test_playground_wire import HEAD, chunk, dechunk, first_then, piped, run


@pytest.fixture(autouse=True)
def _native(settings):
    assert native.built(), "playground/librelay.so is not built: run make install"
    settings.PLAYGROUND_NATIVE_RELAY = True


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_client_gets_the_frontends_chunks_and_its_own_last_chunk_once():
    events = [b"data: %d\n\n" % i for i in range(50)]
    rest = b"".join(chunk(e) for e in events) + b"0\r\nx-usage: 1\r\n\r\n"

    async def main():
        script, response, (out, flow), client, _ = await piped(first_then(rest))
        script.go.set()
        tail = await asyncio.wait_for(response.pipe(out, flow, end=True), 5)
        ended, reusable = response.ended(), response._conn.reusable()
        response.release()
        out.close()
        return tail, ended, reusable, await client.received.read()

    tail, ended, reusable, received = run(main())
    assert received.endswith(b"\r\n0\r\n\r\n") and received.count(b"\r\n0\r\n\r\n") == 1
    assert dechunk(received[:-5]) == b"".join(events) and b"x-usage" not in received
    assert ended and reusable and tail == b"\n\n"


@pytest.mark.parametrize(("rest", "why"), [
    (chunk(b"data: 1\n\n") + b"zz\r\ndata\r\n", "not hexadecimal"),
    (chunk(b"data: 1\n\n") + b"4\r\ndataXX", "not followed by CRLF"),
    (chunk(b"data: 1\n\n") + b"1;" + b"x" * 1100, "more than 1 KiB"),
    (chunk(b"data: 1\n\n") + b"1" * 20 + b"\r\n", "too large"),
    (chunk(b"data: 1\n\n") + b"0\r\n" + b"x-pad: " + b"p" * 70000 + b"\r\n\r\n", "trailers"),
])
def test_framing_that_is_not_http_ends_the_stream_with_whole_chunks_and_a_closed_connection(rest, why):
    async def main():
        script, response, (out, flow), client, _ = await piped(first_then(rest, pause=0.5))
        script.go.set()
        with pytest.raises(StreamDropped) as raised:
            await asyncio.wait_for(response.pipe(out, flow), 5)
        reusable = response._conn.reusable()
        response.close()
        out.close()
        return str(raised.value), reusable, await client.received.read()

    message, reusable, received = run(main())
    assert why in message and not reusable
    data = dechunk(received)  # whatever reached the client is valid chunks
    assert data.startswith(b"data: 1\n\n")


def test_bytes_after_the_reply_keep_the_connection_from_being_reused():
    rest = chunk(b"data: 1\n\n") + b"0\r\n\r\nHTTP/1.1 200 OK\r\n"

    async def main():
        script, response, (out, flow), client, _ = await piped(first_then(rest, pause=0.3))
        script.go.set()
        await asyncio.wait_for(response.pipe(out, flow, end=True), 5)
        reusable = response._conn.reusable()
        response.release()
        out.close()
        return reusable, await client.received.read()

    reusable, received = run(main())
    assert not reusable and received == chunk(b"data: 1\n\n") + b"0\r\n\r\n"


def test_a_frontend_silent_mid_chunk_times_out_and_the_half_event_is_sealed(settings):
    settings.PLAYGROUND_IDLE_TIMEOUT = 0.3
    rest = chunk(b"data: 1\n\n") + chunk(b"data: two halves\n\n")[:12]

    async def main():
        script, response, (out, flow), client, _ = await piped(first_then(rest, pause=3))
        script.go.set()
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(StreamTimeout):
            await asyncio.wait_for(response.pipe(out, flow), 5)
        took = loop.time() - started
        tail = response.tail()
        response.close()
        out.close()
        return took, tail, await client.received.read()

    took, tail, received = run(main())
    assert 0.25 <= took < 2
    data = dechunk(received)
    assert data.startswith(b"data: 1\n\ndata: tw") and data.endswith(b"\n\n") and tail == b"\n\n"


def test_closing_a_relayed_stream_closes_the_frontends_connection_and_leaves_nothing_open():
    async def endless(script, writer):
        writer.write(HEAD + chunk(b"data: first\n\n"))
        await writer.drain()
        await script.go.wait()
        try:
            while True:
                writer.write(chunk(b"data: more\n\n"))
                await writer.drain()
                await asyncio.sleep(0.005)
        except ConnectionError:
            script.gone = True
        return False

    async def main():
        before = _open_fds()
        script, response, (out, flow), client, _ = await piped(endless)
        script.gone = False
        script.go.set()
        piping = asyncio.ensure_future(response.pipe(out, flow))
        await asyncio.sleep(0.2)
        relay = native.relay(asyncio.get_running_loop())
        relaying = len(relay.streams)
        response.close()  # what the endpoint does when its client goes away
        with pytest.raises(StreamDropped):
            await asyncio.wait_for(piping, 2)
        for _ in range(100):  # the frontend sees its connection end
            if script.gone:
                break
            await asyncio.sleep(0.02)
        out.close()
        client.writer.close()
        client.server.close()
        script.server.close()
        await asyncio.sleep(0.1)
        await upstream.close()
        return relaying, script.gone, len(relay.streams), _open_fds() - before

    relaying, gone, left, leaked = run(main())
    assert relaying == 1 and gone and left == 0
    assert leaked <= 0  # the relay's duplicates of both sockets are closed


def test_many_streams_at_once_each_get_their_own_bytes():
    async def main():
        setups = [await piped(first_then(b"".join(chunk(b"data: %d.%d\n\n" % (n, i)) for i in range(100))
                                         + b"0\r\n\r\n")) for n in range(40)]
        for script, *_ in setups:
            script.go.set()
        await asyncio.wait_for(asyncio.gather(*(response.pipe(out, flow, end=True)
                                                for _, response, (out, flow), _, _ in setups)), 10)
        received = []
        for _, response, (out, _flow), client, _ in setups:
            response.release()
            out.close()
            received.append(await client.received.read())
        return received

    for n, got in enumerate(run(main())):
        assert dechunk(got[:-5]) == b"".join(b"data: %d.%d\n\n" % (n, i) for i in range(100))


@pytest.mark.parametrize("on", [True, False])
def test_each_relayed_body_is_counted_by_the_relay_that_took_it(on, settings):
    """controlplane_playground_stream_bodies_total{relay}: which relay serves, on /metrics."""
    from telemetry import instruments

    settings.PLAYGROUND_NATIVE_RELAY = on
    counter = {relay: instruments.RELAYED.labels(relay) for relay in ("native", "python")}
    instruments.flush()
    before = {relay: c._value.get() for relay, c in counter.items()}

    async def main():
        script, response, (out, flow), _client, _ = await piped(first_then(chunk(b"data: 1\n\n") + b"0\r\n\r\n"))
        script.go.set()
        await asyncio.wait_for(response.pipe(out, flow, end=True), 5)
        response.release()
        out.close()

    run(main())
    instruments.flush()
    taken = "native" if on else "python"
    assert counter[taken]._value.get() == before[taken] + 1
    other = "python" if on else "native"
    assert counter[other]._value.get() == before[other]


def test_a_loop_that_has_not_read_the_records_yet_can_still_hand_over_and_cancel_streams():
    """The thread writes how streams ended to a pipe the loop reads when it gets to it. A full pipe
    makes the thread wait for the loop, never the loop for the thread: the loop can still add,
    cancel and ask while the records wait, and every record arrives whole and once."""
    import fcntl
    import socket
    import threading
    import time

    lib = native._load()  # the library with its argument and result types
    ctx = lib.relay_new()
    notify = lib.relay_notify_fd(ctx)
    fcntl.fcntl(notify, fcntl.F_SETPIPE_SZ, 4096)  # room for 128 records
    threading.Thread(target=lib.relay_run, args=(ctx,), daemon=True).start()
    clients, ids, asked = [], [], []
    late = socket.socketpair()

    def hand_over():  # what the loop does, in a thread: a relay that made it wait fails, not hangs
        for _ in range(300):  # each stream is its last chunk: it ends as soon as the thread reads it
            up, frontend = socket.socketpair()
            cl, client = socket.socketpair()
            for s in (up, cl):
                s.setblocking(False)
            frontend.sendall(b"0\r\n\r\n")
            ids.append(lib.relay_add(ctx, up.fileno(), cl.fileno(), 0, 1))
            for s in (up, frontend, cl):  # the relay holds its own duplicates: one socket each left open
                s.close()
            clients.append(client)
        time.sleep(0.3)  # the thread has ended what it could and waits on the full pipe
        asked.append((lib.relay_waiting(ctx), lib.relay_add(ctx, late[0].fileno(), late[1].fileno(), 0, 1)))

    loop = threading.Thread(target=hand_over, daemon=True)
    loop.start()
    loop.join(10)
    assert asked, "the loop waited for the relay thread (its lock held over a full pipe)"
    assert all(i >= 0 for i in ids) and asked[0][1] >= 0
    lib.relay_cancel(ctx, asked[0][1])

    records, data, began = {}, b"", time.monotonic()
    while len(records) < 301 and time.monotonic() - began < 10:
        try:
            data += os.read(notify, 4096 + 16)  # not a multiple of a record: reads split them
        except BlockingIOError:
            time.sleep(0.01)
            continue
        whole = len(data) - len(data) % native._RECORD.size
        for rec in native._RECORD.iter_unpack(data[:whole]):
            assert rec[0] not in records
            records[rec[0]] = rec
        data = data[whole:]
    assert set(records) == {*ids, asked[0][1]}
    assert all(records[i][1] == native.DONE for i in ids) and records[asked[0][1]][1] == native.CANCELLED
    assert all(client.recv(16) == b"0\r\n\r\n" for client in clients)
    for client in clients:
        client.close()
    late[0].close()
    late[1].close()


def test_records_split_across_reads_reach_their_streams_whole():
    """What the loop reads of the pipe: a read may end inside a record (the thread writes several
    at once); the record's rest comes with the next read."""

    class Conn:
        def __init__(self, loop):
            self.loop, self.results = loop, []

        def native_done(self, result):
            self.results.append(result)

    async def main():
        loop = asyncio.get_running_loop()
        r, w = os.pipe()
        os.set_blocking(r, False)
        relay = object.__new__(native._Relay)  # its reading only: no C context, no thread
        relay.fd, relay.loop, relay.partial = r, loop, b""
        conns = {sid: Conn(loop) for sid in (7, 65543)}
        relay.streams = {sid: (loop, conn) for sid, conn in conns.items()}
        records = b"".join(native._RECORD.pack(sid, native.DONE, 100 + sid, 0, 0, native.ENDED | native.REUSABLE,
                                               2, b"\n\n") for sid in conns)
        for part in (records[:40], records[40:50], records[50:]):
            os.write(w, part)
            relay._records()
        os.close(r)
        os.close(w)
        return conns

    conns = run(main())
    for sid, conn in conns.items():
        [result] = conn.results
        assert result.status == native.DONE and result.bytes == 100 + sid and result.tail == b"\n\n"
        assert result.ended and result.reusable
