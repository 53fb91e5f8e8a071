"""The web server's supervisor (controlplane/webserver.py says what it supervises and why).
``manage.py web`` works out the plan, then becomes this script, run by path with ``python -I``:
the standard library only, so the process that only watches the others holds no Django, no
Celery and no application (about 10 MB, not 100).

    python -I controlplane/websupervisor.py '<plan: JSON>'

The plan: ``backends`` (one argv per uvicorn process), ``ports`` (where each listens, on
127.0.0.1), ``nginx`` (its argv, started once every process listens), ``cwd``, ``graceful_s``."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time

CRASH_S, CRASH_LIMIT, BACKOFF_MAX_S = 10.0, 3, 30.0


PR_SET_PDEATHSIG = 1  # linux/prctl.h
try:
    _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
except OSError:
    _LIBC = None


def _dies_with_supervisor(supervisor: int):
    """For ``Popen(preexec_fn=)``: on Linux the child is sent SIGTERM when the supervisor dies,
    however it dies (SIGKILL, the OOM killer), so nginx and the processes never outlive it on
    their ports (a new start would find its port taken). The flag survives the exec of a
    program that is not setuid; a supervisor already gone before it was set is seen by the
    parent's pid."""
    def set_flag() -> None:
        if _LIBC is not None:
            _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != supervisor:
            os.kill(os.getpid(), signal.SIGTERM)
    return set_flag


def _log(line: str) -> None:
    print(f"web: {line}", file=sys.stderr, flush=True)


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


class Supervisor:
    """nginx in front of the uvicorn processes, until SIGTERM or SIGINT. A process that stops is
    started again while nginx sends requests to the others: at once, or, when it stopped within
    ``CRASH_S`` of its start, after a back-off doubling from 0.5 s to ``BACKOFF_MAX_S`` (a
    process that cannot start on a full disk waits for room, and the others keep serving). When
    every process has stopped that way ``CRASH_LIMIT`` times in a row, nothing serves: the server
    stops, and says why (a container's restart policy takes over). Stopping: nginx finishes the
    requests it has (its graceful stop, at most 20 s), the processes theirs."""

    def __init__(self, plan: dict) -> None:
        self.argvs: list[list[str]] = plan["backends"]
        self.ports: list[int] = plan["ports"]
        self.nginx: list[str] = plan["nginx"]
        self.cwd: str = plan["cwd"]
        self.graceful_s: int | None = plan.get("graceful_s")
        self.backends: list[subprocess.Popen | None] = [None] * len(self.argvs)
        self.started = [0.0] * len(self.argvs)
        self.crashes = [0] * len(self.argvs)
        self.restart_at = [0.0] * len(self.argvs)
        self.front: subprocess.Popen | None = None
        self.stopping = False

    def _start_backend(self, i: int) -> subprocess.Popen:
        self.backends[i] = proc = subprocess.Popen(self.argvs[i], cwd=self.cwd,
                                                   preexec_fn=_dies_with_supervisor(os.getpid()))
        self.started[i] = time.monotonic()
        return proc

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        try:
            return self._serve()
        finally:
            self.stop()  # after anything that went wrong; nothing left to stop otherwise

    def _serve(self) -> int:
        for i in range(len(self.argvs)):
            self._start_backend(i)
        for i, proc in enumerate(self.backends):
            if not _wait_listening(self.ports[i], proc, 120):
                _log(f"process {i + 1} did not start (status {proc.poll()}); stopping")
                return 1
        self.front = subprocess.Popen(self.nginx, cwd=self.cwd, preexec_fn=_dies_with_supervisor(os.getpid()))
        _log(f"nginx in front of {len(self.argvs)} uvicorn processes (127.0.0.1:"
             f"{', '.join(map(str, self.ports))}), each request to the least busy")
        while not self.stopping:
            if self.front.poll() is not None:
                _log(f"nginx stopped (status {self.front.returncode}); stopping")
                return 1
            now = time.monotonic()
            for i, proc in enumerate(self.backends):
                if proc is None:
                    if now >= self.restart_at[i]:
                        self._start_backend(i)
                    continue
                if proc.poll() is None:
                    continue
                quick = now - self.started[i] < CRASH_S
                self.crashes[i] = self.crashes[i] + 1 if quick else 1
                self.backends[i] = None
                if all(c >= CRASH_LIMIT for c in self.crashes):
                    _log(f"every process stopped {CRASH_LIMIT} times within {CRASH_S:g} s of its start (process "
                         f"{i + 1}: status {proc.returncode}); stopping")
                    return 1
                # Back off as the kubelet does while the others serve: a full disk, say, passes.
                delay = min(BACKOFF_MAX_S, 0.5 * 2 ** (self.crashes[i] - 1)) if quick else 0.0
                self.restart_at[i] = now + delay
                _log(f"process {i + 1} stopped (status {proc.returncode}); starting it again"
                     + (f" in {delay:g} s" if delay else ""))
            time.sleep(0.5)
        return 0

    def _on_signal(self, *_):
        self.stopping = True

    def stop(self) -> None:
        self.stopping = True
        if self.front is not None and self.front.poll() is None:
            self.front.send_signal(signal.SIGQUIT)  # nginx's graceful stop
        for proc in self.backends:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + (self.graceful_s or 20) + 5
        for proc in [self.front, *self.backends]:
            if proc is None:
                continue
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    sys.exit(Supervisor(json.loads(sys.argv[1])).run())
