"""Per-user limits on the playground: requests per minute and streams open at once.

Counters live in the Django cache (LocMem by default: per process; configure a shared cache
such as Redis when several web processes serve the playground). Both are plain
add-then-incr counters, atomic in every Django cache backend."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

WINDOW_SECONDS = 60
# A stream's slot is returned when it ends; this only bounds how long a slot leaks if the
# process dies mid-stream.
STREAM_SLOT_TTL = 3600


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused, and after how many seconds it is worth retrying."""

    message: str
    retry_after: int


def _rate_key(user_id: int, window: int) -> str:
    return f"playground:rate:{user_id}:{window}"


def _streams_key(user_id: int) -> str:
    return f"playground:streams:{user_id}"


def acquire(user_id: int, *, now: float | None = None) -> Refusal | None:
    """Count one request and take a stream slot, or say why not. A refused request takes
    nothing; an admitted one must be followed by ``release``."""
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    rate_key = _rate_key(user_id, window)
    count = _incr(rate_key, WINDOW_SECONDS + 5)
    limit = settings.PLAYGROUND_RATE_PER_MINUTE
    if count > limit:
        retry = max(1, int((window + 1) * WINDOW_SECONDS - now + 0.999))
        return Refusal(f"more than {limit} playground requests in a minute", retry)
    streams_key = _streams_key(user_id)
    open_streams = _incr(streams_key, STREAM_SLOT_TTL)
    cap = settings.PLAYGROUND_MAX_CONCURRENT_STREAMS
    if open_streams > cap:
        _decr(streams_key)
        return Refusal(f"{cap} playground streams are already open for this user", 1)
    cache.touch(streams_key, STREAM_SLOT_TTL)
    return None


def release(user_id: int) -> None:
    _decr(_streams_key(user_id))


def open_streams(user_id: int) -> int:
    return int(cache.get(_streams_key(user_id), 0))


def _incr(key: str, timeout: int) -> int:
    cache.add(key, 0, timeout=timeout)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=timeout)
        return 1


def _decr(key: str) -> None:
    try:
        if cache.decr(key) < 0:
            cache.set(key, 0, timeout=STREAM_SLOT_TTL)
    except ValueError:  # the key expired meanwhile: nothing to give back
        pass
