"""aiperf as a child process: start it in its own process group, follow it, stop it.

aiperf's controller forks a dozen service processes (workers, record processors, dataset
manager...). They ignore SIGTERM by design (aiperf.common.bootstrap: a SIGTERM inside C
extension code crashed them) and die with their controller (PR_SET_PDEATHSIG). So a stop is:
SIGTERM to the group (the controller shuts down cleanly and still writes what it has), then
SIGKILL to whatever of the group is left after a grace period, then wait until none is."""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from graphs.runtimes.processes import group_members, proc_stat, stop_groups

STOP_GRACE = 8.0


def hostname() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class ProcessRef:
    """Enough to find a process group again from another process on the same host."""

    pgid: int
    start_ticks: int  # the leader's start time, from /proc: a reused pid has another one


def _alive_members(ref: ProcessRef) -> list[int]:
    return group_members(ref.pgid, started_since=ref.start_ticks)


def stop_group(ref: ProcessRef, grace: float = STOP_GRACE, reap=lambda: None) -> bool:
    """SIGTERM, then SIGKILL after ``grace`` (processes.stop_groups); True once no member of the
    group is left."""
    if ref.pgid <= 1 or ref.pgid == os.getpgrp():
        return False  # never our own group, never init
    return stop_groups([ref.pgid], grace, reap, started_since=ref.start_ticks)


class Invocation:
    """One ``aiperf profile`` process: its output goes to ``log_path`` (appended: a sweep's
    invocations share one log)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log_path: Path):
        self.argv, self.env, self.cwd, self.log_path = argv, env, cwd, log_path
        self.popen: subprocess.Popen | None = None
        self.ref: ProcessRef | None = None

    def start(self) -> ProcessRef:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {shlex.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                          close_fds=True)
        pid = self.popen.pid
        self.ref = ProcessRef(pgid=pid, start_ticks=(proc_stat(pid) or ("", 0, 0))[2])
        return self.ref

    def poll(self) -> int | None:
        return self.popen.poll() if self.popen else None

    def stop(self, grace: float = STOP_GRACE) -> bool:
        if self.popen is None or self.ref is None:
            return True
        gone = stop_group(self.ref, grace, reap=self.popen.poll)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=2.0)
        return gone

    def finish(self) -> None:
        """After a normal exit: nothing of the group may outlive its controller."""
        if self.ref is not None and _alive_members(self.ref):
            self.stop(grace=2.0)


def log_tail(path: Path, lines: int = 40, max_bytes: int = 64_000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
