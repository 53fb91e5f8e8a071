"""The long way of playground/wire.py's relay of a frontend's reply as it is framed: HTTP/1.1
chunks from a chunk boundary on, split anywhere across reads, with chunk extensions, the last
chunk (size 0) and trailers. The short way (whole chunks a read, the common case) is in
``Connection.data_received``; what both keep is in the Connection's slots."""

from __future__ import annotations

import asyncio

LAST_CHUNK = b"0\r\n\r\n"
SEAL_LIMIT = 1 << 20  # newlines written at most to fill a half-sent chunk


class RawRelay:
    """Mixed into wire.Connection (which holds the state: ``skip``, ``held``, ``trailer``,
    ``tail``, ``chunk``, ``fast``, ``complete``, ``keep_alive``, ``end_client``, ``ended``,
    ``out``)."""

    __slots__ = ()

    def _relay_raw(self, out: asyncio.Transport, data: bytes) -> None:
        """Write ``data``, the frontend's chunks from a chunk boundary on, as they are framed,
        up to its last chunk (size 0), which is kept back with its trailers. Raises ValueError
        for what is not chunked framing."""
        if self.trailer is not None:
            self._trailers(data)
            return
        if self.held:
            data, self.held = self.held + data, b""
        n = len(data)
        pos = self.skip
        cut = n  # what is written now: all of it, unless a size line is not yet whole
        start = -1  # where the last chunk's data begins in ``data``
        while pos < n:
            end = data.find(b"\r\n", pos)
            if end < 0:
                if n - pos > 1024:
                    raise ValueError("a chunk-size line of more than 1 KiB")
                self.held, cut = data[pos:], pos
                break
            size = int(data[pos:end].split(b";", 1)[0], 16)
            if size < 0:
                raise ValueError("a negative chunk size")
            if size == 0:  # the last chunk: kept back (the client's is written by whoever ends its reply)
                cut = pos
                self.trailer = b""
                self._trailers(data[end + 2:])
                break
            start = end + 2
            pos = start + size + 2
        self.skip = max(0, pos - n) if cut == n else 0
        written = data if cut == n else data[:cut]
        if written:
            self.chunk = None  # what the short path wrote is no longer the last
            if start >= 0 and self.skip == 0:
                self.tail = data[start:pos - 2]
        if self.trailer is not None and self.end_client:  # one write, not two, ends the reply
            written += LAST_CHUNK
            self.ended = True
        if written and not out.is_closing():
            out.write(written)
        self.fast = not (self.skip or self.held or self.trailer is not None or self.complete)

    def _trailers(self, data: bytes) -> None:
        """After the last chunk's size line: trailer lines until an empty one ends the reply."""
        trailer = self.trailer + data
        if len(trailer) > 64 * 1024:
            raise ValueError("more than 64 KiB of trailers")
        self.trailer = trailer
        if trailer.startswith(b"\r\n") or b"\r\n\r\n" in trailer:
            self.complete = True
            if not (trailer == b"\r\n" or trailer.endswith(b"\r\n\r\n")):
                self.keep_alive = False  # bytes after the reply: the connection is not reused

    def _seal(self, out: asyncio.Transport) -> None:
        """Fill the chunk the frontend left half sent with newlines, so that the client's
        framing holds for the error event that follows (blank lines end an SSE event)."""
        if self.skip > SEAL_LIMIT and self.trailer is None:  # a chunk announced huge: the client's reply is cut
            out.close()
        elif self.skip and self.trailer is None and not out.is_closing():
            newlines = max(0, self.skip - 2)
            out.write(b"\n" * newlines + b"\r\n"[-min(self.skip, 2):])
            self.tail, self.chunk = (b"\n\n" if newlines >= 2 else b"\n"), None
        self.skip = 0

    def last_bytes(self) -> bytes:
        """The data of the last chunk written: ``tail``, or the last of the short path's
        ``chunk`` (whole chunks, framed)."""
        chunk = self.chunk
        if chunk is None:
            return self.tail
        at, data = 0, b""
        while at < len(chunk):
            end = chunk.find(b"\r\n", at)
            size = int(chunk[at:end], 16)
            data = chunk[end + 2:end + 2 + size]
            at = end + size + 4
        return data
