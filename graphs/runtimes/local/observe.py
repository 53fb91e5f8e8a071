"""What a local worker really has, read from the running process rather than from its spec:
the /dev/shm its own mount namespace shows, the KV-transfer backend its log says it brought
up, and the Dynamo instance id it registered under. Django-free; the local operator writes the
results to the status cache."""

from __future__ import annotations

import os
import re
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


def worker_pods(discovery: Path, by_port: dict[int, str]) -> dict[str, str]:
    """Instance id -> pod name, from the model cards in a graph's discovery folder: each names
    its metadata URL by its worker's system port (``by_port``: port -> pod name)."""
    out: dict[str, str] = {}
    for card in (discovery / "v1" / "mdc").glob("*"):
        try:
            text = card.read_text()[:100_000]
        except OSError:
            continue
        instance = re.search(r'"instance_id":\s*(\d+)', text)
        port = re.search(r"http://127\.0\.0\.1:(\d+)/v1/metadata/", text)
        if instance and port and int(port.group(1)) in by_port:
            out[instance.group(1)] = by_port[int(port.group(1))]
    return out
