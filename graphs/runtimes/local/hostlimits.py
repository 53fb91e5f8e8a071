"""Kernel limits of this host that Dynamo processes run into before any limit of ours.

Each Dynamo frontend with file discovery holds inotify instances (10 for dynamo.frontend 1.6.1,
measured: its /proc/<pid>/fd entries that read ``anon_inode:inotify``; mocker workers hold
none). The kernel allows ``fs.inotify.max_user_instances`` per user (128 by default on most
distributions): at that default a host tops out near 12 local graphs, and the next frontend
fails at start with "Too many open files", which reads like a file-descriptor limit."""

from __future__ import annotations

import os
from pathlib import Path

INOTIFY_LIMIT_FILE = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_FRONTEND = 10
INOTIFY_RAISE = ("raise it: sudo sysctl -w fs.inotify.max_user_instances=1024 (and put "
                 "fs.inotify.max_user_instances=1024 in /etc/sysctl.d/99-dynamo.conf to keep it after a reboot)")


def inotify_limit() -> int | None:
    try:
        return int(INOTIFY_LIMIT_FILE.read_text().strip())
    except (OSError, ValueError):
        return None


def inotify_in_use(uid: int | None = None) -> int:
    """inotify instances held by the processes of ``uid`` (default: ours), as the kernel counts
    them against the limit."""
    uid = os.getuid() if uid is None else uid
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                try:
                    if os.readlink(fd.path) == "anon_inode:inotify":
                        count += 1
                except OSError:
                    continue
        except OSError:
            continue
    return count


def inotify_problem(new_frontends: int) -> str:
    """Why ``new_frontends`` more Dynamo frontends would not start here, or ""."""
    limit = inotify_limit()
    if not new_frontends or limit is None:
        return ""
    used = inotify_in_use()
    needed = new_frontends * INOTIFY_PER_FRONTEND
    if used + needed <= limit:
        return ""
    return (f"the host's inotify instances are used up: fs.inotify.max_user_instances is {limit}, {used} are in use, "
            f"and {new_frontends} more frontend{'s' if new_frontends != 1 else ''} need about {needed} "
            f"({INOTIFY_PER_FRONTEND} each, for file discovery); {INOTIFY_RAISE}, or delete another local graph")


def explains_too_many_open_files(text: str) -> bool:
    return "Too many open files" in (text or "") or "os error 24" in (text or "")
