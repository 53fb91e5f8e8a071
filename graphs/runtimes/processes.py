"""Host processes and loopback ports, for the local runtime and the benchmark runner alike.

Django-free and Dynamo-free: free-port allocation on 127.0.0.1, waiting for a condition,
reading process groups from /proc, and stopping them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

LOOPBACK = "127.0.0.1"


class PortRangeExhausted(RuntimeError):
    pass


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    # No SO_REUSEADDR: stricter than the servers' own bind, so a port in use is never handed out.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def allocate_ports(count: int, lo: int, hi: int, taken: set[int]) -> list[int]:
    """``count`` ports in [lo, hi] free on 127.0.0.1 now and not in ``taken``."""
    found: list[int] = []
    for port in range(max(lo, 1), min(hi, 65535) + 1):
        if port not in taken and port_is_free(port):
            found.append(port)
            if len(found) == count:
                return found
    raise PortRangeExhausted(f"need {count} free ports on {LOOPBACK} in {lo}-{hi}, found {len(found)} "
                             f"({len(taken)} already taken by local graphs); widen the port range")


T = TypeVar("T")


def wait_until(predicate: Callable[[], T], *, timeout: float, interval: float = 0.25,
               what: str = "condition") -> T:
    """Call ``predicate`` until it returns something truthy, which is returned; TimeoutError after."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)

# --- /proc helpers ------------------------------------------------------------------------------

def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time in clock ticks since boot) from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may contain spaces and ")"
    return fields[0], int(fields[2]), int(fields[19])


def group_members(pgid: int, *, started_since: int = 0) -> list[int]:
    """Live (non-zombie) processes of a process group, optionally started at/after a tick."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := proc_stat(int(entry))) and st[1] == pgid and st[0] != "Z" \
                and st[2] >= started_since:
            members.append(int(entry))
    return members


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; never to our own group or init, and a group that
    is gone is no error."""
    if pgid <= 1 or pgid == os.getpgrp():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_groups(pgids: Sequence[int], grace: float, reap: Callable[[], None] = lambda: None, *,
                started_since: int = 0) -> bool:
    """SIGTERM each group that has members, SIGKILL what is left after ``grace`` seconds, then
    wait up to 5 s until none is left (``reap``: collect our own children meanwhile). True once
    no member is left. Members are those ``group_members`` counts (``started_since``: a pgid
    reused by a later process is not ours), and only groups with members are signalled."""

    def alive() -> list[int]:
        return [pgid for pgid in pgids if group_members(pgid, started_since=started_since)]

    reap()
    left = alive()
    for pgid in left:
        signal_group(pgid, signal.SIGTERM)
    for limit, then in ((grace, signal.SIGKILL), (5.0, None)):
        deadline = time.monotonic() + limit
        while left and time.monotonic() < deadline:
            reap()
            time.sleep(0.05)
            left = alive()
        if not left:
            return True
        if then is None:
            return False
        for pgid in left:
            signal_group(pgid, then)
    return not left
