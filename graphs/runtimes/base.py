"""The runtime interface: where a graph runs. One small surface, two implementations
(the local runtime, processes on this host; the Kubernetes runtime, a cluster running the
Dynamo operator). Services call runtimes only through this interface."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the process layer imports this module on hosts without the spec's pydantic
    from core.spec import GraphSpec

# vLLM's NIXL connector logs one line per backend its agent creates, e.g.
# "Backend UCX was instantiated" (nixl_connector.py, through the NIXL agent).
_BACKEND = re.compile(r"Backend (\w+) was instantiated")
_NIXL_AGENT = re.compile(r"NIXL[^\n]{0,80}\b(?:agent|initialized|is available)", re.IGNORECASE)
SIMULATED = "simulated"
LOG_HEAD_BYTES = 256 * 1024  # the backend is logged at start: read this much of a log's head


@dataclass(frozen=True)
class Target:
    """Where one graph is deployed: a runtime kind plus its address within it."""

    kind: str  # "local" or "kubernetes"
    cluster: str = ""  # kubeconfig context or cluster record name (kubernetes only)
    namespace: str = ""  # Kubernetes namespace (kubernetes only)


@dataclass
class PodStatus:
    """One pod, or one local process reported as a pod (kubectl get pods, plus our columns)."""

    name: str
    service: str  # the DGD component it belongs to
    role: str  # frontend, prefill, decode, worker...
    phase: str  # Pending, Running, Succeeded, Failed, CrashLoopBackOff, Terminating...
    ready: bool
    restarts: int = 0
    started_at: dt.datetime | None = None
    node: str = ""
    gpus: int = 0
    shm_bytes: int | None = None  # size of /dev/shm, None when unknown
    port: int | None = None
    reason: str = ""  # short machine reason: ImagePullBackOff, Unschedulable, OOMKilled...
    message: str = ""  # the human message behind the reason
    last_log: str = ""  # the last lines of the log, kept when the pod is crashing
    # The main container's command line, as kubectl describe shows it (Command:, Args:).
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    shm_source: str = ""  # where shm_bytes was read: the pod's volumes, df in the pod, the process
    nixl_backend: str = ""  # the KV-transfer backend the worker's log names; "simulated" on the mocker
    gpu_devices: str = ""  # CUDA_VISIBLE_DEVICES (local GPU workers)
    gpu_memory_bytes: int | None = None
    gpu_util: float | None = None  # percent


# A pod's columns, declared once by PodStatus: the status cache's Pod rows hold each of them
# (graphs/status_cache.py writes them all), and pages and the API show them all but the log
# lines, which are shown inside a diagnosis. A new reading is a field above, a column on
# graphs.models.Pod (a migration), and the runtime that reads it.
POD_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(PodStatus))
POD_SHOWN: tuple[str, ...] = tuple(c for c in POD_COLUMNS if c != "last_log")


@dataclass
class EventRecord:
    at: dt.datetime
    type: str  # Normal or Warning
    reason: str  # Started, Ready, Exited, Restarted, FailedScheduling...
    object: str  # pod or graph name
    message: str


@dataclass
class Observation:
    """What a runtime sees of one graph at one moment."""

    state: str  # see graphs.models.GraphState
    message: str = ""
    pods: list[PodStatus] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    conditions: list[dict] = field(default_factory=list)
    endpoint: str = ""  # the frontend's base URL, as reachable from the control plane


@dataclass
class ApplyResult:
    changed: bool
    diff: str  # a readable unified diff against what was live ("" when nothing changes)
    warnings: list[str] = field(default_factory=list)


class Runtime(Protocol):
    """``deployment`` is the graph's status-cache row (graphs.models.Deployment), locked by
    the caller for the duration of the call. A runtime sets the desired state on it (revision,
    manifest, replicas, generation) and never saves it: the operation does, in the same
    transaction that finishes it. What a runtime observes goes to graphs.status_cache."""

    kind: str

    def apply(self, *, target: Target, spec: GraphSpec, manifest: dict, dry_run: bool = False,
              deployment, revision) -> ApplyResult:
        """Make the graph run as declared. Idempotent: applying the same thing twice changes
        nothing the second time. With dry_run, change nothing and return the diff."""

    def scale(self, *, target: Target, spec: GraphSpec, service: str, replicas: int, deployment) -> None:
        """Set one pool's replicas. Never touches any other pool."""

    def delete(self, *, target: Target, spec: GraphSpec, deployment) -> None:
        """Stop everything the graph runs. Idempotent: deleting what is gone succeeds."""

    def pod_log(self, *, deployment, pod: str, lines: int = 200) -> str:
        """The last ``lines`` lines of one pod's log."""

    # What the operations ask of the runtime a graph runs on (graphs/operations.py), so that no
    # operation names a runtime: a new runtime answers these and nothing else changes there.
    def admit_apply(self, *, graph, deployment, revision, cluster: str, namespace: str, dry_run: bool, force: bool,
                    recreate: bool, confirm: str) -> dict:
        """Refuse (OperationRefused), before the operation is recorded, an apply this runtime would
        refuse, undo or be unable to run; else the parameters the operation records beside
        ``runtime``: where it applies, and how (``deployment``: the graph's row, or None)."""

    def admit_scale(self, *, graph, deployment, spec, service: str, replicas: int) -> None:
        """Refuse, before the operation is recorded, a pool's count this runtime cannot run."""

    def change_refused(self, deployment) -> str:
        """Why a change to the deployment must wait now ("" when it need not): a rollout the
        change would cut short."""

    def apply_target(self, deployment, params: dict) -> tuple[Target, dict]:
        """Where a recorded apply goes (its ``params``, as admit_apply wrote them) and the keyword
        arguments apply() takes beside the common ones."""

    def settle_scale(self, runner, *, target: Target, spec, deployment, service: str, replicas: int, before: int,
                     text: str) -> str:
        """After scale(): how the operation learns the pool runs its new count (wait for it, or
        leave ``runner`` waiting for the observer); the operation's result text."""


def nixl_backend(kind: str, log_text: str) -> str:
    """The KV-transfer backend a worker brought up, from its log: "UCX" (or several, joined),
    "simulated" for the mocker (it only models the transfer time), "" when the log says
    nothing yet."""
    if kind == "mocker":
        return SIMULATED
    backends = list(dict.fromkeys(_BACKEND.findall(log_text)))
    if backends:
        return "+".join(backends)
    return "NIXL (backend not logged)" if _NIXL_AGENT.search(log_text) else ""
