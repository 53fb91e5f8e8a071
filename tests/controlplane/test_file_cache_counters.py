"""The file cache `make up`'s web workers share (controlplane/filecache.py): its counters hold
under a burst from several processes at once, as the playground's limits need them to."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from controlplane.environment import cache_from_url
from controlplane.filecache import LockedFileBasedCache

PROCESSES = 6
ROUNDS = 40


def _cache(folder: str) -> LockedFileBasedCache:
    spec = cache_from_url(f"file://{folder}")
    assert spec["BACKEND"] == "controlplane.filecache.LockedFileBasedCache"
    return LockedFileBasedCache(spec["LOCATION"], {})


def _count(folder: str, start, out) -> None:
    cache = _cache(folder)
    start.wait()
    for _ in range(ROUNDS):
        cache.add("n", 0, timeout=60)
        cache.incr("n")
    out.put(True)


def _acquire(folder: str, start, out, attempts: int) -> None:
    """What endpoint/limits.py does for each request of one subject, on this cache."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(CACHES={"default": cache_from_url(f"file://{folder}")},
                           PLAYGROUND_RATE_PER_MINUTE=5, PLAYGROUND_MAX_CONCURRENT_STREAMS=4)
    from endpoint import limits

    start.wait()
    out.put(sum(limits.acquire("t:burst", rate=1000, streams=4) is None for _ in range(attempts)))


def _burst(target, *args) -> list:
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, as separate web workers are
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args[:1], start, out, *args[1:])) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    time.sleep(1.0)
    start.set()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return results


def test_increments_from_many_processes_at_once_are_all_counted(tmp_path):
    _burst(_count, str(tmp_path))
    assert _cache(str(tmp_path)).get("n") == PROCESSES * ROUNDS


def test_a_burst_from_many_processes_gets_exactly_the_stream_cap(tmp_path):
    """Six workers each try 10 streams of one subject at once, none given back: 4 open, no more."""
    admitted = _burst(_acquire, str(tmp_path), 10)
    assert sum(admitted) == 4
    assert _cache(str(tmp_path)).get("playground:streams:t:burst") == 4


def test_an_increment_keeps_the_counter_s_expiry(tmp_path):
    cache = _cache(str(tmp_path))
    cache.add("short", 0, timeout=1)
    assert cache.incr("short", 5) == 5
    time.sleep(1.2)
    assert cache.get("short") is None
    with pytest.raises(ValueError):
        cache.incr("short")
    cache.set("forever", 1, timeout=None)
    assert cache.incr("forever") == 2 and cache.decr("forever", 2) == 0
