"""This host's NVIDIA GPUs, through NVML (nvidia-ml-py, ``import pynvml``): how many there
are, which ones each local GPU worker gets (``CUDA_VISIBLE_DEVICES``), and how much memory and
compute a worker's own processes use. Django-free.

Without the NVIDIA driver (``libnvidia-ml.so`` missing, as on CI) or without a device, every
call answers "no GPU" with the reason; nothing raises. Per-process readings are by PID
(``nvmlDeviceGetComputeRunningProcesses``, ``nvmlDeviceGetProcessUtilization``): measured on an
H200 with a PyTorch process, see bench/results/gpu-nvml-h200.json."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

_lock = threading.Lock()  # nvmlInit/nvmlShutdown are reference-counted but not thread-safe


@dataclass(frozen=True)
class GpuHost:
    count: int
    names: list[str] = field(default_factory=list)
    memory_bytes: list[int] = field(default_factory=list)
    driver: str = ""
    reason: str = ""  # why there is no GPU, when count is 0

    def as_dict(self) -> dict:
        return {"count": self.count, "names": self.names, "memory_bytes": self.memory_bytes,
                "driver": self.driver, "reason": self.reason}


@dataclass(frozen=True)
class GpuUsage:
    """What a set of processes holds on the GPUs: None where NVML has no reading."""

    memory_bytes: int | None
    util_percent: float | None
    devices: list[int] = field(default_factory=list)  # NVML indices the processes run on


class GpuShortage(ValueError):
    """More GPUs asked for than the host has free."""


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def _nvml() -> Iterator[object | None]:
    """pynvml, initialised, or None when there is no usable NVML (the reason is raised as
    LookupError by ``probe``)."""
    try:
        import pynvml
    except ImportError as exc:
        raise LookupError("nvidia-ml-py is not installed") from exc
    with _lock:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, _NoPermission...
            raise LookupError(f"NVML unavailable: {exc}") from exc
        try:
            yield pynvml
        finally:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def probe() -> GpuHost:
    """The host's GPUs; ``count`` 0 with a reason when there are none or NVML cannot be read."""
    try:
        with _nvml() as nvml:
            count = nvml.nvmlDeviceGetCount()
            names, memory = [], []
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                names.append(_text(nvml.nvmlDeviceGetName(handle)))
                memory.append(int(nvml.nvmlDeviceGetMemoryInfo(handle).total))
            driver = _text(nvml.nvmlSystemGetDriverVersion())
    except LookupError as exc:
        return GpuHost(0, reason=f"no GPU: {exc}")
    except Exception as exc:  # any NVML failure means "no GPU", never a crash
        return GpuHost(0, reason=f"no GPU: {exc.__class__.__name__}: {exc}")
    return GpuHost(count, names, memory, driver, "" if count else "no GPU: NVML sees no device")


def usage_of(pids: Iterable[int], *, since_us: int | None = None) -> GpuUsage:
    """GPU memory (sum over devices) and SM utilisation (sum of the processes' samples, per
    device, highest device) of ``pids``. Utilisation samples are NVML's since ``since_us``
    (default: the last ten seconds)."""
    wanted = set(pids)
    if not wanted:
        return GpuUsage(None, None)
    since = since_us if since_us is not None else int((time.time() - 10) * 1e6)
    try:
        with _nvml() as nvml:
            memory, util, devices = 0, None, []
            seen = False
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                procs = [p for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid in wanted]
                if procs:
                    seen = True
                    devices.append(index)
                    memory += sum(int(p.usedGpuMemory or 0) for p in procs)
                try:
                    samples = nvml.nvmlDeviceGetProcessUtilization(handle, since)
                except nvml.NVMLError:  # NVMLError_NotFound: no sample in the window
                    samples = []
                # One sample per process and time stamp: keep each process's latest.
                latest: dict[int, tuple[int, float]] = {}
                for s in samples:
                    if s.pid in wanted and s.timeStamp >= latest.get(s.pid, (-1, 0.0))[0]:
                        latest[s.pid] = (s.timeStamp, float(s.smUtil))
                if latest:
                    device_util = sum(v for _, v in latest.values())
                    util = device_util if util is None else max(util, device_util)
    except LookupError:
        return GpuUsage(None, None)
    except Exception:  # any NVML failure: no reading
        return GpuUsage(None, None)
    return GpuUsage(memory if seen else None, util, devices)


def assign_gpus(requests: list[tuple[str, int]], count: int, *, held: dict[str, list[int]] | None = None,
                taken: dict[str, list[int]] | None = None) -> dict[str, list[int]]:
    """GPU indices for each (pod, GPUs) request: a pod keeps what it ``held`` (so a running
    worker is never moved), the others get the lowest indices free of ``taken`` (other graphs'
    pods). Raises GpuShortage, naming what is asked and what is free, when they do not fit:
    all or nothing, so a graph never starts half its GPU workers."""
    held, taken = held or {}, taken or {}
    busy = {i for devices in taken.values() for i in devices}
    out: dict[str, list[int]] = {}
    for pod, gpus in requests:
        keep = held.get(pod)
        if keep and len(keep) == gpus and not busy & set(keep) and all(i < count for i in keep):
            out[pod] = list(keep)
            busy |= set(keep)
    asked = sum(g for _, g in requests)
    for pod, gpus in requests:
        if pod in out:
            continue
        free = [i for i in range(count) if i not in busy]
        if len(free) < gpus:
            in_use = len({i for devices in taken.values() for i in devices})
            raise GpuShortage(
                f"not enough GPUs on this host: this graph's GPU workers ask for {asked} GPU(s), the host has "
                f"{count}" + (f" and {in_use} are used by other graphs" if in_use else "")
                + ": lower the replicas or GPUs per replica, or delete another graph")
        out[pod] = free[:gpus]
        busy |= set(free[:gpus])
    return out


def visible_devices(devices: list[int]) -> str:
    return ",".join(str(i) for i in devices)


def gpu_env(devices: list[int]) -> dict[str, str]:
    """The env that confines a worker to ``devices`` (NVML indices). CUDA numbers GPUs by
    speed unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by PCI bus: set both, so they agree."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": visible_devices(devices)}
