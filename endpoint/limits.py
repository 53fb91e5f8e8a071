"""Limits on the OpenAI endpoint: requests per minute and streams open at once, per subject
(a user, or a token that has its own limits: admission.limits_for says which, and how much).

Counters live in the Django cache (LocMem by default: per process; a shared cache, Redis or a
file cache, when several web processes serve the endpoint). Both are add-then-incr counters.
With a shared cache, counting.py checks them in line only near a limit."""

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


def _subject(subject: int | str) -> str:
    return f"u:{subject}" if isinstance(subject, int) else subject


def _rate_key(subject: str, window: int) -> str:
    return f"playground:rate:{subject}:{window}"


def _streams_key(subject: str) -> str:
    return f"playground:streams:{subject}"


def window_of(now: float) -> int:
    return int(now // WINDOW_SECONDS)


def acquire(subject: int | str, *, rate: int | None = None, streams: int | None = None,
            now: float | None = None) -> Refusal | None:
    """Count one request of ``subject`` (a user id, or a limits subject such as "t:<token
    id>") and take a stream slot, or say why not. ``rate`` and ``streams`` default to the
    settings. A refused request takes nothing; an admitted one must be followed by ``release``."""
    return acquire_counted(subject, rate=rate, streams=streams, now=now)[0]


def acquire_counted(subject: int | str, *, rate: int | None = None, streams: int | None = None,
                    now: float | None = None) -> tuple[Refusal | None, int, int]:
    """``acquire``, and the counts it saw: (refusal, requests this minute, streams open)."""
    subject = _subject(subject)
    now = time.time() if now is None else now
    window = window_of(now)
    count = _incr(_rate_key(subject, window), WINDOW_SECONDS + 5)
    limit = settings.PLAYGROUND_RATE_PER_MINUTE if rate is None else rate
    who = "this token" if subject.startswith("t:") else "this user"
    if count > limit:
        retry = max(1, int((window + 1) * WINDOW_SECONDS - now + 0.999))
        return Refusal(f"more than {limit} requests in a minute for {who}", retry), count, open_streams(subject)
    streams_key = _streams_key(subject)
    open_now = _incr(streams_key, STREAM_SLOT_TTL)
    cap = settings.PLAYGROUND_MAX_CONCURRENT_STREAMS if streams is None else streams
    if open_now > cap:
        _decr(streams_key)
        return Refusal(f"{cap} streams are already open for {who}", 1), count, open_now - 1
    cache.touch(streams_key, STREAM_SLOT_TTL)
    return None, count, open_now


def count_event(name: str, per_minute: int, *, now: float | None = None) -> int | None:
    """Count one event of ``name`` in this minute's window; None if within ``per_minute``, else
    the seconds until the next window (the event is counted either way)."""
    now = time.time() if now is None else now
    window = window_of(now)
    if _incr(f"playground:events:{name}:{window}", WINDOW_SECONDS + 5) <= per_minute:
        return None
    return max(1, int((window + 1) * WINDOW_SECONDS - now + 0.999))


def add_requests(subject: str, window: int, n: int) -> int:
    """Count ``n`` requests of ``subject`` in rate window ``window`` unchecked (counting.py);
    the count so far."""
    return _incr(_rate_key(subject, window), WINDOW_SECONDS + 5, n)


def add_streams(subject: str, n: int) -> int:
    """Take (n > 0) or give back (n < 0) stream slots unchecked (counting.py); the slots open."""
    key = _streams_key(subject)
    if n >= 0:
        return _incr(key, STREAM_SLOT_TTL, n)
    try:
        value = cache.decr(key, -n)
    except ValueError:  # expired meanwhile: nothing to give back
        return 0
    if value < 0:
        cache.set(key, 0, timeout=STREAM_SLOT_TTL)
        return 0
    return value


def release(subject: int | str) -> None:
    _decr(_streams_key(_subject(subject)))


def open_streams(subject: int | str) -> int:
    return int(cache.get(_streams_key(_subject(subject)), 0))


def _incr(key: str, timeout: int, delta: int = 1) -> int:
    cache.add(key, 0, timeout=timeout)
    try:
        return cache.incr(key, delta)
    except ValueError:  # expired between add and incr
        cache.set(key, delta, timeout=timeout)
        return delta


def _decr(key: str) -> None:
    try:
        if cache.decr(key) < 0:
            cache.set(key, 0, timeout=STREAM_SLOT_TTL)
    except ValueError:  # the key expired meanwhile: nothing to give back
        pass
