"""What a cluster watcher writes (graphs.runtimes.kubernetes.watch): the status cache of the
Kubernetes graphs in the namespaces it watches, turned from the objects it holds (the DGDs,
their pods, events and scaling adapters) into Pod, Event and Deployment rows, with the
ownership of each pool's replicas, a crash-looping pod's last log and a ready worker's facts."""

from __future__ import annotations

from clusters.kubernetes import KubeClient, KubeFailure, read_log
from clusters.resources import service_name

from ...models import Deployment
from ...status_cache import observation_record
from ..base import Observation, PodStatus
from .observe import DGD_LABEL, caught_up, concerns, dgd_name, event_record, generation_pools, graph_state, pod_status
from .owners import record_ownership

MAX_MEMO = 10_000  # remembered event stamps and crash logs; forgetting them only costs a rewrite
LOG_LINES = 20


class CacheWriting:
    """The writing half of ClusterWatcher: reads its ``views`` under its ``lock``, and keeps
    ``logs`` (crash logs read) and ``events_written`` (event stamps written) across cycles."""

    def _namespaces(self, cluster) -> list[str]:
        used = Deployment.objects.filter(runtime="kubernetes", cluster=cluster).in_use().values_list(
            "namespace", flat=True)
        return sorted({*(cluster.namespaces or []), *used} - {""})

    def _deployments(self, cluster, namespaces: list[str], only: dict[str, set[str]] | None = None) -> list[Deployment]:
        found = Deployment.objects.filter(runtime="kubernetes", cluster=cluster, namespace__in=namespaces)
        if only is not None:  # a graph is named as its DGD, with the dots a graph name cannot have as "-"
            found = found.filter(graph__name__in={n.replace(".", "-") for names in only.values() for n in names})
        return list(found.in_use().select_related("graph", "revision"))

    def _flush(self, cluster, kube: KubeClient, namespaces: list[str], only: dict[str, set[str]] | None = None) -> None:
        """Write the status cache of the graphs in ``namespaces``; ``only``: of those, just the
        graphs whose DGD is named here (what a burst of watch events changed), so that a pod
        changing among 50,000 rewrites its own graph and not its namespace's."""
        for dep in self._deployments(cluster, namespaces, only):
            name = dgd_name(dep.manifest, dep.graph.name)
            if only is not None and name not in only.get(dep.namespace, ()):
                continue
            view = self._view(dep.namespace)
            with self.lock:
                dgd = view.objects["dgds"].get(name)
                pods = [p for p in view.objects["pods"].values()
                        if ((p.get("metadata") or {}).get("labels") or {}).get(DGD_LABEL) == name]
                pod_names = {p["metadata"]["name"] for p in pods}
                events = [e for e in view.objects["events"].values()
                          if concerns(e, name, pod_names)]
                refs = [(((a.get("spec") or {}).get("dgdRef") or {}), a) for a in view.objects["dgdsas"].values()]
                adapters = {r.get("componentName") or r.get("serviceName"): a for r, a in refs if r.get("name") == name}
            statuses = [pod_status(p) for p in pods]
            engine = dep.revision.graph_spec.backend if dep.revision else ""
            for status in statuses:
                if status.phase == "CrashLoopBackOff":
                    status.last_log = self._last_log(kube, dep.namespace, status)
                elif status.ready and status.role in ("prefill", "decode", "worker"):
                    self.facts.observe(kube, dep.namespace, status, engine)
            state, message = graph_state(active=dep.active, dgd=dgd, pods=statuses, name=name,
                                         namespace=dep.namespace, awaiting=dep.observed_generation < dep.generation)
            self._write(dep, dgd, statuses, events, state, message)
            if dep.active:
                record_ownership(dep, dgd, adapters)

    def _last_log(self, kube: KubeClient, namespace: str, pod: PodStatus) -> str:
        key = (pod.name, pod.restarts)
        if len(self.logs) > MAX_MEMO:
            self.logs.clear()
        if key not in self.logs:
            try:
                self.logs[key] = read_log(kube, namespace, pod.name, lines=LOG_LINES, previous=True)
            except KubeFailure as exc:
                self.logs[key] = f"(no log: {exc})"
        return self.logs[key]

    def _write(self, dep: Deployment, dgd: dict | None, pods: list[PodStatus], events: list[dict], state: str,
               message: str) -> None:
        spec = dep.revision.graph_spec if dep.revision else None
        frontend = next((s.name for s in spec.services if s.role == "frontend"), None) if spec else None
        name = dgd_name(dep.manifest, dep.graph.name)
        endpoint = (f"http://{service_name(name, frontend)}.{dep.namespace}.svc.cluster.local:8000"
                    if frontend else "")
        fresh = self._fresh_events(dep, events)
        rolling = generation_pools(dgd, pods, changed=dep.generation > 1) if dep.active else []
        info = None  # left as it is, unless the rollout table changes
        if rolling != (dep.runtime_info or {}).get("rollout_pools", []):
            info = {**(dep.runtime_info or {}), "rollout_pools": rolling}
        observation_record(dep, Observation(state=state, message=message, pods=pods,
                                            events=[event_record(e) for e in fresh.values()],
                                            endpoint=endpoint if dep.active else ""),
                           observed_generation=dep.generation if caught_up(dgd) else dep.observed_generation,
                           merge_events=True, runtime_info=info)
        self.events_written.update({key: stamp for key, stamp in fresh})

    def _fresh_events(self, dep: Deployment, events: list[dict]) -> dict[tuple[tuple[int, str], str], dict]:
        """The events not written since they last changed: ((deployment, event name), stamp) → event."""
        if len(self.events_written) > MAX_MEMO:
            self.events_written.clear()
        fresh = {}
        for event in events:
            key = (dep.pk, (event.get("metadata") or {}).get("name", ""))
            stamp = str(event.get("lastTimestamp") or event.get("eventTime") or event.get("count") or "")
            if self.events_written.get(key) != stamp:
                fresh[(key, stamp)] = event
        return fresh

