"""The local operator: reconciles every Deployment on the local runtime into real Dynamo
processes (a frontend, mocker or vLLM workers) and writes what it sees to the status cache,
as the Dynamo operator and the kubelet do on a cluster.

One loop, about once a second: desired processes from each active Deployment's revision and
replica overrides; ``Supervisor.ensure`` for each, ``stop`` for the rest; ``poll`` for exits
and restarts; probes for readiness; then pods, events and the graph state go to the database.
Only known Dynamo entry points run, with argv built from the typed spec (argv.py)."""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from ... import planner_decisions as planner_services
from ...engines import Host
from ...models import Deployment, GraphState
from ...status_cache import observation_record
from ..base import EventRecord, Observation, PodStatus, nixl_backend
from ..processes import PortRangeExhausted, group_members
from . import rollout
from .argv import MAX_SYSTEM_PORT
from .gpus import GpuShortage, assign_gpus, gpu_env, usage_of, visible_devices
from .gpus import probe as probe_gpus
from .hostlimits import inotify_problem
from .observe import engine_facts, head_file, process_shm, shm_used, worker_pods
from .planner_executor import PlannerExecutor
from .planning import ProcessPlanning
from .probes import http_get
from .rolling import Planned, RollingPools
from .runtime import graph_dir
from .state import graph_state
from .supervisor import Supervisor
from .vllm_cpu import CpuShortage, assign_cores, memory_problem

log = logging.getLogger(__name__)

class LocalOperator(ProcessPlanning, RollingPools):
    def __init__(self, *, runtime_dir: Path | None = None, python: str | None = None,
                 port_min: int | None = None, port_max: int | None = None):
        self.root = Path(runtime_dir or settings.LOCAL_RUNTIME_DIR)
        self.python = python or settings.LOCAL_RUNTIME_PYTHON or sys.executable
        self.port_min = port_min or settings.LOCAL_RUNTIME_PORT_MIN
        self.port_max = min(port_max or settings.LOCAL_RUNTIME_PORT_MAX, MAX_SYSTEM_PORT)
        self.supervisor = Supervisor(self.root / "pids")
        self.ports: dict[str, int] = {}  # pod or bootstrap name -> port, kept while it exists
        self.ready: dict[str, bool] = {}
        self.owner: dict[str, int] = {}  # pod name -> deployment id
        self.model_names: dict[str, str] = {}
        self.logs: dict[str, Path] = {}
        self.host = Host.detect()  # what graphs.engines.local_engine decides each worker runs on
        self.gpu_host = probe_gpus()  # NVML: how many GPUs there are to give GPU workers
        self.gpu_held: dict[str, list[int]] = {}  # pod name -> NVML indices, kept while it runs
        self.nixl: dict[str, str] = {}  # pod name -> transfer backend, once its log names it
        self.cores_held: dict[str, int] = {}  # pod name -> the CPU core a vLLM-on-CPU worker runs on
        self.ready_within: dict[str, float] = {}  # pod name -> seconds its engine may take to be ready
        self.max_processes = settings.LOCAL_RUNTIME_MAX_PROCESSES
        self.planner = PlannerExecutor(root=self.root, python=self.python, port=self._port,
                                       release=lambda key: self.ports.pop(key, None))
        self.samples: dict[int, dict[str, tuple[int, int]]] = {}  # last replicas written, per deployment
        self.members: dict[str, Planned] = {}  # pod name -> the plan it runs, while it runs
        self.drains: dict[str, str] = {}  # pods this pass takes out of routing -> why
        self.rollouts: dict[int, list[str]] = {}  # deployment id -> its pools' rollout notes, this pass
        self.served: dict[int, set[str]] = {}  # deployment id -> instance ids its frontend has served through
        self.rollout_pools: dict[int, list[dict]] = {}  # deployment id -> per rolling pool: new/old/draining
        self.timelines: dict[int, list] = {}  # deployment id -> routable workers per pool, change points

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        killed = Supervisor.reap_orphans(self.root / "pids") + Supervisor.reap_orphans(self.root / "pids-planner")
        if killed:
            log.warning("stopped %d process(es) left by a previous operator run", len(killed))
        self.supervisor.install_exit_handlers()
        # The Planner's etcd and connector have their own supervisor: stopped on exit too.
        self.planner.supervisor.install_exit_handlers()

    def run_forever(self, interval: float = 1.0, after_pass: Callable[[], object] | None = None) -> None:
        """Reconcile every ``interval`` seconds, then call ``after_pass`` (the operator process
        passes the local Prometheus' scrape-target sync, which writes only on change)."""
        self.start()
        while True:
            started = time.monotonic()
            seen = None
            try:
                close_old_connections()
                seen = self.desired()  # before the pass: a change made during it starts the next at once
                self.reconcile_once()
                if after_pass is not None:
                    after_pass()
            except Exception:
                log.exception("reconcile failed; retrying")
            self._wait(started + interval, seen)

    WAKE_CHECK_S = 0.1

    @staticmethod
    def desired() -> list[tuple]:
        """What the local graphs are asked to run, in one small read: a deployment's generation
        moves with every apply, scale and delete."""
        return list(Deployment.objects.filter(runtime="local").order_by("pk")
                    .values_list("pk", "generation", "active", "revision_id"))

    def _wait(self, until: float, seen: list[tuple] | None) -> None:
        """Until the next pass is due, or sooner once a local graph's desired state differs from
        ``seen`` (read every WAKE_CHECK_S): a slider's scale starts its process within about a
        tenth of a second instead of up to a whole interval later."""
        time.sleep(self.WAKE_CHECK_S)
        while (left := until - time.monotonic()) > 0:
            try:
                if seen is not None and self.desired() != seen:
                    return
            except Exception:  # a database that does not answer: the next pass says why
                seen = None
            time.sleep(min(self.WAKE_CHECK_S, left))

    def shutdown(self) -> None:
        self.planner.shutdown()
        self.supervisor.stop_all()

    # ---------------------------------------------------------------- one pass

    def reconcile_once(self) -> None:
        deployments = list(Deployment.objects.filter(runtime="local").exclude(
            active=False, state=GraphState.NOT_DEPLOYED).select_related("graph", "revision"))
        wanted: dict[str, Planned] = {}
        problems: dict[int, str] = {}
        gpus_taken: dict[str, list[int]] = {}
        cores_taken: dict[str, int] = {}
        for dep in sorted(deployments, key=lambda d: d.pk):
            if not dep.active or dep.revision is None:
                continue
            try:
                planned_here = self.plan(dep)
            except (ValueError, PortRangeExhausted) as exc:
                problems[dep.pk] = str(exc)
                continue
            if len(wanted) + len(planned_here) > self.max_processes:
                # A typo in a replica count must not fork hundreds of engines on this host, nor
                # stop the ones that serve: what already runs keeps running, nothing new starts.
                # (Operations refuse such a scale up front: capacity.py; this is the race.)
                running = set(self.supervisor.names())
                kept = [p for p in planned_here if p.name in running][:max(0, self.max_processes - len(wanted))]
                problems[dep.pk] = (
                    f"the local runtime runs at most {self.max_processes} processes (setting "
                    f"LOCAL_RUNTIME_MAX_PROCESSES); this graph needs {len(planned_here)} and {len(wanted)} already "
                    f"run: its {len(kept)} running process(es) keep running, no new one starts. Scale it down or "
                    "delete another graph")
                self._release([p for p in planned_here if p not in kept])
                planned_here = kept
                if not kept:
                    continue
            fitted = self.fit(dep, planned_here, gpus_taken, cores_taken)
            if isinstance(fitted, str):
                problems[dep.pk] = fitted
                continue
            planned_here, assigned, cores, short = fitted
            if short:  # a rollout waits for room: said in its progress, the graph serves meanwhile
                self.rollouts.setdefault(dep.pk, []).append(short)
            gpus_taken.update(assigned)
            cores_taken.update(cores)
            for planned in planned_here:
                if planned.name in assigned:
                    planned.env.update(gpu_env(assigned[planned.name]))
                if planned.name in cores:
                    planned.env["VLLM_CPU_OMP_THREADS_BIND"] = planned.cpu.env["VLLM_CPU_OMP_THREADS_BIND"] = \
                        str(cores[planned.name])
                wanted[planned.name] = planned
                self.owner[planned.name] = dep.pk
        self.gpu_held = gpus_taken
        self.cores_held = cores_taken
        events: list[EventRecord] = []
        for name in self.supervisor.names():
            if name in wanted or self.supervisor.draining(name):
                continue
            member = self.members.get(name)
            if settings.LOCAL_RUNTIME_ROLLOUT != "recreate" and member is not None and member.kind != "frontend" \
                    and member.role != "planner":
                # A worker leaves by draining (rollout.py): out of routing, its requests finished.
                events += self.supervisor.drain(name, rollout.drain_budget(member.env, member.argv),
                                                self.drains.get(name, "its graph was deleted"))
            else:
                events += self.supervisor.stop(name)
        self.drains = {}
        # Counted before a frontend starts, not read off its crash: the kernel's inotify limit.
        starting = [p for p in wanted.values() if p.kind == "frontend" and p.name not in self.supervisor.names()]
        short = inotify_problem(len(starting)) if starting else ""
        if short:
            for p in starting:
                del wanted[p.name]
                problems[self.owner[p.name]] = short
                self._release([p])
        for planned in wanted.values():
            self.members[planned.name] = planned
            events += self.supervisor.ensure(
                planned.name, planned.argv, planned.env, cwd=self.root, log_path=self.log_path(planned),
                meta={"service": planned.service.name, "role": planned.role, "port": planned.port,
                      "probe": planned.probe, "model": self.model_name_of(planned)})
        events += self.supervisor.poll()
        running = set(self.supervisor.names())
        for name in [n for n in self.members if n not in running]:
            self._forget_pod(name)
        by_dep: dict[int, list[PodStatus]] = {dep.pk: [] for dep in deployments}
        for name in self.supervisor.names():
            status = self.supervisor.pod_status(name)
            self.observe(status, wanted.get(name))
            if wanted.get(name) and wanted[name].ignored:
                status.message = (status.message + " " if status.message else "") + (
                    "ignored on the local runtime: " + " ".join(wanted[name].ignored))
            if status.ready and not self.ready.get(name):
                events.append(EventRecord(timezone.now(), "Normal", "Ready", name, f"{name} is ready"))
            self.ready[name] = status.ready
            dep_id = self.owner.get(name)
            if dep_id in by_dep:
                by_dep[dep_id].append(status)
        info = self.planner.reconcile(deployments, by_dep, discovery=lambda n: graph_dir(n) / "discovery",
                                      folder=lambda n: graph_dir(n) / "planner")
        for dep in deployments:
            runtime_info = {**info.get(dep.pk, {}), "workers": self.worker_pods(dep),
                            "rollout": self.rollouts.get(dep.pk, []),
                            "rollout_pools": self.rollout_pools.get(dep.pk, []),
                            "routable": self.routable_timeline(dep)} if dep.active else {}
            self.write_status(dep, by_dep.get(dep.pk, []), problems.get(dep.pk, ""),
                              [e for e in events if self.owner.get(e.object) == dep.pk], runtime_info)

    def worker_pods(self, dep: Deployment) -> dict[str, str]:
        """Dynamo's 64-bit worker instance ids (what the frontend's nvext names a reply's
        workers by) as pod names, read from the models the workers registered in the graph's
        discovery folder: each names its metadata URL by the worker's own system port."""
        by_port = {port: name for name, port in self.ports.items() if self.owner.get(name) == dep.pk}
        return worker_pods(graph_dir(dep.graph.name) / "discovery", by_port)

    def _forget_pod(self, name: str) -> None:
        """A process that is gone: its ports, readiness and facts go with it."""
        for table in (self.members, self.ready, self.nixl, self.ready_within):
            table.pop(name, None)
        for key in (name, f"{name}:bootstrap", f"{name}:nixl"):
            self.ports.pop(key, None)

    def _release(self, planned: list[Planned]) -> None:
        for p in planned:
            self.ports.pop(p.name, None)
            self.ports.pop(f"{p.name}:bootstrap", None)
            self.ports.pop(f"{p.name}:nixl", None)

    def fit(self, dep: Deployment, planned: list[Planned], gpus_taken: dict, cores_taken: dict):
        """GPUs and cores for ``planned``: (planned, gpus, cores, problem). When the new processes do
        not fit (a rollout's surge worker, most often), those that run keep running and keep what
        they hold, and the problem says why nothing new starts; a str when nothing fits at all."""
        running = set(self.supervisor.names())
        for attempt in (planned, [p for p in planned if p.name in running]):
            try:
                # Each GPU worker gets GPUs of its own, never shared with another worker.
                assigned = assign_gpus([(p.name, p.gpus) for p in attempt if p.gpus], self.gpu_host.count,
                                       held=self.gpu_held, taken=gpus_taken)
                cores = self.assign_cores(dep, attempt, cores_taken)
            except (GpuShortage, CpuShortage) as exc:
                problem = str(exc)
                if attempt is planned and len(attempt) > sum(p.name in running for p in planned) and any(
                        p.name in running for p in planned):
                    continue  # retried with the running processes alone
                self._release(planned)
                return problem
            if attempt is planned:
                return planned, assigned, cores, ""
            self._release([p for p in planned if p not in attempt])
            return attempt, assigned, cores, (f"{problem}: the {len(attempt)} running process(es) keep running "
                                              "and serving; nothing new starts until there is room")
        return "nothing fits"  # unreachable: the second attempt returns or raises

    def assign_cores(self, dep: Deployment, planned: list[Planned], taken: dict[str, int]) -> dict[str, int]:
        """A core of its own for each vLLM-on-CPU worker, and memory for those that do not run yet
        (vllm_cpu.py: 3.4 GB each); raises CpuShortage naming the numbers."""
        names = [p.name for p in planned if p.cpu]
        cores = assign_cores(names, held=self.cores_held, taken=taken, graph=dep.graph.name)
        new = [n for n in names if n not in self.supervisor.names()]
        problem = memory_problem(len(new), graph=dep.graph.name)
        if problem:
            raise CpuShortage(problem)
        return cores

    def observe(self, status: PodStatus, planned: Planned | None) -> None:
        """What the process really has: its /dev/shm, its KV-transfer backend, its GPUs."""
        pid = self.supervisor.status(status.name).pid
        status.gpus = planned.gpus if planned else 0
        if pid is not None:
            shm = process_shm(pid)
            status.shm_bytes, status.shm_source = shm.bytes, shm.source
        if planned is None or planned.kind == "frontend":
            return
        found = self.nixl.get(status.name) or nixl_backend(planned.kind, head_file(self.log_path(planned)))
        if found and not found.startswith("NIXL ("):  # kept once named: "NIXL (backend not logged)" comes first
            self.nixl[status.name] = found
        status.nixl_backend = found
        if planned.cpu:
            metrics = http_get(planned.port, "/metrics") if status.ready and planned.role != "worker" else None
            engine_facts(status, log_tail=self.supervisor.tail_log(status.name, 300), added=planned.cpu.shown(),
                         metrics_text=metrics[1].decode("utf-8", "replace") if metrics else "",
                         shm_in_use=shm_used(pid) if pid is not None else None, progress_shown=True)
        devices = self.gpu_held.get(status.name)
        if devices:
            status.gpu_devices = visible_devices(devices)
            if pid is not None:
                usage = usage_of(group_members(pid))
                status.gpu_memory_bytes, status.gpu_util = usage.memory_bytes, usage.util_percent

    # ---------------------------------------------------------------- status cache

    def write_status(self, dep: Deployment, pods: list[PodStatus], problem: str, events: list[EventRecord],
                     runtime_info: dict | None = None) -> None:
        frontend = next((p for p in pods if p.role == "frontend"), None)
        state, message = self.graph_state(dep, pods, problem)
        if not dep.active and not pods:
            self._forget_graph(dep)
        with transaction.atomic():
            observation_record(dep, Observation(
                state=state, message=message, pods=pods, events=events,
                endpoint=f"http://127.0.0.1:{frontend.port}" if frontend and frontend.port else ""),
                observed_generation=dep.generation, runtime_info=runtime_info or {})
            self.observe_replicas(dep, pods)

    def observe_replicas(self, dep: Deployment, pods: list[PodStatus]) -> None:
        """Desired and ready replicas per worker pool, for the Planner timeline (written on change)."""
        if not dep.active or dep.revision is None:
            self.samples.pop(dep.pk, None)
            return
        dep.refresh_from_db(fields=["replicas"])
        spec = dep.revision.graph_spec
        desired = dep.desired_replicas(spec)
        now = {s.name: (desired[s.name], sum(1 for p in pods if p.service == s.name and p.ready))
               for s in spec.services if s.is_worker}
        if now != self.samples.get(dep.pk):
            planner_services.replicas_observe(graph=dep.graph, pools=now)
            self.samples[dep.pk] = now

    def graph_state(self, dep: Deployment, pods: list[PodStatus], problem: str) -> tuple[str, str]:
        return graph_state(active=dep.active, replicas=bool(dep.replicas), pods=pods, problem=problem,
                           ready_within=self.ready_within, rolling=self.rollouts.get(dep.pk, []) if dep.active else [])

    def _forget_graph(self, dep: Deployment) -> None:
        # Stale discovery records of stopped workers would make a re-applied frontend route to
        # dead addresses: start the next apply from an empty folder.
        shutil.rmtree(graph_dir(dep.graph.name) / "discovery", ignore_errors=True)
        # Likewise the virtual connector's etcd (stopped earlier in this pass): a re-applied graph
        # must not execute a decision its previous life left unacknowledged.
        shutil.rmtree(graph_dir(dep.graph.name) / "planner", ignore_errors=True)
        self.planner.offsets.pop(dep.pk, None)
        self.served.pop(dep.pk, None)
        self.timelines.pop(dep.pk, None)
