"""The floor of bench/proxy.py: a bare TCP relay on the same event loop as the product (uvloop),
in one process, in front of a graph's frontend. Every byte from the client goes to the
frontend and every byte back goes to the client as it arrives, in the callback that read it:
no HTTP parsing, no chunk framing, no authentication, no limits, no metrics, one upstream
connection per client connection. What it costs per streamed chunk is what any process in the
data path pays for one wake-up, one read and one write here, and nothing else.

    python bench/bare_relay.py --port 9000 --upstream 127.0.0.1:8000

Not part of the product: bench/proxy.py starts it as its ``relay`` arm."""

from __future__ import annotations

import argparse
import asyncio

import uvloop


class _Upstream(asyncio.Protocol):
    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

    def connection_lost(self, exc) -> None:
        self.client.close()


class _Client(asyncio.Protocol):
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream_address = upstream
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.waiting: list[bytes] | None = []  # what the client sent before the upstream connected

    def connection_made(self, transport) -> None:
        self.transport = transport
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            _, self.upstream = await asyncio.get_running_loop().create_connection(
                lambda: _Upstream(self.transport), *self.upstream_address)
        except OSError:
            self.transport.close()
            return
        for data in self.waiting:
            self.upstream.transport.write(data)
        self.waiting = None

    def data_received(self, data: bytes) -> None:
        if self.waiting is not None:
            self.waiting.append(data)
        else:
            self.upstream.transport.write(data)

    def connection_lost(self, exc) -> None:
        if self.upstream is not None:
            self.upstream.transport.close()


async def _serve(port: int, upstream: tuple[str, int]) -> None:
    server = await asyncio.get_running_loop().create_server(lambda: _Client(upstream), "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="host:port of the frontend")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    uvloop.run(_serve(args.port, (host, int(port))))


if __name__ == "__main__":
    main()
