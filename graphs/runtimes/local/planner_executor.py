"""The local runtime as Dynamo's Planner's executor (its ``virtual`` environment).

For each local graph with a Planner component the local operator runs, beside the graph:

* an etcd on loopback: 1.6.1's ``VirtualConnectorCoordinator`` keeps its decisions in etcd even
  when discovery is the file backend (measured: without one it retries localhost:2379 forever);
* the connector (connector.py), the ``VirtualConnectorClient`` that receives each decision;
* the real Planner (``python -m dynamo.planner --config …``) where ``dynamo.planner`` imports.

Each operator pass reads the decisions the bridge received, records them, turns them into scale
operations made via ``planner`` (graphs.planner_decisions.decision_advance), and hands the acknowledged ids back
to the bridge, which completes them with the coordinator."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from core.planner_config import PlannerSettingsError, graph_mode, local_config, planner_settings

from ... import planner_decisions as services
from ...models import Deployment
from ..base import EventRecord
from ..processes import LOOPBACK
from .argv import build_process_env
from .connector import read_decisions, write_acks
from .supervisor import Supervisor

log = logging.getLogger(__name__)

DYNAMO_NAMESPACE = "dynamo"  # what every local process uses (the DYN_NAMESPACE default)
BRIDGE = Path(__file__).with_name("connector.py")
IMPORT_TIMEOUT = 90


def planner_import_problem(python: str) -> str:
    """"" when ``import dynamo.planner`` works with this interpreter, else the error's last line."""
    try:
        done = subprocess.run([python, "-c", "import dynamo.planner"], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not run {python}: {exc}"
    if done.returncode == 0:
        return ""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {done.returncode}"


def module_missing(python: str, module: str) -> bool:
    try:
        done = subprocess.run([python, "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec("
                                             f"{module!r}) is None)"], capture_output=True, timeout=IMPORT_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return True
    return done.returncode != 0


# What to do about a module the Planner imports that is not installed.
_INSTALLABLE = {"sklearn": "scikit-learn"}


def _import_fix(problem: str) -> str:
    match = re.search(r"No module named '([\w.]+)'", problem)
    if not match:
        return ""
    top = match.group(1).split(".")[0]
    if top in _INSTALLABLE:
        return f": {_INSTALLABLE[top]} is on the package index (pip install {_INSTALLABLE[top]} into this environment)"
    return f": {top} is not installed"


def etcd_binary() -> str | None:
    """LOCAL_RUNTIME_ETCD, else etcd on PATH, else the one `scripts/services.sh etcd` (run by
    `make up`) unpacked into TOOLS_DIR."""
    found = shutil.which(getattr(settings, "LOCAL_RUNTIME_ETCD", "") or "etcd")
    unpacked = Path(settings.TOOLS_DIR) / "usr" / "bin" / "etcd"
    return found or (str(unpacked) if unpacked.is_file() and os.access(unpacked, os.X_OK) else None)


class PlannerExecutor:
    """Owned by the LocalOperator; ``port`` allocates (and remembers) a loopback port by key."""

    def __init__(self, *, root: Path, python: str, port: Callable[[str], int], release: Callable[[str], None]):
        self.root = root
        self.python = python
        self.port = port
        self.release = release
        self.supervisor = Supervisor(root / "pids-planner")
        self.offsets: dict[int, int] = {}
        self._import_problem: str | None = None
        self._aisimulate_missing: bool | None = None

    # ------------------------------------------------------------------ facts

    def import_problem(self) -> str:
        if self._import_problem is None:
            self._import_problem = planner_import_problem(self.python)
        return self._import_problem

    def aisimulate_missing(self) -> bool:
        if self._aisimulate_missing is None:
            self._aisimulate_missing = module_missing(self.python, "aisimulate_core")
        return self._aisimulate_missing

    def planner_runs(self) -> bool:
        return not self.import_problem() and etcd_binary() is not None

    def etcd_url(self, graph: str) -> str:
        return f"http://{LOOPBACK}:{self.port(f'{graph}:etcd')}"

    def env(self, graph: str, discovery: Path) -> dict[str, str]:
        env = build_process_env(discovery_dir=discovery)
        env["ETCD_ENDPOINTS"] = self.etcd_url(graph)
        env["DYN_NAMESPACE"] = DYNAMO_NAMESPACE
        return env

    # ------------------------------------------------------------------ the real Planner

    def planner_argv(self, dep: Deployment, service, *, model_name: str, metrics_port: int) -> list[str]:
        """``python -m dynamo.planner --config JSON`` from the typed settings (never the user's
        other keys: paths and endpoints are the runtime's to choose)."""
        spec = dep.revision.graph_spec
        settings_ = planner_settings(service.command, service.args)
        if settings_ is None:
            raise PlannerSettingsError("--config", "is a file path; the local runtime needs inline settings")
        roles = {s.role for s in spec.services if s.is_worker}
        config = local_config({}, settings_, mode=graph_mode(roles), backend=spec.backend, model_name=model_name,
                              prometheus_url=settings.PROMETHEUS_URL, metrics_port=metrics_port)
        config["pre_deployment_sweeping_mode"] = "none"  # no profiling data on this host
        return [self.python, "-m", "dynamo.planner", "--config", json.dumps(config, sort_keys=True)]

    # ------------------------------------------------------------------ one pass

    def reconcile(self, deployments: list[Deployment], pods_by_dep: dict[int, list], discovery: Callable[[str], Path],
                  folder: Callable[[str], Path]) -> dict[int, dict]:
        """Run the etcd and bridge of every planner graph, stop the others', execute decisions.
        Returns the runtime info of each deployment (for the status API)."""
        wanted: set[str] = set()
        info: dict[int, dict] = {}
        events: list[EventRecord] = []
        etcd = etcd_binary()
        for dep in deployments:
            if not dep.active or dep.revision is None:
                continue
            spec = dep.revision.graph_spec
            name = spec.name
            info[dep.pk] = self.attach_info(name, discovery(name))
            if not spec.pools("planner"):
                continue
            info[dep.pk]["planner"] = self.planner_info(name, etcd)
            if etcd is None:
                continue
            work = folder(name)
            work.mkdir(parents=True, exist_ok=True)
            peer = self.port(f"{name}:etcd-peer")
            client = self.etcd_url(name)
            peer_url = f"http://{LOOPBACK}:{peer}"
            etcd_argv = [etcd, "--name", "planner", "--data-dir", str(work / "etcd"),
                         "--listen-client-urls", client, "--advertise-client-urls", client,
                         "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                         "--initial-cluster", f"planner={peer_url}", "--log-level", "warn"]
            bridge_argv = [self.python, str(BRIDGE), "--dir", str(work), "--namespace", DYNAMO_NAMESPACE]
            env = self.env(name, discovery(name))
            for proc, argv in ((f"{name}-etcd", etcd_argv), (f"{name}-connector", bridge_argv)):
                events += self.supervisor.ensure(proc, argv, env if proc.endswith("connector") else
                                                 {"PATH": env.get("PATH", "")}, cwd=self.root,
                                                 log_path=work / f"{proc}.log")
                wanted.add(proc)
            self.execute(dep, pods_by_dep.get(dep.pk, []), work)
        for proc in self.supervisor.names():
            if proc not in wanted:
                events += self.supervisor.stop(proc)
                graph = proc.rsplit("-", 1)[0]
                self.release(f"{graph}:etcd")
                self.release(f"{graph}:etcd-peer")
        events += self.supervisor.poll()
        for event in events:
            if event.type == "Warning":
                log.warning("planner connector: %s %s", event.object, event.message)
        return info

    def execute(self, dep: Deployment, pods: list, work: Path) -> None:
        """Record what the bridge received, advance the oldest unfinished decision, and tell
        the bridge which decisions are done."""
        graph = dep.graph
        spec = dep.revision.graph_spec
        lines, self.offsets[dep.pk] = read_decisions(work, self.offsets.get(dep.pk, 0))
        for line in lines:
            desired = services.pools_for(spec, prefill=line.get("prefill"), decode=line.get("decode"))
            if not desired:
                continue
            services.decision_record(
                graph=graph, source=services.SOURCE_VIRTUAL, desired=desired, decision_id=line["decision_id"],
                reason="")  # decision_record describes it: "prefill 1→2, decode 1→1"
        ready: dict[str, int] = {}
        for pod in pods:
            ready[pod.service] = ready.get(pod.service, 0) + int(bool(pod.ready))
        dep.refresh_from_db(fields=["replicas", "generation"])
        if services.decision_advance(deployment=dep, ready=ready):
            write_acks(work, services.decisions_acknowledged(graph=graph))

    # ------------------------------------------------------------------ what the status API shows

    def attach_info(self, graph: str, discovery: Path) -> dict:
        """What a Planner or any Dynamo tool needs to attach to a local graph."""
        return {"dynamo_namespace": DYNAMO_NAMESPACE,
                "discovery": {"backend": "file", "path": str(discovery)},
                "request_plane": "tcp",
                "env": {"DYN_NAMESPACE": DYNAMO_NAMESPACE, "DYN_DISCOVERY_BACKEND": "file",
                        "DYN_FILE_KV": str(discovery), "DYN_REQUEST_PLANE": "tcp"}}

    def planner_info(self, graph: str, etcd: str | None) -> dict:
        problem = self.import_problem()
        missing = []
        if problem:
            missing.append(f"`import dynamo.planner` fails here ({problem})" + _import_fix(problem))
        if self.aisimulate_missing():
            missing.append("AISimulate (aisimulate_core), which the Planner's AIS performance models need: the "
                           "package index does not provide it (its aisimulate is a stub that downloads from a "
                           "private index, and the ForwardPassPerfModelConfig the Planner imports from it is not in "
                           "aiconfigurator-core 0.12.0)")
        if etcd is None:
            missing.append("no etcd binary: 1.6.1's virtual connector keeps its decisions in etcd "
                           "(install Debian's etcd-server)")
        works = []
        if etcd is not None:
            works.append(f"decisions published to this graph's virtual connector (Dynamo namespace "
                         f"{DYNAMO_NAMESPACE}, ETCD_ENDPOINTS={self.etcd_url(graph)}) are executed as scale "
                         "operations via planner and acknowledged")
        works.append("manual scaling with force, metrics and the Planner timeline")
        return {"runs": not missing, "missing": missing, "still_works": works,
                "connector": {"etcd": self.etcd_url(graph) if etcd else None,
                              "running": f"{graph}-connector" in self.supervisor.names()}}

    def shutdown(self) -> None:
        self.supervisor.stop_all()
