"""The file cache the web workers of one host share under `make up` (CACHE_URL file://...), with
counters that hold under a burst.

Django's FileBasedCache increments by get-then-set and adds by has_key-then-set, so two
processes (or two threads) counting at once both read 3 and both write 4: under `make up`'s two
web workers a burst got 21 streams through a cap of 4 and 22 requests through a limit of 5 a
minute. Here every write (add, incr/decr, set, touch, delete) holds one exclusive lock on a file
of the cache folder (``flock``, django.core.files.locks), so a read-modify-write is one step for
every process of the host; reads take no lock (a value file is replaced whole, by rename). An
increment keeps the counter's own expiry, where Django's resets it to the default timeout."""

from __future__ import annotations

import os
import pickle
import time
import zlib
from contextlib import contextmanager

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.filebased import FileBasedCache
from django.core.files import locks

LOCK_NAME = ".writes.lock"  # not a ``.djcache`` file: clear() and culling leave it


class LockedFileBasedCache(FileBasedCache):
    @contextmanager
    def _writing(self):
        os.makedirs(self._dir, 0o700, exist_ok=True)
        with open(os.path.join(self._dir, LOCK_NAME), "ab") as lock:
            locks.lock(lock, locks.LOCK_EX)
            try:
                yield
            finally:
                locks.unlock(lock)

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        with self._writing():
            if self.has_key(key, version):
                return False
            FileBasedCache.set(self, key, value, timeout, version)  # the lock is held (not re-entrant)
            return True

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        with self._writing():
            super().set(key, value, timeout, version)

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None):
        with self._writing():
            return super().touch(key, timeout, version)

    def delete(self, key, version=None):
        with self._writing():
            return super().delete(key, version)

    def incr(self, key, delta=1, version=None):
        with self._writing():
            try:
                with open(self._key_to_file(key, version), "rb") as f:
                    expiry = pickle.load(f)  # noqa: S301 - our own folder (0700), as FileBasedCache reads it
                    value = pickle.loads(zlib.decompress(f.read()))  # noqa: S301
            except (FileNotFoundError, EOFError, pickle.UnpicklingError, zlib.error):
                raise ValueError(f"Key '{key}' not found") from None
            now = time.time()
            if expiry is not None and expiry < now:
                raise ValueError(f"Key '{key}' not found")
            value += delta
            FileBasedCache.set(self, key, value, None if expiry is None else max(expiry - now, 0.001), version)
            return value
