"""Which engine a graph's workers really run, and the model a real engine loads.

On a cluster a worker runs what its command line says. On the local runtime a worker runs
``dynamo.vllm`` only where the graph is a vLLM graph and the host has an NVIDIA GPU and vLLM;
everywhere else it runs ``dynamo.mocker``, Dynamo's simulated engine, which answers with
made-up tokens on a timing model. Every screen and every number measured on a mocker says
so: ``MOCKER_LABEL`` is that label, ``graph_simulation`` the one place that decides it.

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

MOCKER_LABEL = "simulated with Dynamo's mocker"
# A graph made from an AIConfigurator configuration (sizing/) carries these annotations: the
# estimate, experiment and rank (``12/disagg/1``), and who times its mocker workers
# ("AIConfigurator for h200_sxm, TP2 prefill / TP4 decode"). The local runtime gives its mocker
# workers that estimate's profile data (``timed_profile``); every label says so.
ESTIMATE_ANNOTATION = "sizing.dynamo-cp.nvidia.com/estimate"
TIMING_ANNOTATION = "sizing.dynamo-cp.nvidia.com/timed-by"
PROFILE_FILE = "perf_data.npz"
_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "mocker": "the mocker"}


@dataclass(frozen=True)
class Host:
    """What this machine can run: an NVIDIA GPU (nvidia-smi) and the vLLM package."""

    gpu: bool
    vllm: bool

    @classmethod
    def detect(cls) -> Host:
        return cls(gpu=shutil.which("nvidia-smi") is not None, vllm=importlib.util.find_spec("vllm") is not None)


@dataclass(frozen=True)
class EngineChoice:
    """What one service runs. ``engine`` is the worker's engine (vllm, sglang, trtllm, mocker)
    or ``frontend``; ``declared`` the one its graph asks for."""

    service: str
    engine: str
    declared: str
    simulated: bool
    reason: str = ""


@dataclass
class Simulation:
    """A graph some of whose workers are the mocker: the label and why, per service."""

    label: str
    reason: str
    services: list[str] = field(default_factory=list)

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
    if declared != "vllm":
        why = f"the local runtime runs real engines only for vLLM graphs; {_ENGINE_NAMES[declared]} is not run here"
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
    """Per worker or frontend service, what it runs on ``runtime`` ("local" or a cluster)."""
    services = [s for s in spec.services if s.role in ("frontend", "prefill", "decode", "worker")]
    if runtime == "local":
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
    return Simulation(mocker_label(spec), "; ".join(reasons), [c.service for c in simulated])


def deployment_simulation(deployment: Any) -> Simulation | None:
    """For a Deployment row (or None): its running revision on its runtime, if it is active."""
    if deployment is None or not deployment.active or deployment.revision is None:
        return None
    return graph_simulation(deployment.revision.graph_spec, deployment.runtime)


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


def _default_hf_cache() -> Path:
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))


def _in_hf_cache(repo_id: str, cache: Path | None) -> bool:
    """A hub snapshot with a config.json in the standard cache layout (models--org--name)."""
    root = (cache or _default_hf_cache()) / ("models--" + repo_id.replace("/", "--"))
    snapshots = root / "snapshots"
    return snapshots.is_dir() and any((s / "config.json").is_file() for s in snapshots.iterdir())
