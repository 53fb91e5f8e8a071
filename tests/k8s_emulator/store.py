"""The object store: a global resourceVersion counter, objects per (group, plural), and the
watch-event history (a bounded log; resuming from before its start is 410 Gone).

Stored objects are never mutated in place: every write stores a new dict, so readers, the
history and watchers can share references without copying.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass
from typing import Any

from .errors import ApiError

Key = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: Key
    obj: dict[str, Any]
    old: dict[str, Any] | None


def obj_key(obj: dict[str, Any]) -> ObjKey:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


class Store:
    def __init__(self, history_limit: int = 10_000, first_rv: int = 1000):
        self.cond = threading.Condition(threading.RLock())
        self.rv = first_rv
        self.history_limit = history_limit
        self.objects: dict[Key, dict[ObjKey, dict[str, Any]]] = {}
        self.history: list[Event] = []
        self._rvs: list[int] = []
        self.floor = first_rv
        self.closed = False
        self.epoch = 0  # bumped by end_watches()

    # -- reads -------------------------------------------------------------------------------------
    def get(self, key: Key, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self.cond:
            return self.objects.get(key, {}).get((namespace or "", name))

    def list(self, key: Key, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects sorted by (namespace, name), as etcd returns them."""
        with self.cond:
            table = self.objects.get(key, {})
            return [table[k] for k in sorted(table) if namespace is None or k[0] == namespace]

    def all_keys(self) -> list[Key]:
        with self.cond:
            return list(self.objects)

    # -- writes ------------------------------------------------------------------------------------
    def commit(self, key: Key, obj: dict[str, Any], event_type: str) -> dict[str, Any]:
        """Store (or, for DELETED, remove) ``obj`` under a new resourceVersion and record the event."""
        with self.cond:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            table = self.objects.setdefault(key, {})
            okey = obj_key(obj)
            old = table.get(okey)
            if event_type == "DELETED":
                table.pop(okey, None)
            else:
                table[okey] = obj
            self.history.append(Event(self.rv, event_type, key, obj, old))
            self._rvs.append(self.rv)
            if len(self.history) > self.history_limit:
                drop = len(self.history) - self.history_limit
                self.floor = self.history[drop - 1].rv
                del self.history[:drop]
                del self._rvs[:drop]
            self.cond.notify_all()
            return obj

    def expire_history(self) -> int:
        """Forget every kept event: a watch resuming from any older resourceVersion gets 410 Gone."""
        with self.cond:
            self.history.clear()
            self._rvs.clear()
            self.floor = self.rv
            return self.rv

    def end_watches(self) -> None:
        """End every open watch stream (cleanly), as an API server restart or a load balancer would."""
        with self.cond:
            self.epoch += 1
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    # -- watch -------------------------------------------------------------------------------------
    def check_resumable(self, since: int) -> None:
        if since < self.floor:
            raise ApiError(410, f"too old resource version: {since} ({self.floor})", "Expired")

    def snapshot(self, key: Key, namespace: str | None) -> tuple[list[dict[str, Any]], int]:
        with self.cond:
            return self.list(key, namespace), self.rv

    def wait(self, key: Key, since: int, deadline: float, epoch: int = 0) -> tuple[list[Event], int]:
        """Block until events for ``key`` newer than ``since`` exist, the deadline passes, the store
        closes or the watch epoch changes. Returns the events and the new position (past
        non-matching events too)."""
        with self.cond:
            while True:
                self.check_resumable(since)
                start = bisect.bisect_right(self._rvs, since)
                events = [e for e in self.history[start:] if e.key == key]
                if events or self.closed or self.epoch != epoch:
                    return events, max(self.rv, since)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return [], max(self.rv, since)
                self.cond.wait(min(remaining, 0.5))
