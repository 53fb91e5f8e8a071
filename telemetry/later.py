"""Writes kept off a hot path: what a request records is added up in the process, and one
thread writes it a fixed delay after the first of it (telemetry.instruments' metrics, the
OpenAI endpoint's limit counts in endpoint.counting). With nothing pending the thread sleeps on an
event, not a clock: an idle process does not wake up for it. A forked child starts with no
thread and a fresh lock (its parent writes what the parent recorded; the caller's own fork hook
drops the child's copy of the pending values)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Later:
    """``flush`` run by a thread ``seconds`` after ``due()`` was first called since the last run.
    ``lock``: what the caller guards its pending values with (replaced in a forked child)."""

    def __init__(self, name: str, seconds: float, flush: Callable[[], None], failed: str) -> None:
        self.name = name
        self.seconds = seconds
        self.flush = flush
        self.failed = failed  # the warning logged when a flush raises
        self.lock = threading.Lock()
        self._due = threading.Event()
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forget)

    def due(self) -> None:
        """Something is pending: have it written within ``seconds``."""
        if self._due.is_set():  # the thread is awake and will write it too
            return
        self._due.set()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._due.wait()
            time.sleep(self.seconds)
            self._due.clear()  # before flush(): what is recorded from here on sets it again
            try:
                self.flush()
            except Exception:  # a full disk, a cache that is down: these are lost, the next ones are tried
                log.warning(self.failed, exc_info=True)

    def _forget(self) -> None:
        self.lock = threading.Lock()  # another thread may have held the parent's at the fork
        self._due.clear()
        self._thread = None
