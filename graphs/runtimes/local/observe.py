"""What a local worker really has, read from the running process rather than from its spec:
the /dev/shm its own mount namespace shows, and the KV-transfer backend its log says it
brought up. Django-free; the local operator writes the results to the status cache."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..base import LOG_HEAD_BYTES

SHM_PATH = "/dev/shm"


@dataclass(frozen=True)
class ShmReading:
    bytes: int | None  # None: the process is gone or its namespace cannot be read
    source: str  # how it was read, shown next to the number


def _mountinfo_has_shm(pid: int) -> bool | None:
    """Whether the process's mount namespace has a mount at /dev/shm (None: unreadable)."""
    try:
        text = Path(f"/proc/{pid}/mountinfo").read_text()
    except OSError:
        return None
    # Field 5 of each line is the mount point (proc(5)); spaces in it are escaped as \040.
    return any(len(parts) > 4 and parts[4] == SHM_PATH for parts in (line.split() for line in text.splitlines()))


def process_shm(pid: int) -> ShmReading:
    """The size of /dev/shm as process ``pid`` sees it: statvfs through /proc/PID/root, which
    resolves paths in that process's own mount namespace (a worker started under another
    namespace, a container, sees its own tmpfs, not this host's)."""
    mounted = _mountinfo_has_shm(pid)
    if mounted is None:
        return ShmReading(None, "process not readable")
    try:
        st = os.statvfs(f"/proc/{pid}/root{SHM_PATH}")
    except OSError:
        return ShmReading(None, "no /dev/shm in the process's mount namespace")
    source = "process mount namespace" if mounted else "process mount namespace (no tmpfs at /dev/shm)"
    return ShmReading(st.f_frsize * st.f_blocks, source)


def head_file(path: Path, limit: int = LOG_HEAD_BYTES) -> str:
    """The first ``limit`` bytes of a log: the backend is logged at start."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""
