"""A local worker that runs a real engine (``dynamo.vllm``): the model it loads, the interpreter
it runs under, and on this host's CPU what vllm_cpu.py adds. The local operator asks
``graphs.engines.ENGINES`` what an engine needs (``loads_weights``, ``on_cpu``) and calls this."""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.spec import GraphSpec, Service

from ...engines import Engine, Host, ModelUnavailable, resolve_model, spec_model
from .engine_env import process_env
from .tinymodel import ensure_random_model
from .vllm_cpu import CpuWorker, worker_additions

SOCKET_PATH_MAX = 100  # a Unix socket path holds 107 bytes; ZMQ's ipc:// fails beyond


@dataclass(frozen=True)
class RealWorker:
    python: str
    model_path: str
    offline: bool
    cpu: CpuWorker | None  # what runs it on this CPU (vLLM on CPU); None on a GPU host


def real_model(spec: GraphSpec, service: Service, engine: Engine, host: Host, root: Path) -> tuple[str, bool]:
    """(model path or hub id, offline) a real engine loads. On the CPU a model this host lacks
    becomes a tiny random-weight model of its family; on a GPU host it is refused (ValueError)."""
    model = spec_model(spec, service)
    try:
        source = resolve_model(model, downloads=settings.LOCAL_RUNTIME_MODEL_DOWNLOADS and not engine.on_cpu)
    except ModelUnavailable as exc:
        if not engine.on_cpu:
            raise ValueError(f"{service.name} cannot start dynamo.vllm: {exc}") from None
        path = ensure_random_model(root / "models", model or spec.model or spec.name, python=host.vllm_cpu,
                                   env=process_env())
        return str(path), True
    return source.model, source.offline


def kv_events_socket(root: Path, pod: str) -> Path:
    """A short ipc path of the pod's own for its KV events (under the runtime folder if it fits)."""
    digest = hashlib.sha256(f"{root}:{pod}".encode()).hexdigest()[:12]
    path = root / "ipc" / f"{digest}.sock"
    if len(str(path)) > SOCKET_PATH_MAX:
        path = Path(tempfile.gettempdir()) / f"dynamo-cp-{digest}.sock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def real_worker(*, spec: GraphSpec, service: Service, engine: Engine, host: Host, root: Path, pod: str,
                mode: str, extra: list[str], python: str, side_channel_port: int | None) -> RealWorker:
    """Everything the operator needs to start ``pod`` on ``engine`` beside argv.py's command line.
    The core is set later, when the operator assigns one (``VLLM_CPU_OMP_THREADS_BIND``)."""
    model_path, offline = real_model(spec, service, engine, host, root)
    if not engine.on_cpu:
        return RealWorker(python, model_path, offline, None)
    kv_events = kv_events_socket(root, pod) if spec.router_mode == "kv" else None
    cpu = worker_additions(mode=mode, core=0, extra=extra, side_channel_port=side_channel_port,
                           kv_events=kv_events, cache_root=root / "vllm-cache")
    cpu.env.update(process_env({}))  # torchvision importable: deploy/engines/vllm_cpu_site
    return RealWorker(host.vllm_cpu, model_path, offline, cpu)
