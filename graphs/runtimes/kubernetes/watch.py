"""Cluster watchers: keep the status cache of Kubernetes graphs current, so that pages and
the API read the database and never a cluster.

One ``ClusterWatcher`` per registered cluster. In every namespace graphs use there it lists,
then watches, three things: DynamoGraphDeployments, the pods carrying the operator's graph
label (``nvidia.com/dynamo-graph-deployment-name``), and events. After every change it turns
what it holds into Pod, Event and Deployment rows (cache_writing.py; observe.py translates). A
watch whose resourceVersion expired (410 Gone) lists again; a cluster that does not answer is marked
unreachable and its graphs' state unknown, keeping the time they were last seen.

Threads: one watch thread per (namespace, resource) keeps the in-memory view current and
signals; only the thread that called ``watch_once`` writes to the database. The operator
process runs ``start_cluster_watchers()`` (manage.py runoperator), one thread per cluster, whose
watch threads outlive its cycles: each renews its own stream where the last one ended, so a
change made while the cycle refreshes and starts again waits only for that, not for every
stream of the cluster to be opened anew (``keep_watching``)."""

from __future__ import annotations

import logging
import queue
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import F, Q
from django.utils import timezone

from clusters.kubernetes import KubeClient, KubeFailure, connect, gpus_of, read_nodes, served_versions
from clusters.selectors import cluster_found, cluster_stamps
from clusters.services import cluster_unreachable, cluster_watched

from ...models import Deployment, GraphState
from ...status_cache import state_record
from .cache_writing import CacheWriting
from .facts import WorkerFacts
from .observe import dgd_name
from .streams import KINDS, NamespaceView, Streams

log = logging.getLogger(__name__)

BATCH_SECONDS = 0.05  # a burst of watch events becomes one write of the status cache


class ClusterWatcher(Streams, CacheWriting):
    def __init__(self, cluster_id: int, stop: threading.Event | None = None):
        self.cluster_id = cluster_id
        self.stop = stop or threading.Event()
        self.views: dict[str, NamespaceView] = {}
        self.lock = threading.Lock()
        self.dgd_version = ""
        self.dgdsa_version = ""  # "" where the cluster has no DGDSA CRD
        self.logs: dict[tuple[str, int], str] = {}  # (pod, restarts) -> last log lines
        self.facts = WorkerFacts()  # NIXL backend and df of /dev/shm, once per container start
        self.events_written: dict[tuple[int, str], str] = {}  # (deployment, event name) -> lastTimestamp
        self.gpus_read_at: float | None = None  # when free GPUs were last counted (monotonic)
        # Kept across cycles (watch_once(keep_watching=True)): the watch threads, each with its
        # own stop, by (namespace, resource); the client they share; where they send changes.
        self.watches: dict[tuple[str, str], tuple[threading.Thread, threading.Event]] = {}
        self.kube: KubeClient | None = None
        self.changes: queue.Queue = queue.Queue()

    # ---------------------------------------------------------------- one cycle

    def watch_once(self, timeout: int = 30, *, keep_watching: bool = False) -> bool | None:
        """List what was never listed (or expired), then watch for ``timeout`` seconds,
        writing the status cache after every change. False when the cluster did not answer;
        None when the cluster is no longer registered. ``keep_watching``: the watch threads and
        their client stay after the cycle, and the next cycle goes on from them (run_forever);
        otherwise they end with it.

        Every graph is written from a listing; after that, only the graphs a change concerns.
        A watch resumes where the last one ended, so a cycle that follows another writes, before
        its watch, only the namespaces it had to list, and at its end moves the observed time of
        the graphs that did not change in one statement (refresh). ``timeout=0`` (a one-off
        refresh) writes every graph from what the watcher holds."""
        cluster = cluster_found(self.cluster_id)
        if cluster is None:
            self.end_watches()
            return None
        try:
            kube = self.kube or connect(cluster)
        except KubeFailure as exc:
            self._unreachable(cluster, exc)
            return False
        self.kube = kube if keep_watching else None
        try:
            return self._cycle(cluster, kube, timeout, keep_watching)
        finally:
            if not keep_watching:
                self.end_watches()
                kube.close()

    def _cycle(self, cluster, kube: KubeClient, timeout: int, keep_watching: bool) -> bool:
        """watch_once's work, with the cluster found and its client connected."""
        namespaces = self._namespaces(cluster)
        errors: list[str] = []
        try:
            if not self.dgd_version:
                versions, adapters = self._guard(lambda: served_versions(kube), errors) or ([], [])
                self.dgd_version = "v1beta1" if "v1beta1" in versions else (versions[0] if versions else "")
                self.dgdsa_version = "v1beta1" if "v1beta1" in adapters else (adapters[0] if adapters else "")
            listed = set()
            for namespace in namespaces:
                for kind in KINDS:
                    if self._path(namespace, kind) and kind not in self._view(namespace).versions:
                        self._guard(lambda ns=namespace, k=kind: self._list(kube, ns, k), errors)
                        listed.add(namespace)
            # Free GPUs are counted from every pod of the cluster (tens of thousands in a
            # fleet: seconds of parsing): the first time before the watch; after that beside
            # it, every KUBERNETES_GPU_READ_SECONDS, so that a cycle starts watching at once.
            # The nodes are read every cycle (a cluster that does not answer is found by
            # this one small call).
            nodes = self._guard(lambda: read_nodes(kube), errors)
            first = timeout <= 0 or self.gpus_read_at is None
            due = first or time.monotonic() - self.gpus_read_at >= settings.KUBERNETES_GPU_READ_SECONDS
            beside = due and not first and nodes is not None
            gpus = self._guard(lambda: gpus_of(kube, nodes), errors) if first and nodes is not None else None
        except KubeFailure as exc:
            self._unreachable(cluster, exc)
            return False
        if due:
            self.gpus_read_at = time.monotonic()
        self._flush(cluster, kube, namespaces if timeout <= 0 else sorted(listed))
        self._seen(cluster, gpus, errors)
        if timeout > 0 and not self.stop.is_set():
            reading: dict = {}
            reader = threading.Thread(target=self._read_gpus, args=(kube, nodes, reading), daemon=True,
                                      name=f"gpus-{cluster.name}") if beside else None
            if reader:
                reader.start()
            failures = self._watch_all(cluster, kube, namespaces, timeout, keep_watching)
            if reader:
                reader.join()
                failures += reading.get("failures", [])
            lost = [f for f in failures if f.transient or f.unreachable]
            if lost:
                self._unreachable(cluster, lost[0])
                return False
            self._refresh(cluster, kube, namespaces)
            self._seen(cluster, reading.get("gpus"), errors + [str(f) for f in failures])
        return True

    @staticmethod
    def _read_gpus(kube: KubeClient, nodes: list[dict], into: dict) -> None:
        try:
            into["gpus"] = gpus_of(kube, nodes)
        except KubeFailure as exc:
            into["failures"] = [exc]

    def _refresh(self, cluster, kube: KubeClient, namespaces: list[str]) -> None:
        """The end of a cycle whose watches wrote every change as it came: the graphs whose rows
        may not show what the watcher holds (never observed, or a generation applied and not yet
        observed) are written; every other graph was current all along, and its observed time
        moves to now."""
        graphs = Deployment.objects.filter(runtime="kubernetes", cluster=cluster, namespace__in=namespaces).in_use()
        behind: dict[str, set[str]] = {}
        for namespace, graph, manifest in graphs.filter(Q(observed_at__isnull=True) | Q(
                observed_generation__lt=F("generation"))).values_list("namespace", "graph__name", "manifest"):
            behind.setdefault(namespace, set()).add(dgd_name(manifest, graph))
        if behind:
            self._flush(cluster, kube, sorted(behind), only=behind)
        graphs.update(observed_at=timezone.now())

    def _watch_all(self, cluster, kube: KubeClient, namespaces: list[str], timeout: int,
                   keep_watching: bool = False) -> list[KubeFailure]:
        """Write every change the watch threads report for ``timeout`` seconds (until every
        thread ended, unless ``keep_watching``: they go on after it). The threads of namespaces
        no longer used are stopped; the missing ones, or ones that ended, are started."""
        deadline = time.monotonic() + timeout
        changes = self._start_watches(kube, namespaces, None if keep_watching else deadline)
        failures: list[KubeFailure] = []
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if keep_watching and left <= 0:
                break
            with self.lock:
                alive = any(thread.is_alive() for thread, _ in self.watches.values())
            try:
                items = [changes.get(timeout=min(0.05, max(left, 0.001)) if alive else 0)]
            except queue.Empty:
                if alive:
                    continue
                break
            time.sleep(BATCH_SECONDS)
            while not changes.empty():
                items.append(changes.get_nowait())
            failures += [i for i in items if isinstance(i, KubeFailure)]
            whole = {i for i in items if isinstance(i, str)}
            graphs: dict[str, set[str]] = {}
            for namespace, name in (i for i in items if isinstance(i, tuple)):
                if namespace not in whole:
                    graphs.setdefault(namespace, set()).add(name)
            if whole:
                self._flush(cluster, kube, sorted(whole))
            if graphs:
                self._flush(cluster, kube, sorted(graphs), only=graphs)
        return failures

    @staticmethod
    def _guard(call, errors: list[str]):
        """Run ``call``; a refusal (403, 404...) is noted and the rest goes on; a cluster
        that does not answer (or answers 5xx) ends the cycle."""
        try:
            return call()
        except KubeFailure as exc:
            if exc.transient or exc.unreachable:
                raise
            errors.append(str(exc))
            return None

    def _seen(self, cluster, gpus, errors: list[str]) -> None:
        cluster_watched(cluster=cluster, gpus=gpus, error="; ".join(errors))

    def _unreachable(self, cluster, failure: KubeFailure) -> None:
        """Say so on the cluster and on its graphs, keeping when they were last seen."""
        log.warning("cluster %s: %s", cluster.name, failure)
        self.end_watches()
        with self.lock:
            self.views.clear()  # once it answers again: listed anew, and every graph written from it
            self.gpus_read_at = None
        cluster_unreachable(cluster=cluster, error=str(failure))
        for dep in Deployment.objects.filter(runtime="kubernetes", cluster=cluster).in_use():
            seen = dep.observed_at.strftime("%Y-%m-%d %H:%M:%S UTC") if dep.observed_at else "never"
            state_record(dep, state=GraphState.UNKNOWN,
                         message=f"cluster {cluster.name} is not answering (last seen {seen}): {failure}")

    # ---------------------------------------------------------------- forever

    def run_forever(self) -> None:
        failures = 0
        try:
            while not self.stop.is_set():
                close_old_connections()
                try:
                    ok = self.watch_once(settings.KUBERNETES_WATCH_SECONDS, keep_watching=True)
                except Exception:
                    log.exception("watching cluster %s failed", self.cluster_id)
                    self.end_watches()
                    ok = False
                if ok is None:
                    return
                failures = 0 if ok else failures + 1
                if failures:
                    self.stop.wait(min(60, 2**failures))
        finally:
            self.end_watches()
            connection.close()


_WATCHERS: dict[tuple[int, str], ClusterWatcher] = {}


def watch_once(cluster, timeout: int = 5) -> bool | None:
    """One list-and-watch cycle of a cluster, resuming where the last call in this process
    stopped (tests and one-off refreshes; the operator process runs ``run_forever``)."""
    watcher = _WATCHERS.setdefault((cluster.pk, str(cluster.created_at)), ClusterWatcher(cluster.pk))
    return watcher.watch_once(timeout)


def run_cluster_watchers(stop: threading.Event, interval: float = 10.0) -> None:
    """Keep one watcher thread per registered cluster; restart it when an admin edits the
    cluster, stop it when the cluster is removed."""
    running: dict[int, tuple[object, ClusterWatcher, threading.Thread]] = {}
    try:
        while not stop.is_set():
            close_old_connections()
            try:
                clusters = cluster_stamps()
            except Exception:
                log.exception("cannot read the registered clusters")
                clusters = {pk: stamp for pk, (stamp, _, _) in running.items()}
            for pk, (stamp, watcher, thread) in list(running.items()):
                if clusters.get(pk) != stamp or not thread.is_alive():
                    watcher.stop.set()
                    del running[pk]
            for pk, stamp in clusters.items():
                if pk not in running:
                    watcher = ClusterWatcher(pk)
                    thread = threading.Thread(target=watcher.run_forever, daemon=True, name=f"cluster-watch-{pk}")
                    thread.start()
                    running[pk] = (stamp, watcher, thread)
            stop.wait(interval)
    finally:
        for _, watcher, _ in running.values():
            watcher.stop.set()
        connection.close()


def start_cluster_watchers() -> threading.Event:
    """Start the watchers in a daemon thread; set the returned event to stop them."""
    stop = threading.Event()
    threading.Thread(target=run_cluster_watchers, args=(stop,), daemon=True, name="cluster-watchers").start()
    return stop
