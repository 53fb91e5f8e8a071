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
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from core.dgd.commandline import flag_value, tokens
from core.planner import PlannerSettingsError
from core.spec import GraphSpec, Service

from ...engines import Host, local_engine, resolve_model, spec_model, timed_profile
from ...models import Deployment, GraphState
from ...planner import services as planner_services
from ...status_cache import observation_record
from ..base import EventRecord, Observation, PodStatus, nixl_backend
from ..processes import PortRangeExhausted, allocate_ports, group_members
from .argv import MAX_SYSTEM_PORT, SAFE_FLAGS, build_process_argv, build_process_env
from .gpus import GpuShortage, assign_gpus, gpu_env, usage_of, visible_devices
from .gpus import probe as probe_gpus
from .hostlimits import inotify_problem
from .observe import head_file, process_shm, worker_pods
from .planner import PlannerExecutor
from .runtime import graph_dir
from .supervisor import Supervisor
from .tinymodel import ensure_model_dir

log = logging.getLogger(__name__)

# Flags the operator sets itself from the spec (model, role, discovery): never copied.
# A vLLM prefill worker's --max-num-seqs bounds the prefills it batches, and more requests queue;
# the 1.6.1 mocker's prefill worker also bounds by it the KV hand-offs waiting for a decode
# worker, and refuses the request beyond ("mocker handoff session limit reached"): with
# AIConfigurator's prefill batch of 1, all but one request in flight would fail.
_MOCKER_PREFILL_IGNORED = frozenset({"--max-num-seqs"})
_OWN_FLAGS = {"--model", "--model-path", "--model-name", "--served-model-name", "--disaggregation-mode",
              "--is-prefill-worker", "--is-decode-worker", "--discovery-backend", "--request-plane",
              "--bootstrap-ports", "--speedup-ratio", "--http-port", "--http-host", "--router-mode"}


def gpu_engine_available() -> bool:
    """vLLM workers run only where vLLM is installed and an NVIDIA GPU is visible."""
    host = Host.detect()
    return host.gpu and host.vllm


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


def pod_name(graph: str, service: str, index: int) -> str:
    return f"{graph}-{service.lower()}-{index}"


def extra_engine_args(service: Service, kind: str) -> tuple[list[str], list[str]]:
    """The spec's own tuning flags that this engine accepts locally; the rest is reported."""
    argv = tokens(service.command, service.args)
    if "-m" in argv:
        argv = argv[argv.index("-m") + 2:]
    kept, ignored, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        takes_value = "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--")
        value = [argv[i + 1]] if takes_value else []
        if token.startswith("--") and name not in _OWN_FLAGS:
            allowed = name in SAFE_FLAGS[kind] and not (kind == "mocker" and service.role == "prefill"
                                                        and name in _MOCKER_PREFILL_IGNORED)
            (kept if allowed else ignored).extend([token, *value])
        i += 1 + len(value)
    return kept, ignored


class LocalOperator:
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
        self.use_gpu = self.host.gpu and self.host.vllm
        self.gpu_host = probe_gpus()  # NVML: how many GPUs there are to give GPU workers
        self.gpu_held: dict[str, list[int]] = {}  # pod name -> NVML indices, kept while it runs
        self.nixl: dict[str, str] = {}  # pod name -> transfer backend, once its log names it
        self.max_processes = settings.LOCAL_RUNTIME_MAX_PROCESSES
        self.planner = PlannerExecutor(root=self.root, python=self.python, port=self._port,
                                       release=lambda key: self.ports.pop(key, None))
        self.samples: dict[int, dict[str, tuple[int, int]]] = {}  # last replicas written, per deployment

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
            try:
                close_old_connections()
                self.reconcile_once()
                if after_pass is not None:
                    after_pass()
            except Exception:
                log.exception("reconcile failed; retrying")
            time.sleep(max(0.1, interval - (time.monotonic() - started)))

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
            try:
                # Each GPU worker gets GPUs of its own, never shared with another worker.
                assigned = assign_gpus([(p.name, p.gpus) for p in planned_here if p.gpus], self.gpu_host.count,
                                       held=self.gpu_held, taken=gpus_taken)
            except GpuShortage as exc:
                problems[dep.pk] = str(exc)
                self._release(planned_here)
                continue
            gpus_taken.update(assigned)
            for planned in planned_here:
                if planned.name in assigned:
                    planned.env.update(gpu_env(assigned[planned.name]))
                wanted[planned.name] = planned
                self.owner[planned.name] = dep.pk
        self.gpu_held = gpus_taken
        events: list[EventRecord] = []
        for name in self.supervisor.names():
            if name not in wanted:
                events += self.supervisor.stop(name)
                self.ready.pop(name, None)
                self.ports.pop(name, None)
                self.ports.pop(f"{name}:bootstrap", None)
                self.nixl.pop(name, None)
        # Counted before a frontend starts, not read off its crash: the kernel's inotify limit.
        starting = [p for p in wanted.values() if p.kind == "frontend" and p.name not in self.supervisor.names()]
        short = inotify_problem(len(starting)) if starting else ""
        if short:
            for p in starting:
                del wanted[p.name]
                problems[self.owner[p.name]] = short
                self._release([p])
        for planned in wanted.values():
            events += self.supervisor.ensure(
                planned.name, planned.argv, planned.env, cwd=self.root, log_path=self.log_path(planned),
                meta={"service": planned.service.name, "role": planned.role, "port": planned.port,
                      "probe": planned.probe, "model": self.model_name_of(planned)})
        events += self.supervisor.poll()
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
            runtime_info = {**info.get(dep.pk, {}), "workers": self.worker_pods(dep)} if dep.active else {}
            self.write_status(dep, by_dep.get(dep.pk, []), problems.get(dep.pk, ""),
                              [e for e in events if self.owner.get(e.object) == dep.pk], runtime_info)

    def worker_pods(self, dep: Deployment) -> dict[str, str]:
        """Dynamo's 64-bit worker instance ids (what the frontend's nvext names a reply's
        workers by) as pod names, read from the models the workers registered in the graph's
        discovery folder: each names its metadata URL by the worker's own system port."""
        by_port = {port: name for name, port in self.ports.items() if self.owner.get(name) == dep.pk}
        return worker_pods(graph_dir(dep.graph.name) / "discovery", by_port)

    def _release(self, planned: list[Planned]) -> None:
        for p in planned:
            self.ports.pop(p.name, None)
            self.ports.pop(f"{p.name}:bootstrap", None)

    def observe(self, status: PodStatus, planned: Planned | None) -> None:
        """What the process really has: its /dev/shm, its KV-transfer backend, its GPUs."""
        pid = self.supervisor.status(status.name).pid
        status.gpus = planned.gpus if planned else 0
        if pid is not None:
            shm = process_shm(pid)
            status.shm_bytes, status.shm_source = shm.bytes, shm.source
        if planned is None or planned.kind == "frontend":
            return
        if status.name not in self.nixl:
            found = nixl_backend(planned.kind, head_file(self.log_path(planned)))
            if found:
                self.nixl[status.name] = found
        status.nixl_backend = self.nixl.get(status.name, "")
        devices = self.gpu_held.get(status.name)
        if devices:
            status.gpu_devices = visible_devices(devices)
            if pid is not None:
                usage = usage_of(group_members(pid))
                status.gpu_memory_bytes, status.gpu_util = usage.memory_bytes, usage.util_percent

    def model_name_of(self, planned: Planned) -> str:
        return self.model_names.get(planned.name, "")

    def log_path(self, planned: Planned) -> Path:
        return self.logs[planned.name]

    def plan(self, dep: Deployment) -> list[Planned]:
        spec: GraphSpec = dep.revision.graph_spec
        replicas = dep.desired_replicas(spec)
        gdir = graph_dir(spec.name)
        discovery = gdir / "discovery"
        discovery.mkdir(parents=True, exist_ok=True)
        model_name = spec.model or spec.name
        model_dir = ensure_model_dir(self.root / "models", model_name)
        out: list[Planned] = []
        for service in spec.services:
            if service.role == "planner" and self.planner.planner_runs():
                out += self.plan_planner(dep, service, model_name, gdir)
            if service.role not in ("frontend", "prefill", "decode", "worker"):
                continue
            for index in range(replicas.get(service.name, 0)):
                name = pod_name(spec.name, service.name, index)
                port = self._port(name)
                gpus = 0
                if service.role == "frontend":
                    kind, probe = "frontend", "frontend"
                    extra, ignored = extra_engine_args(service, "frontend")
                    argv = build_process_argv(kind="frontend", python=self.python, http_port=port,
                                              router_mode=spec.router_mode, extra_args=extra)
                    env = build_process_env(discovery_dir=discovery)
                else:
                    kind = local_engine(spec, service, self.host).engine
                    probe = "worker"
                    model_path, offline = model_dir, True
                    if kind == "vllm":
                        # A real engine loads the spec's model, never the tokenizer-only directory.
                        try:
                            source = resolve_model(spec_model(spec, service),
                                                   downloads=settings.LOCAL_RUNTIME_MODEL_DOWNLOADS)
                        except ValueError as exc:
                            raise ValueError(f"{service.name} cannot start dynamo.vllm: {exc}") from None
                        model_path, offline = source.model, source.offline
                    mode = {"worker": "agg"}.get(service.role, service.role)
                    extra, ignored = extra_engine_args(service, kind)
                    speedup = flag_value(tokens(service.command, service.args), "--speedup-ratio")
                    argv = build_process_argv(
                        kind=kind, python=self.python, model_path=model_path, model_name=model_name, mode=mode,
                        bootstrap_port=self._port(f"{name}:bootstrap") if mode == "prefill" else None,
                        speedup_ratio=float(speedup) if speedup else None, extra_args=extra,
                        profile_data=timed_profile(spec, settings.SIZING_DIR) if kind == "mocker" else None)
                    env = build_process_env(discovery_dir=discovery, system_port=port, hub_offline=offline)
                    gpus = (service.gpus or 1) if kind == "vllm" else 0
                self.model_names[name] = model_name
                self.logs[name] = gdir / "logs" / f"{name}.log"
                out.append(Planned(name, service, service.role, argv, env, port, probe, ignored, kind, gpus))
        return out

    def plan_planner(self, dep: Deployment, service: Service, model_name: str, gdir: Path) -> list[Planned]:
        """The real Planner, where dynamo.planner imports: one process, however many replicas."""
        name = pod_name(dep.graph.name, service.name, 0)
        port = self._port(name)  # where it publishes dynamo_planner_* (scraped as pool "planner")
        try:
            argv = self.planner.planner_argv(dep, service, model_name=model_name, metrics_port=port)
        except PlannerSettingsError as exc:
            raise ValueError(f"{service.name}: {exc}") from None
        self.model_names[name] = model_name
        self.logs[name] = gdir / "logs" / f"{name}.log"
        env = self.planner.env(dep.graph.name, gdir / "discovery")
        return [Planned(name, service, "planner", argv, env, port, "")]

    def _port(self, key: str) -> int:
        if key not in self.ports:
            taken = set(self.ports.values())
            self.ports[key] = allocate_ports(1, self.port_min, self.port_max, taken)[0]
        return self.ports[key]

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
        if not dep.active:
            return (GraphState.DELETING, f"stopping {len(pods)} process(es)") if pods else (
                GraphState.NOT_DEPLOYED, "deleted: every process stopped")
        if problem:
            return GraphState.FAILED, problem
        if not pods:
            return GraphState.PROGRESSING, "no pods requested" if dep.replicas else "starting"
        ready = sum(p.ready for p in pods)
        crashing = [p.name for p in pods if p.phase == "CrashLoopBackOff"]
        frontend = [p for p in pods if p.role == "frontend"]
        serving = any(p.ready for p in frontend)
        if ready == len(pods):
            return GraphState.READY, f"{ready}/{len(pods)} pods ready"
        if crashing:
            state = GraphState.DEGRADED if serving else GraphState.FAILED
            return state, f"{', '.join(crashing)} crash-looping; {ready}/{len(pods)} pods ready"
        if frontend and all(p.phase == "Running" for p in frontend) and not serving and \
                all(p.started_at and (timezone.now() - p.started_at).total_seconds() > 60 for p in frontend):
            return GraphState.DEGRADED, "frontend serves no model: no worker has registered with it"
        if serving:
            return GraphState.DEGRADED, f"{ready}/{len(pods)} pods ready"
        return GraphState.PROGRESSING, f"{ready}/{len(pods)} pods ready"

    def _forget_graph(self, dep: Deployment) -> None:
        # Stale discovery records of stopped workers would make a re-applied frontend route to
        # dead addresses: start the next apply from an empty folder.
        shutil.rmtree(graph_dir(dep.graph.name) / "discovery", ignore_errors=True)
        # Likewise the virtual connector's etcd (stopped earlier in this pass): a re-applied graph
        # must not execute a decision its previous life left unacknowledged.
        shutil.rmtree(graph_dir(dep.graph.name) / "planner", ignore_errors=True)
        self.planner.offsets.pop(dep.pk, None)
