"""What the local operator plans to run for a graph, each pass: a process per pod of every pool
(a frontend, mocker or engine workers, the Planner), its argv and environment from the typed spec
(argv.py), its ports, and, for a worker pool that changed, the rolling replacement (rolling.py).

A mixin of LocalOperator (operator.py), which holds what it reads: ``root``, ``python``,
``host``, ``ports`` and their range, ``planner``, and the per-pod ``model_names``, ``logs`` and
``ready_within`` it fills."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from core.dgd.commandline import flag_value, tokens
from core.planner_config import PlannerSettingsError
from core.spec import GraphSpec, Service

from ...engines import ENGINES, local_engine, timed_profile
from ...models import Deployment
from ..processes import allocate_ports
from . import rollout
from .argv import build_process_argv, build_process_env, extra_engine_args
from .realengine import kv_events_socket, real_worker
from .rolling import Planned, pod_name
from .rollout import FrontendView
from .runtime import graph_dir
from .tinymodel import ensure_model_dir
from .vllm_cpu import FRONTEND_ENV, READY_WITHIN_S


class ProcessPlanning:
    """Plans a graph's processes (see the module's docstring)."""

    def model_name_of(self, planned: Planned) -> str:
        return self.model_names.get(planned.name, "")

    def log_path(self, planned: Planned) -> Path:
        return self.logs[planned.name]

    def plan(self, dep: Deployment) -> list[Planned]:
        spec: GraphSpec = dep.revision.graph_spec
        replicas = dep.desired_replicas(spec)
        gdir = graph_dir(spec.name)
        (gdir / "discovery").mkdir(parents=True, exist_ok=True)
        model_name = spec.model or spec.name
        model_dir = ensure_model_dir(self.root / "models", model_name)
        out: list[Planned] = []
        notes: list[str] = []
        view: list[FrontendView | None] = []  # read once a pass, only when a pool rolls
        self.rollout_pools[dep.pk] = []
        for service in spec.services:
            if service.role == "planner" and self.planner.planner_runs():
                out += self.plan_planner(dep, service, model_name, gdir)
            if service.role not in ("frontend", "prefill", "decode", "worker"):
                continue
            build = lambda name, service=service: self.plan_pod(  # noqa: E731
                dep, spec, service, name, model_name=model_name, model_dir=model_dir, gdir=gdir)
            desired = replicas.get(service.name, 0)
            if service.role == "frontend" or settings.LOCAL_RUNTIME_ROLLOUT == "recreate":
                # The frontend keeps its name and port (its URL is the graph's endpoint); with
                # "recreate" a worker is replaced in place, stopped before its successor starts.
                out += [build(pod_name(spec.name, service.name, i)) for i in range(desired)]
                continue
            planned, note = self.roll_pool(dep, service, desired, build, view)
            out += planned
            if note:
                notes.append(note)
        self.rollouts[dep.pk] = notes
        return out

    def plan_pod(self, dep: Deployment, spec: GraphSpec, service: Service, name: str, *, model_name: str,
                 model_dir: Path, gdir: Path) -> Planned:
        discovery = gdir / "discovery"
        port = self._port(name)
        gpus = 0
        if service.role == "frontend":
            kind, probe, cpu = "frontend", "frontend", None
            extra, ignored = extra_engine_args(service, "frontend")
            argv = build_process_argv(kind="frontend", python=self.python, http_port=port,
                                      router_mode=spec.router_mode, extra_args=extra)
            env = build_process_env(discovery_dir=discovery)
            if any(ENGINES[local_engine(spec, s, self.host).engine].on_cpu for s in spec.services
                   if s.role in ("prefill", "decode", "worker")):
                env.update(FRONTEND_ENV)  # workers that share this host's cores answer late (vllm_cpu.py)
        else:
            engine = ENGINES[local_engine(spec, service, self.host).engine]
            kind, probe, python, cpu = engine.kind, "worker", self.python, None
            model_path, offline = model_dir, True
            mode = {"worker": "agg"}.get(service.role, service.role)
            extra, ignored = extra_engine_args(service, kind)
            if engine.loads_weights:
                # A real engine loads the spec's model, never the tokenizer-only directory.
                real = real_worker(spec=spec, service=service, engine=engine, host=self.host, root=self.root,
                                   pod=name, mode=mode, extra=extra, python=self.python,
                                   side_channel_port=self._port(f"{name}:nixl") if mode != "agg" else None)
                python, model_path, offline, cpu = real.python, real.model_path, real.offline, real.cpu
            speedup = flag_value(tokens(service.command, service.args), "--speedup-ratio")
            argv = build_process_argv(
                kind=kind, python=python, model_path=model_path, model_name=model_name, mode=mode,
                bootstrap_port=self._port(f"{name}:bootstrap") if mode == "prefill" else None,
                speedup_ratio=float(speedup) if speedup else None, extra_args=extra,
                profile_data=timed_profile(spec, settings.SIZING_DIR) if kind == "mocker" else None,
            ) + (cpu.args if cpu else [])
            env = build_process_env(discovery_dir=discovery, system_port=port, hub_offline=offline)
            env.update(cpu.env if cpu else {})
            # The worker's own drain budget, where the spec sets one (rollout.py reads it back).
            env.update({e["name"]: str(e["value"]) for e in service.env if isinstance(e, dict)
                        and e.get("name") == "DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT" and "value" in e})
            gpus = (service.gpus or 1) if engine.loads_weights and not engine.on_cpu else 0
            if engine.on_cpu:
                self.ready_within[name] = READY_WITHIN_S
        self.model_names[name] = model_name
        self.logs[name] = gdir / "logs" / f"{name}.log"
        own = {str(v): f"<{k.partition(':')[2] or 'port'}>" for k, v in self.ports.items()
               if k == name or k.startswith(f"{name}:")}
        own[name] = "<pod>"
        if cpu and spec.router_mode == "kv":
            own[str(kv_events_socket(self.root, name))] = "<ipc>"
        template = rollout.template_key(argv, env, own)
        return Planned(name, service, service.role, argv, env, port, probe, ignored, kind, gpus, cpu, template)

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
