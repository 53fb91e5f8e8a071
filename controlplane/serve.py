"""The web server: ``python -m controlplane.serve``, what ``make up``, the Dockerfile and
deploy/kustomize run. uvicorn in ``--workers`` processes (``WEB_CONCURRENCY``, else one),
each listening on a socket of its own bound to the same address (``SO_REUSEPORT``), under a
small supervisor that restarts a worker that dies and stops them all on SIGTERM or SIGINT.
With two workers or more it also runs the stream worker, which listens on nothing: the page
workers hand it every connection whose request is for the OpenAI endpoint, so that one process
relays all the streams (controlplane/handoff.py says why and how; ``--no-stream-worker`` or
``WEB_STREAM_WORKER=0`` leaves the streams with the page workers).

Why not ``uvicorn --workers``: there the workers share one listening socket, and whichever
worker's event loop is idle takes the next connection. A page runs in a worker's thread pool
while its loop stays idle, so a busy worker goes on accepting: measured with wrk's 8 keep-alive
connections on 2 workers, the split was often 6 to 2 or worse, and the busier worker queued
its pages while the other idled (bench/pages_http.py: a page's p95 changed by half from one
round to the next). With a socket per worker the kernel spreads connections over the workers
evenly by a hash of each connection. uvicorn's supervisor also pings every worker over a pipe
twice a second; this one sleeps in ``wait()`` until a worker exits or a signal comes. And a
worker's housekeeping (the Date header, whether to stop) runs once a second instead of ten
times, and at once on a signal to stop. Idle, two workers, the stream worker and their
supervisor spend about 1.6 ms of CPU a second, uvicorn --workers about 8 (bench/web_idle.py,
bench/results/web-idle.json).

Options are uvicorn's own, for the subset this product uses; the application is
``controlplane.asgi:application`` unless given."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

APPLICATION = "controlplane.asgi:application"
EARLY_EXIT_SECONDS = 10  # a worker that exits this soon after its start is not restarted: all stop


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m controlplane.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("app", nargs="?", default=APPLICATION, help=f"the ASGI application (default {APPLICATION})")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=None,
                   help="web processes (default: WEB_CONCURRENCY, else 1)")
    p.add_argument("--no-access-log", action="store_true")
    p.add_argument("--proxy-headers", dest="proxy_headers", action="store_true", default=False,
                   help="believe X-Forwarded-For/-Proto from --forwarded-allow-ips")
    p.add_argument("--no-proxy-headers", dest="proxy_headers", action="store_false")
    p.add_argument("--forwarded-allow-ips", default=None)
    p.add_argument("--timeout-graceful-shutdown", type=int, default=None, metavar="SECONDS")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--no-stream-worker", dest="stream_worker", action="store_false",
                   default=os.environ.get("WEB_STREAM_WORKER", "1") != "0",
                   help="with 2 or more workers, relay the OpenAI endpoint's streams in the page workers "
                        "themselves instead of one stream worker (WEB_STREAM_WORKER=0)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one worker process
    p.add_argument("--streams", action="store_true", help=argparse.SUPPRESS)  # the stream worker
    return p


def main(argv: list[str] | None = None) -> int:
    options = parser()
    args = options.parse_args(argv)
    if not 1 <= args.port <= 65535:
        options.error(f"--port {args.port}: a TCP port is 1-65535")
    workers = args.workers if args.workers is not None else int(os.environ.get("WEB_CONCURRENCY") or 1)
    if workers < 1:
        options.error(f"--workers {workers}: at least 1")
    if args.worker or workers == 1:
        return serve(args)
    return supervise(args, workers, sys.argv[1:] if argv is None else argv)


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port) that other workers may bind too."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.listen(2048)  # uvicorn's default backlog
    sock.set_inheritable(True)
    return sock


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's Server with its housekeeping tick once a second, not every 0.1 s (the
        Date header it updates has a resolution of a second), and woken at once by a signal
        to stop."""

        _wake: asyncio.Event | None = None
        _loop: asyncio.AbstractEventLoop | None = None

        receiver = None  # the stream worker's controlplane.handoff.Receiver

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.receiver is not None and self.started:
                self.receiver.start()

        async def shutdown(self, sockets=None) -> None:
            if self.receiver is not None:
                self.receiver.stop()  # no more connections handed over
            await super().shutdown(sockets=sockets)

        async def main_loop(self) -> None:
            self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
            counter = 0
            should_exit = await self.on_tick(counter)
            while not should_exit:
                counter = (counter + 10) % 864000  # what on_tick counts as one second
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
                should_exit = await self.on_tick(counter)

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            if self._loop is not None and self._wake is not None:
                self._loop.call_soon_threadsafe(self._wake.set)

    return Server


def _stop_with_parent() -> None:
    """A worker gets SIGTERM when its supervisor dies, even of SIGKILL (Linux: PR_SET_PDEATHSIG),
    rather than serving on alone."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def serve(args) -> int:
    """One worker: uvicorn on its own socket; or the stream worker, on the connections the
    page workers hand it (controlplane.handoff)."""
    import uvicorn

    from controlplane import handoff

    if args.worker:
        parent = os.getppid()
        _stop_with_parent()
        if os.getppid() != parent:  # the supervisor died before that took effect
            return 1

    handoff_end = handoff.inherited() if args.worker else None
    sockets = []
    if not args.streams:
        try:
            sockets = [listening_socket(args.host, args.port)]
        except OSError as exc:
            print(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    options = {"proxy_headers": args.proxy_headers, "access_log": not args.no_access_log,
               "log_level": args.log_level, "timeout_graceful_shutdown": args.timeout_graceful_shutdown}
    if args.forwarded_allow_ips is not None:
        options["forwarded_allow_ips"] = args.forwarded_allow_ips
    if handoff_end is not None and not args.streams:
        options["http"] = type("HandingOff", (handoff.HandingOff,), {"handoff": handoff_end})
    else:  # one worker, page workers without a stream worker, and the stream worker (handoff.Adopted)
        options["http"] = handoff.Noticing
    server = _server_class()(uvicorn.Config(args.app, host=args.host, port=args.port, **options))
    if args.streams:
        if handoff_end is None:
            print("the stream worker was started without its hand-off socket", file=sys.stderr)
            return 1
        server.receiver = handoff.Receiver(handoff_end, server)
    server.run(sockets=sockets)
    return 0 if server.started else 3


def supervise(args, workers: int, argv: list[str]) -> int:
    """Start ``workers`` worker processes, and the stream worker unless told not to, and keep
    them running until SIGTERM or SIGINT."""
    from controlplane import handoff

    command = [sys.executable, "-m", "controlplane.serve", *argv, "--worker"]
    stopping = {"signal": None}
    procs: dict[int, tuple[subprocess.Popen, float, bool]] = {}
    # The supervisor keeps both ends: a page worker or the stream worker that restarts finds
    # the same pair, and what was handed over while the stream worker restarted waits for it.
    ends = handoff.pair() if args.stream_worker else None

    def start(streams: bool = False) -> None:
        if ends is None:
            proc = subprocess.Popen(command)
        else:
            end = ends[1] if streams else ends[0]
            proc = subprocess.Popen(command + (["--streams"] if streams else []), pass_fds=(end.fileno(),),
                                    env={**os.environ, handoff.ENV: str(end.fileno())})
        procs[proc.pid] = (proc, time.monotonic(), streams)

    def stop(signum, _frame) -> None:
        stopping["signal"] = signum
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    for _ in range(workers):
        start()
    if ends is not None:
        start(streams=True)
    print(f"controlplane.serve: {workers} workers on {args.host}:{args.port}"
          f"{' and a stream worker' if ends is not None else ''} (pid {os.getpid()})", flush=True)
    status = 0
    while procs:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            break
        entry = procs.pop(pid, None)
        if entry is None:
            continue
        proc, started, streams = entry
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        if stopping["signal"] is not None:
            continue
        if time.monotonic() - started < EARLY_EXIT_SECONDS:
            print(f"controlplane.serve: worker {pid} exited at start ({proc.returncode}); stopping",
                  file=sys.stderr, flush=True)
            status = proc.returncode or 1
            stop(signal.SIGTERM, None)
            continue
        print(f"controlplane.serve: {'stream ' if streams else ''}worker {pid} exited ({proc.returncode}); "
              "starting another", file=sys.stderr, flush=True)
        start(streams)
    return status


if __name__ == "__main__":
    sys.exit(main())
