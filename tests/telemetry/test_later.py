"""telemetry.later.Later: what hot paths pend is written by one thread, once per delay, and
nothing runs while nothing is pending."""

from __future__ import annotations

import threading
import time

from telemetry.later import Later


def _wait(predicate, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_many_dues_make_one_flush_after_the_delay_and_a_later_one_makes_another():
    flushes = []
    later = Later("test-later", 0.1, lambda: flushes.append(time.monotonic()), "test flush failed")
    assert later._thread is None  # nothing pending: no thread
    started = time.monotonic()
    for _ in range(1000):
        later.due()
    assert _wait(lambda: len(flushes) == 1)
    assert flushes[0] - started >= 0.1
    time.sleep(0.3)
    assert len(flushes) == 1  # idle: no more flushes
    later.due()
    assert _wait(lambda: len(flushes) == 2)
    assert sum(t.name == "test-later" for t in threading.enumerate()) == 1


def test_a_flush_that_fails_is_logged_and_the_next_one_still_runs(caplog):
    calls = []

    def flush():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk full")

    later = Later("test-later-failing", 0.05, flush, "test flush failed")
    later.due()
    assert _wait(lambda: len(calls) == 1)
    assert _wait(lambda: "test flush failed" in caplog.text)
    later.due()
    assert _wait(lambda: len(calls) == 2)
