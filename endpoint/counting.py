"""The OpenAI endpoint's limits, checked without I/O on the hot path.

With the cache in memory (one web process) the counters of limits.py are checked in line: a
dict behind a lock, microseconds. A shared cache (Redis, or the file cache of several web
workers on one host) costs a thread hop and about 1.5 ms of I/O per update, several updates a
request. So then a subject that, as this process last saw it, is under half of both its limits
is admitted at once and its counts (the request, the stream slot, the slot's return) are only
added up here; a thread writes them to the shared cache every FLUSH_SECONDS, one update per
subject whatever the number of requests (a file cache's update is several files written and
renamed: at 0.2 s, profiled under 16 streams, the flushes were a third of the endpoint's CPU
per request). A subject near a limit is checked in line, after
this process's own pending counts are written: the limits hold at their edge, give or take
what other processes counted in their last FLUSH_SECONDS."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache

from telemetry.later import Later

from . import limits

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
_later = Later("playground-limits", FLUSH_SECONDS, lambda: flush(), "writing the playground's limit counts failed")


@dataclass
class _Seen:
    """A subject's counters as this process last saw them (shared cache only)."""

    window: int
    requests: int
    streams: int


_seen: dict[str, _Seen] = {}
_pending: dict[tuple[str, int], list[int]] = {}  # (subject, rate window) -> [requests, streams] not yet written


def in_memory() -> bool:
    """Whether the default cache is this process's memory. Read from the settings: taking
    ``caches["default"]`` builds a cache object for every request (Django keeps them per
    asyncio task)."""
    backend = settings.CACHES["default"]["BACKEND"]
    if backend not in _kinds:
        _kinds[backend] = isinstance(caches["default"], LocMemCache)
    return _kinds[backend]


_kinds: dict[str, bool] = {}


def reset() -> None:
    """Forget what this process saw and drop what it has not written (tests)."""
    with _later.lock:
        _pending.clear()
    _seen.clear()


def _pend(subject: str, requests: int, streams: int) -> None:
    window = limits.window_of(time.time())
    with _later.lock:
        entry = _pending.setdefault((subject, window), [0, 0])
        entry[0] += requests
        entry[1] += streams
    _later.due()


def _after_fork_in_child() -> None:
    """A forked child writes only its own counts (the Later starts afresh there too)."""
    _pending.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def flush(subject: str | None = None) -> None:
    """Write this process's pending counts (of ``subject``, or of all) to the shared cache."""
    with _later.lock:
        batch = {key: _pending.pop(key) for key in [k for k in _pending if subject in (None, k[0])]}
    current = limits.window_of(time.time())
    for (name, window), (requests, streams) in batch.items():
        total_requests = limits.add_requests(name, window, requests) if requests and window == current else None
        total_streams = limits.add_streams(name, streams) if streams else None
        seen = _seen.get(name)
        if seen is not None and seen.window == current:  # what every process counted so far
            if total_requests is not None:
                seen.requests = max(seen.requests, total_requests)
            if total_streams is not None:
                seen.streams = total_streams


async def acquire(subject: str, rate: int, streams: int) -> limits.Refusal | None:
    """Count one request of ``subject`` and take a stream slot, or say why not (limits.acquire)."""
    if in_memory():
        return limits.acquire(subject, rate=rate, streams=streams)
    window = limits.window_of(time.time())
    seen = _seen.get(subject)
    if (seen is not None and seen.window == window and 2 * (seen.requests + 1) <= rate
            and 2 * (seen.streams + 1) <= streams):
        seen.requests += 1
        seen.streams += 1
        _pend(subject, 1, 1)
        return None

    def in_line() -> tuple[limits.Refusal | None, int, int]:
        flush(subject)
        return limits.acquire_counted(subject, rate=rate, streams=streams)

    refusal, requests, open_now = await sync_to_async(in_line, thread_sensitive=False)()
    _seen[subject] = _Seen(window, requests, open_now)
    return refusal


def release(subject: str) -> None:
    """Give a stream slot back (no I/O with a shared cache: it is written with the next flush)."""
    if in_memory():
        limits.release(subject)
        return
    seen = _seen.get(subject)
    if seen is not None:
        seen.streams = max(0, seen.streams - 1)
    _pend(subject, 0, -1)
