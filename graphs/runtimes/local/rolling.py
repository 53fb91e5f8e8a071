"""The local operator's rolling of worker pools: what it asks the graph's frontend, and one pass
of rollout.py's rules per pool (graphs.runtimes.local.operator.LocalOperator mixes this in)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.spec import Service

from . import rollout
from .probes import http_get
from .rollout import FrontendView

if TYPE_CHECKING:
    from ...models import Deployment
    from .vllm_cpu import CpuWorker


@dataclass
class Planned:
    name: str
    service: Service
    role: str
    argv: list[str]
    env: dict[str, str]
    port: int
    probe: str
    ignored: list[str] = field(default_factory=list)
    kind: str = "mocker"  # frontend, mocker or vllm
    gpus: int = 0  # GPUs this process gets (vLLM workers only)
    cpu: CpuWorker | None = None  # vLLM on this CPU: what was added to run it here (a core of its own)
    template: str = ""  # argv and env without the pod's own values: equal for the workers of one revision


def pod_name(graph: str, service: str, index: int) -> str:
    return f"{graph}-{service.lower()}-{index}"


class RollingPools:
    """State it reads: ``members`` (pod -> the plan it runs), ``owner``, ``ready``, ``ports``,
    ``served``, ``drains`` and the supervisor, all kept by LocalOperator."""

    def roll_pool(self, dep: Deployment, service: Service, desired: int, build: Callable[[str], Planned],
                  view: list) -> tuple[list[Planned], str]:
        """One pass of rollout.py's rules for one worker pool: the workers to keep (each with the
        plan it was started with, so that nothing restarts), the new ones to start; the ones to
        drain go to ``self.drains``."""
        graph = dep.graph.name
        members = [m for name, m in self.members.items()
                   if self.owner.get(name) == dep.pk and m.service.name == service.name]
        pods = [rollout.Member(p.name, p.template, self._index(p.name), ready=bool(self.ready.get(p.name)),
                               draining=self.supervisor.draining(p.name)) for p in members]
        candidate = build(pod_name(graph, service.name, rollout.free_index(pods)))
        moving = any(m.template != candidate.template or m.draining for m in pods) or len(pods) != desired
        if moving:
            if not view:
                view.append(self.frontend_view(dep))
            ids = self.instances(dep)
            for m in pods:
                metrics = (http_get(self.ports[m.name], "/metrics") or (0, None))[1] if m.name in self.ports else None
                # A worker whose own /health fails is not routable only if the frontend agrees.
                m.routable = rollout.routable(view[0], ids.get(m.name, ()), taken=rollout.worker_taken(metrics))
                if m.routable and not m.ready:
                    m.routable = None
                m.inflight = rollout.worker_inflight(metrics)
        decision = rollout.step(pool=service.name, desired=desired, template=candidate.template, members=pods)
        keep = [self.members[m.name] for m in pods if not m.draining and m.name not in decision.drain]
        started: list[Planned] = []
        for _ in range(decision.start):
            if started:
                taken = pods + [rollout.Member(p.name, "", self._index(p.name)) for p in started]
                candidate = build(pod_name(graph, service.name, rollout.free_index(taken)))
            started.append(candidate)
        if not started:
            self._release([candidate])
        self.drains.update({name: "replaced by a new revision" if self.members[name].template != candidate.template
                            else "scaled down" for name in decision.drain})
        if decision.counts:
            self.rollout_pools.setdefault(dep.pk, []).append(decision.counts)
        return keep + started, decision.note

    def frontend_view(self, dep: Deployment) -> FrontendView | None:
        """What the graph's frontend routes to (rollout.py), read from its port."""
        port = next((self.ports[n] for n, m in self.members.items()
                     if self.owner.get(n) == dep.pk and m.role == "frontend" and self.ready.get(n)), None)
        if port is None:
            return None
        # A frontend under load on a small host answers in tens of milliseconds, now and then in
        # seconds: give it time; without an answer nothing drains this pass (rollout.step).
        health, metrics = http_get(port, "/health", timeout=3.0), http_get(port, "/metrics", timeout=3.0)
        view = rollout.frontend_view(health[1] if health else None, metrics[1] if metrics else None)
        if view is not None:
            # The frontend's per-worker gauges come and go between scrapes: a worker it has served
            # through is remembered while it stays in the frontend's discovery.
            view.served = (view.served | self.served.get(dep.pk, set())) & view.instances
            self.served[dep.pk] = view.served
        return view

    def routable_timeline(self, dep: Deployment) -> list:
        """Workers per pool in the frontend's own discovery (its /health), as change points for the
        graph page's chart: read every pass while the frontend is ready, kept TIMELINE_SECONDS."""
        port = next((self.ports[n] for n, m in self.members.items()
                     if self.owner.get(n) == dep.pk and m.role == "frontend" and self.ready.get(n)), None)
        points = self.timelines.get(dep.pk, [])
        if port is None:
            return points
        health = http_get(port, "/health", timeout=1.0)
        view = rollout.frontend_view(health[1] if health else None, b"")
        if view is None:
            return points
        ids = self.instances(dep)
        counts: dict[str, int] = {}
        for name, member in self.members.items():
            if self.owner.get(name) == dep.pk and member.role in ("prefill", "decode", "worker"):
                counts[member.service.name] = counts.get(member.service.name, 0) + bool(
                    set(ids.get(name, ())) & view.instances)
        self.timelines[dep.pk] = rollout.timeline_add(points, time.time(), counts)
        return self.timelines[dep.pk]

    def instances(self, dep: Deployment) -> dict[str, list[str]]:
        """Pod name -> the instance ids its worker registered (from the discovery folder)."""
        out: dict[str, list[str]] = {}
        for instance, pod in self.worker_pods(dep).items():
            out.setdefault(pod, []).append(instance)
        return out

    @staticmethod
    def _index(name: str) -> int:
        tail = name.rpartition("-")[2]
        return int(tail) if tail.isdigit() else 0

