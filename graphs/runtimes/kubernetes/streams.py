"""The watching half of ClusterWatcher (graphs.runtimes.kubernetes.watch): one thread per
(namespace, resource) holds a watch stream, applies each event to the in-memory view of that
namespace and reports which graphs it concerns. HTTP and memory only: the thread that runs the
cycle writes the database (cache_writing.py)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from django.conf import settings

from clusters.kubernetes import DGD, DGDSA, KubeClient, KubeFailure, WatchExpired
from clusters.resources import core_path, custom_path

from .observe import DGD_LABEL, concerned_graphs, event_record

log = logging.getLogger(__name__)

KINDS = ("dgds", "dgdsas", "pods", "events")
MAX_EVENTS = 2000  # per namespace: events of unrelated objects are kept only this long


@dataclass
class NamespaceView:
    """What the watcher knows of one namespace: objects by name, and where to resume."""

    objects: dict[str, dict[str, dict]] = field(default_factory=lambda: {k: {} for k in KINDS})
    versions: dict[str, str] = field(default_factory=dict)  # kind -> resourceVersion


class Streams:
    """Needs ``cluster_id``, ``stop``, ``lock``, ``views``, ``dgd_version``, ``dgdsa_version``,
    and, kept across cycles, ``watches`` (by (namespace, resource): the thread and its own
    stop), ``kube`` (the client they share) and ``changes`` (where they report)."""

    def _start_watches(self, kube: KubeClient, namespaces: list[str], deadline: float | None) -> queue.Queue:
        """One thread per (namespace, resource) to watch; ``deadline``: when they end (None:
        when they are stopped). Returns the queue they report to."""
        wanted = {(namespace, kind) for namespace in namespaces for kind in KINDS if self._path(namespace, kind)}
        with self.lock:
            for key, (thread, stop) in list(self.watches.items()):
                if key not in wanted or not thread.is_alive():
                    stop.set()
                    del self.watches[key]
            for namespace, kind in sorted(wanted - set(self.watches)):
                stop = threading.Event()
                thread = threading.Thread(target=self._watch, daemon=True,
                                          args=(kube, namespace, kind, deadline, self.changes, stop),
                                          name=f"watch-{self.cluster_id}-{namespace}-{kind}")
                self.watches[(namespace, kind)] = (thread, stop)
                thread.start()
            return self.changes

    def end_watches(self) -> None:
        """Stop the watch threads (each ends with its current stream, reporting to a queue no
        one reads any more) and let their client go."""
        with self.lock:
            watches, self.watches = self.watches, {}
            kube, self.kube = self.kube, None
            self.changes = queue.Queue()
        for _thread, stop in watches.values():
            stop.set()
        if kube is not None:
            kube.close()

    def _watch(self, kube: KubeClient, namespace: str, kind: str, deadline: float | None, changes: queue.Queue,
               stop: threading.Event) -> None:
        """One resource of one namespace until ``deadline`` (None: until stopped), each stream
        held KUBERNETES_WATCH_SECONDS at most and renewed where it ended: HTTP and memory only."""
        view = self._view(namespace)
        first = True
        while not (self.stop.is_set() or stop.is_set()):
            left = deadline - time.monotonic() if deadline is not None else settings.KUBERNETES_WATCH_SECONDS
            if left < 0.5 and not first:
                return
            first = False
            try:
                if kind not in view.versions:
                    self._list(kube, namespace, kind)
                    changes.put(namespace)
                    continue
                began = time.monotonic()
                for event in kube.watch(self._path(namespace, kind), what=f"watch {kind} in {namespace}",
                                        resource_version=view.versions[kind], timeout=max(1, round(left)),
                                        label_selector=DGD_LABEL if kind == "pods" else ""):
                    concerned = self._apply(view, kind, event)
                    if concerned is None:  # a graph it cannot name: every graph of the namespace
                        changes.put(namespace)
                    for name in concerned or ():
                        changes.put((namespace, name))
                if time.monotonic() - began < 0.2:
                    time.sleep(0.2)  # a server that ends streams at once is not hammered
            except WatchExpired:
                log.info("watch of %s in %s expired (410): listing again", kind, namespace)
                with self.lock:
                    view.versions.pop(kind, None)
            except KubeFailure as exc:
                changes.put(exc)
                return

    # ---------------------------------------------------------------- the view

    def _view(self, namespace: str) -> NamespaceView:
        with self.lock:
            return self.views.setdefault(namespace, NamespaceView())

    def _path(self, namespace: str, kind: str) -> str:
        if kind == "dgds":
            return custom_path(f"nvidia.com/{self.dgd_version}", DGD, namespace) if self.dgd_version else ""
        if kind == "dgdsas":
            return custom_path(f"nvidia.com/{self.dgdsa_version}", DGDSA, namespace) if self.dgdsa_version else ""
        return core_path(kind, namespace)

    def _list(self, kube: KubeClient, namespace: str, kind: str) -> None:
        listing = kube.list(self._path(namespace, kind), what=f"list {kind} in {namespace}",
                            label_selector=DGD_LABEL if kind == "pods" else "")
        items = {(o.get("metadata") or {}).get("name"): o for o in listing.get("items") or []}
        view = self._view(namespace)
        with self.lock:
            view.objects[kind] = items
            view.versions[kind] = str((listing.get("metadata") or {}).get("resourceVersion") or "0")

    def _apply(self, view: NamespaceView, kind: str, event: dict) -> set[str] | None:
        """The event applied to the view; the names of the DGDs whose graphs it concerns (a pod
        moved from one to another concerns both), or None when it cannot tell."""
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        with self.lock:
            store = view.objects[kind]
            # A BOOKMARK (or an ERROR) moves the resourceVersion and concerns no graph.
            changed = event.get("type") in ("ADDED", "MODIFIED", "DELETED")
            concerned = (concerned_graphs(kind, obj, store.get(meta.get("name")), view.objects["dgds"],
                                         view.objects["pods"]) if changed else set())
            if event.get("type") == "DELETED":
                store.pop(meta.get("name"), None)
            elif event.get("type") in ("ADDED", "MODIFIED"):
                store[meta.get("name")] = obj
            if meta.get("resourceVersion"):
                view.versions[kind] = str(meta["resourceVersion"])
            if kind == "events" and len(store) > MAX_EVENTS:
                for name in sorted(store, key=lambda n: event_record(store[n]).at)[: len(store) - MAX_EVENTS]:
                    store.pop(name)
        return concerned

