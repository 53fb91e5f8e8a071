"""The process layer of the local runtime: Dynamo graphs as supervised processes on this host.

Django-free. It builds argv and env for one Dynamo process from typed inputs (never from a
command string), allocates loopback ports, probes readiness, and supervises processes like a
tiny kubelet: restart with exponential back-off, CrashLoopBackOff, pidfiles so that a crashed
operator's processes are found and killed on the next start.

Dynamo 1.6.1 facts this module relies on (checked on this host, no GPU, no network):
* ``--discovery-backend file`` plus one ``DYN_FILE_KV`` folder per graph: no etcd, no NATS.
* ``DYN_SYSTEM_PORT`` is parsed as an i16: a worker's system port must be <= 32767.
* A worker's ``/health`` (and ``/live``) on the system port stays 503 "notready" forever unless
  ``DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='["generate"]'``. The runtime logs that variable as
  deprecated, yet reads it. ``DYN_SYSTEM_ENABLED`` is deprecated and ignored: the port alone
  enables the server.
* The frontend's TCP response-stream listener binds the host's IP unless
  ``DYN_TCP_RESPONSE_STREAM_HOST`` is set.
* The ZMQ event plane always binds ``0.0.0.0`` on random ports (and the mocker's bootstrap port
  binds ``0.0.0.0`` too); ``DYN_EVENT_PLANE_HOST`` only changes the address it advertises."""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..commandline import ROUTER_FLAGS
from ..commandline import ROUTER_MODES as DYNAMO_ROUTER_MODES
from .base import EventRecord, PodStatus

LOOPBACK = "127.0.0.1"
MAX_SYSTEM_PORT = 32767  # DYN_SYSTEM_PORT is an i16 in the 1.6.1 runtime config
Kind = Literal["frontend", "mocker", "vllm"]
Mode = Literal["agg", "prefill", "decode"]
ENTRY_MODULES = {"frontend": "dynamo.frontend", "mocker": "dynamo.mocker", "vllm": "dynamo.vllm"}
# "direct" expects the caller to name the worker in every request: nothing here does.
ROUTER_MODES = tuple(m for m in DYNAMO_ROUTER_MODES if m != "direct")
# The frontend's router tuning flags (dynamo.frontend 1.6.1), minus those that read a file.
_ROUTER_TUNING = {flag for flag in ROUTER_FLAGS if flag not in (
    "--router-mode", "--router-tracking-key-file", "--router-policy-config")}
_ROUTER_TUNING |= {"--no-" + flag[2:] for flag in _ROUTER_TUNING if ROUTER_FLAGS[flag][0] == "bool"}

# Extra engine flags a spec may add. Only tuning knobs: nothing that reads a file, opens a
# listener, picks a model or loads remote code. Flags this module sets itself are not listed.
SAFE_FLAGS: dict[str, frozenset[str]] = {
    "frontend": frozenset({
        "--kv-cache-block-size", "--migration-limit", "--migration-max-seq-len", "--router-temperature",
        "--router-replica-sync", "--router-kv-events", "--router-track-active-blocks", "--router-ttl-secs",
        "--router-queue-threshold", "--router-min-initial-workers", "--enforce-disagg",
        "--active-decode-blocks-threshold", "--active-prefill-tokens-threshold",
        "--active-prefill-tokens-threshold-frac", "--router-prefill-load-scale",
        "--router-decode-active-request-weight",
    }) | _ROUTER_TUNING,
    "mocker": frozenset({
        "--num-gpu-blocks-override", "--block-size", "--max-model-len", "--max-num-seqs",
        "--max-num-batched-tokens", "--enable-prefix-caching", "--no-enable-prefix-caching",
        "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--preemption-mode",
        "--decode-speedup-ratio", "--data-parallel-size", "--startup-time", "--engine-type",
        "--kv-transfer-bandwidth", "--kv-transfer-timing-mode", "--kv-cache-dtype", "--kv-bytes-per-token",
        "--gpu-memory-utilization", "--reasoning",
    }),
    "vllm": frozenset({
        "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--max-model-len",
        "--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens", "--enforce-eager",
        "--dtype", "--kv-cache-dtype", "--block-size", "--enable-prefix-caching",
        "--no-enable-prefix-caching", "--enable-chunked-prefill", "--no-enable-chunked-prefill",
        "--quantization", "--seed",
        "--swap-space", "--cpu-offload-gb", "--kv-transfer-config",
    }),
}
FLAG_RE = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
NUMBER_RE = re.compile(r"^-?\d+(\.\d+)?$")
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Spec env may not change how Python or the loader starts, nor what this module pins.
REFUSED_ENV_RE = re.compile(r"^(LD_|DYLD_|PYTHON|DYN_|(HF_HUB|TRANSFORMERS)_OFFLINE$|PATH$|BASH_ENV$|ENV$)")
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "VIRTUAL_ENV",
                 "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "HF_HOME")
# info, minus one line per HTTP response: readiness probes would otherwise fill the frontend log.
DEFAULT_LOG = "info,dynamo_llm::http::service::service_v2=warn"


def _check_value(value: str, flag: str) -> str:
    if not value or len(value) > 4096 or any(c in value for c in "\x00\r\n"):
        raise ValueError(f"value {value!r} of {flag} is empty, too long or contains NUL/newlines")
    return value


def validate_extra_args(kind: Kind, args: Sequence[str]) -> list[str]:
    """Check extra engine args against the allow-list; ``--flag=value`` is split. Raises ValueError."""
    allowed, out, flag = SAFE_FLAGS[kind], [], ""
    for token in args:
        token = str(token)
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if not FLAG_RE.match(name):
                raise ValueError(f"{name!r} is not a valid flag name")
            if name not in allowed:
                raise ValueError(f"flag {name} is not allowed for {ENTRY_MODULES[kind]} "
                                 f"(allowed: {', '.join(sorted(allowed))})")
            out.append(name)
            flag = name
            if eq:
                out.append(_check_value(value, name))
        elif not flag:
            raise ValueError(f"value {token!r} does not follow a flag")
        elif token.startswith("-") and not NUMBER_RE.match(token):
            raise ValueError(f"short option {token!r} is not allowed; use --long-flags")
        else:
            out.append(_check_value(token, flag))
    return out


def build_process_argv(
    *, kind: Kind, python: str = sys.executable, http_port: int | None = None,
    model_path: str | Path | None = None, model_name: str | None = None, mode: Mode = "agg",
    bootstrap_port: int | None = None, speedup_ratio: float | None = None,
    router_mode: str = "round-robin", extra_args: Sequence[str] = (),
) -> list[str]:
    """argv for one Dynamo process. Only the modules in ENTRY_MODULES can come out of here."""
    if kind not in ENTRY_MODULES:
        raise ValueError(f"unknown process kind {kind!r}")
    extra = validate_extra_args(kind, extra_args)
    argv = [python, "-m", ENTRY_MODULES[kind]]
    planes = ["--discovery-backend", "file", "--request-plane", "tcp"]
    if kind == "frontend":
        if http_port is None:
            raise ValueError("the frontend needs an http_port")
        if router_mode not in ROUTER_MODES:
            raise ValueError(f"router mode {router_mode!r} is not one of {ROUTER_MODES}")
        return [*argv, "--http-host", LOOPBACK, "--http-port", str(_port(http_port)), *planes,
                "--router-mode", router_mode, *extra]
    if mode not in ("agg", "prefill", "decode"):
        raise ValueError(f"disaggregation mode {mode!r} is not agg, prefill or decode")
    if not model_path or not model_name:
        raise ValueError("a worker needs model_path and model_name")
    for value, what in ((str(model_path), "model path"), (model_name, "model name")):
        if value.startswith("-"):
            raise ValueError(f"{what} {value!r} may not start with '-'")
        _check_value(value, what)
    if kind == "mocker":
        argv += ["--model-path", str(model_path), "--model-name", model_name, *planes,
                 "--disaggregation-mode", mode]
        if mode == "prefill" and bootstrap_port is not None:
            # Decode workers learn this rendezvous port (and host) from the prefill worker's
            # discovery record; without it the mocker skips the simulated KV handshake.
            argv += ["--bootstrap-ports", str(_port(bootstrap_port))]
        if speedup_ratio is not None:
            if not 0 <= speedup_ratio <= 1000:
                raise ValueError("speedup_ratio must be within [0, 1000]")
            argv += ["--speedup-ratio", f"{speedup_ratio:g}"]
        return argv + extra
    # dynamo.vllm (GPU hosts): built here, never run on this machine.
    argv += ["--model", str(model_path), "--served-model-name", model_name, *planes,
             "--disaggregation-mode", mode]
    if mode == "prefill" and "--kv-transfer-config" not in extra:  # extras come back split at "="
        # 1.6.1 refuses a prefill worker without an explicit connector (the NIXL default is gone).
        argv += ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}']
    return argv + extra


def build_process_env(
    *, discovery_dir: Path, system_port: int | None = None, log_level: str = DEFAULT_LOG,
    extra_env: Mapping[str, str] | None = None, base_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Env for one Dynamo process: a few inherited basics (never the operator's secrets), the
    spec's checked extras, then everything that keeps the graph offline and on loopback."""
    _check_value(log_level, "DYN_LOG")
    base = os.environ if base_env is None else base_env
    env = {k: base[k] for k in INHERITED_ENV if k in base}
    for key, value in (extra_env or {}).items():
        if not ENV_NAME_RE.match(key) or REFUSED_ENV_RE.match(key):
            raise ValueError(f"environment variable {key!r} may not be set by a graph")
        env[key] = _check_value(str(value), key)
    env.update({
        "DYN_DISCOVERY_BACKEND": "file", "DYN_REQUEST_PLANE": "tcp", "DYN_FILE_KV": str(discovery_dir),
        "DYN_TCP_RPC_HOST": LOOPBACK, "DYN_TCP_RESPONSE_STREAM_HOST": LOOPBACK,
        "DYN_EVENT_PLANE_HOST": LOOPBACK, "DYN_SYSTEM_HOST": LOOPBACK,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1", "DYN_SDK_DISABLE_ANSI_LOGGING": "1", "NO_COLOR": "1", "DYN_LOG": log_level,
    })
    if system_port is not None:
        if not 1024 <= system_port <= MAX_SYSTEM_PORT:
            raise ValueError(f"system port {system_port} is outside 1024..{MAX_SYSTEM_PORT} (Dynamo: i16)")
        env["DYN_SYSTEM_PORT"] = str(system_port)
        env["DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"] = '["generate"]'
    return env


def _port(port: int) -> int:
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{port!r} is not a TCP port")
    return port


# --- ports, probes, waiting -------------------------------------------------------------------

class PortRangeExhausted(RuntimeError):
    pass


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    # No SO_REUSEADDR: stricter than the servers' own bind, so a port in use is never handed out.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def allocate_ports(count: int, lo: int, hi: int, taken: set[int]) -> list[int]:
    """``count`` ports in [lo, hi] free on 127.0.0.1 now and not in ``taken``."""
    found: list[int] = []
    for port in range(max(lo, 1), min(hi, 65535) + 1):
        if port not in taken and port_is_free(port):
            found.append(port)
            if len(found) == count:
                return found
    raise PortRangeExhausted(f"need {count} free ports on {LOOPBACK} in {lo}-{hi}, found {len(found)} "
                             f"({len(taken)} already taken by local graphs); widen the port range")


def http_get(port: int, path: str, *, timeout: float = 0.5) -> tuple[int, bytes] | None:
    """GET on loopback, no proxies (http.client ignores *_proxy); None when nothing answers."""
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read(1 << 20)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def probe_frontend(port: int, model: str, *, timeout: float = 0.5) -> bool:
    """Ready when /v1/models lists the model (the frontend answers 200 long before that)."""
    result = http_get(port, "/v1/models", timeout=timeout)
    if not result or result[0] != 200:
        return False
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return any(m.get("id") == model for m in json.loads(result[1]).get("data", []))
    return False


def probe_worker(system_port: int, *, timeout: float = 0.5) -> bool:
    """Ready when the system server's /health answers 200 (its "generate" endpoint is up)."""
    result = http_get(system_port, "/health", timeout=timeout)
    return bool(result and result[0] == 200)


T = TypeVar("T")


def wait_until(predicate: Callable[[], T], *, timeout: float, interval: float = 0.25,
               what: str = "condition") -> T:
    """Call ``predicate`` until it returns something truthy, which is returned; TimeoutError after."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# --- /proc helpers ------------------------------------------------------------------------------

def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time in clock ticks since boot) from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may contain spaces and ")"
    return fields[0], int(fields[2]), int(fields[19])


def group_members(pgid: int, *, started_since: int = 0) -> list[int]:
    """Live (non-zombie) processes of a process group, optionally started at/after a tick."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := proc_stat(int(entry))) and st[1] == pgid and st[0] != "Z" \
                and st[2] >= started_since:
            members.append(int(entry))
    return members


def _signal_group(pgid: int, sig: int) -> None:
    if pgid <= 1 or pgid == os.getpgrp():
        return  # never our own group, never init
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_groups(pgids: Sequence[int], grace: float, reap: Callable[[], None] = lambda: None) -> None:
    """SIGTERM each group, SIGKILL what is left after ``grace`` seconds, wait until all are gone."""
    for pgid in pgids:
        _signal_group(pgid, signal.SIGTERM)
    for limit, then in ((grace, signal.SIGKILL), (5.0, None)):
        deadline = time.monotonic() + limit
        while True:
            reap()
            alive = [g for g in pgids if group_members(g)]
            if not alive or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not alive or then is None:
            return
        for pgid in alive:
            _signal_group(pgid, then)


# --- the supervisor -----------------------------------------------------------------------------

PENDING, RUNNING, CRASH_LOOP, TERMINATING = "Pending", "Running", "CrashLoopBackOff", "Terminating"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


@dataclass
class ProcStatus:
    name: str
    phase: str  # Pending (backing off), Running, CrashLoopBackOff, Terminating
    pid: int | None
    restarts: int
    started_at: dt.datetime | None
    last_exit_code: int | None  # negative: killed by that signal
    port: int | None
    backoff: float | None  # the delay before the pending restart, when one is pending
    message: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)


@dataclass
class _Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    meta: dict[str, Any]
    popen: subprocess.Popen | None = None
    phase: str = PENDING
    restarts: int = 0
    started_at: dt.datetime | None = None
    started_mono: float = 0.0
    last_exit_code: int | None = None
    delay: float = 0.0  # next back-off delay
    backoff: float | None = None
    next_start: float = 0.0
    message: str = ""
    restart_times: deque[float] = field(default_factory=deque)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def tail_file(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a (possibly large) log file; "" when it does not exist."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 2000 * max(lines, 1)))
            data = fh.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


class Supervisor:
    """Named processes, each in its own session (so one killpg stops it and its children),
    restarted with exponential back-off like a kubelet with restartPolicy Always. Thread-safe."""

    def __init__(self, runtime_dir: Path, *, backoff_base: float = 1.0, backoff_cap: float = 60.0,
                 stable_after: float = 60.0, crashloop_restarts: int = 3, crashloop_window: float = 300.0):
        self.runtime_dir = Path(runtime_dir)
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.backoff_base, self.backoff_cap, self.stable_after = backoff_base, backoff_cap, stable_after
        self.crashloop_restarts, self.crashloop_window = crashloop_restarts, crashloop_window
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.RLock()
        self._me = (os.getpid(), (proc_stat(os.getpid()) or ("", 0, 0))[2])

    # public API ------------------------------------------------------------------------------

    def ensure(self, name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_path: Path,
               meta: Mapping[str, Any] | None = None) -> list[EventRecord]:
        """Start ``name`` unless it already runs (or backs off) with this argv/env; a changed
        argv/env replaces the process."""
        if not NAME_RE.match(name):
            raise ValueError(f"process name {name!r} is invalid (letters, digits, '.', '_', '-')")
        events: list[EventRecord] = []
        with self._lock:
            old = self._procs.get(name)
            if old and old.argv == list(argv) and old.env == dict(env) and old.phase != TERMINATING:
                old.meta.update(meta or {})
                return events
        if old:
            events += self.stop(name)
        proc = _Proc(name, list(argv), dict(env), Path(cwd), Path(log_path), dict(meta or {}),
                     delay=self.backoff_base)
        with self._lock:
            self._procs[name] = proc
            events += self._spawn(proc)
        return events

    def poll(self) -> list[EventRecord]:
        """Reap exited processes and start those whose back-off has elapsed."""
        events: list[EventRecord] = []
        with self._lock:
            now = time.monotonic()
            for p in list(self._procs.values()):
                if p.phase == TERMINATING:
                    continue
                if p.popen is not None and (code := p.popen.poll()) is not None:
                    events += self._exited(p, code, now)
                elif p.popen is None and now >= p.next_start:
                    p.restarts += 1
                    p.restart_times.append(now)
                    events += self._spawn(p)
        return events

    def stop(self, name: str, grace: float = 5.0) -> list[EventRecord]:
        """SIGTERM the process group, SIGKILL after ``grace``; forget the process. Idempotent."""
        return self._stop([name], grace)

    def stop_all(self, grace: float = 5.0) -> list[EventRecord]:
        with self._lock:
            names = list(self._procs)
        return self._stop(names, grace)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._procs)

    def status(self, name: str) -> ProcStatus:
        with self._lock:
            p = self._procs[name]
            pid = p.popen.pid if p.popen else None
            return ProcStatus(p.name, p.phase, pid, p.restarts, p.started_at, p.last_exit_code,
                              p.meta.get("port"), p.backoff if pid is None else None, p.message, dict(p.meta),
                              list(p.argv))

    def tail_log(self, name: str, lines: int = 20) -> str:
        with self._lock:
            path = self._procs[name].log_path
        return tail_file(path, lines)

    def probe(self, name: str) -> bool:
        """Readiness from meta: ``probe`` is "frontend" (needs ``port`` and ``model``) or "worker"
        (needs ``port``, the system port). Without a probe, running means ready."""
        st = self.status(name)
        if st.phase != RUNNING:
            return False
        kind, port = st.meta.get("probe"), st.meta.get("port")
        if kind == "frontend":
            return probe_frontend(port, st.meta["model"])
        if kind == "worker":
            return probe_worker(port)
        return True

    def wait_ready(self, names: Sequence[str], *, timeout: float) -> float:
        """Poll and probe until all ``names`` are ready; seconds taken. Fails fast (RuntimeError
        with the log tail) when one of them exits meanwhile."""
        start = time.monotonic()

        def ready() -> bool:
            for event in self.poll():
                if event.reason == "Exited" and event.object in names:
                    raise RuntimeError(f"{event.object} exited while starting: {event.message}\n"
                                       f"{self.tail_log(event.object, 30)}")
            return all(self.probe(n) for n in names)

        wait_until(ready, timeout=timeout, interval=0.25, what=f"{', '.join(names)} to be ready")
        return time.monotonic() - start

    def pod_status(self, name: str, *, ready: bool | None = None) -> PodStatus:
        """The process seen as a pod (meta ``service`` and ``role`` name its pool)."""
        st = self.status(name)
        is_ready = self.probe(name) if ready is None else ready
        crashed = st.phase in (PENDING, CRASH_LOOP) and st.last_exit_code is not None
        return PodStatus(
            name=name, service=st.meta.get("service", ""), role=st.meta.get("role", ""), phase=st.phase,
            ready=is_ready and st.phase == RUNNING, restarts=st.restarts, started_at=st.started_at,
            node="localhost", port=st.port,
            reason=st.phase if st.phase == CRASH_LOOP else ("Error" if crashed else ""),
            message=st.message, last_log=self.tail_log(name, 20) if crashed else "",
            command=st.argv[:3], args=st.argv[3:])

    def install_exit_handlers(self, grace: float = 5.0) -> None:
        """Stop everything when the operator exits normally or on SIGTERM/SIGINT (then the
        previous handler runs). Signal handlers can only be set from the main thread."""
        atexit.register(self.stop_all, grace)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)

            def handler(signum: int, frame: Any, previous: Any = previous) -> None:
                self.stop_all(grace)
                if callable(previous):
                    previous(signum, frame)
                elif previous != signal.SIG_IGN:
                    signal.signal(signum, signal.SIG_DFL)
                    os.kill(os.getpid(), signum)

            signal.signal(sig, handler)

    @staticmethod
    def reap_orphans(folder: Path, grace: float = 5.0) -> list[int]:
        """Kill the process groups a previous (crashed) operator left behind, from its pidfiles;
        returns their pids. A pidfile whose operator is still alive is left alone, and a pid
        whose start time differs from the pidfile's was reused by another process: not killed."""
        killed, groups = [], []
        for pidfile in sorted(Path(folder).glob("*.pid")):
            try:
                rec = json.loads(pidfile.read_text())
                pid, pgid, start = int(rec["pid"]), int(rec["pgid"]), int(rec["start_time"])
                owner, owner_start = int(rec["supervisor_pid"]), int(rec["supervisor_start"])
            except (OSError, ValueError, KeyError, TypeError):
                pidfile.unlink(missing_ok=True)
                continue
            if (st := proc_stat(owner)) and st[2] == owner_start and st[0] != "Z":
                continue  # its operator still runs and owns it
            leader = proc_stat(pid)
            if leader and leader[2] == start and leader[0] != "Z":
                groups.append(pgid)
                killed.append(pid)
            elif leader is None or leader[0] == "Z":
                # The leader died but its children may still run in its group.
                for member in group_members(pgid, started_since=start):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(member, signal.SIGKILL)
                    killed.append(member)
            pidfile.unlink(missing_ok=True)
        _kill_groups(groups, grace)
        return killed

    # internals ---------------------------------------------------------------------------

    def _event(self, type_: str, reason: str, name: str, message: str) -> EventRecord:
        return EventRecord(at=_now(), type=type_, reason=reason, object=name, message=message)

    def _pidfile(self, name: str) -> Path:
        return self.runtime_dir / f"{name}.pid"

    def _spawn(self, p: _Proc) -> list[EventRecord]:
        p.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(p.log_path, "ab") as log:
            log.write(f"--- {_now():%Y-%m-%dT%H:%M:%SZ} supervisor: starting {p.name} "
                      f"(restarts={p.restarts}): {shlex.join(p.argv)}\n".encode())
            log.flush()
            try:
                p.popen = subprocess.Popen(p.argv, env=p.env, cwd=p.cwd, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
            except OSError as exc:  # missing interpreter or cwd: treat as a crash, back off
                p.message = f"failed to start: {exc}"
                log.write(f"--- supervisor: {p.message}\n".encode())
                failed = self._event("Warning", "Failed", p.name, p.message)
                return [failed, *self._exited(p, None, time.monotonic())]
        p.phase, p.started_at, p.started_mono = RUNNING, _now(), time.monotonic()
        p.backoff, p.message = None, ""
        pid = p.popen.pid
        record = {"pid": pid, "pgid": pid, "start_time": (proc_stat(pid) or ("", 0, 0))[2], "name": p.name,
                  "supervisor_pid": self._me[0], "supervisor_start": self._me[1]}
        tmp = self._pidfile(p.name).with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self._pidfile(p.name))
        return [self._event("Normal", "Started", p.name, f"started pid {pid} (restarts={p.restarts})")]

    def _exited(self, p: _Proc, code: int | None, now: float) -> list[EventRecord]:
        if p.popen is not None:
            _kill_groups([p.popen.pid], 0.0)  # children of a dead leader die with it
            self._pidfile(p.name).unlink(missing_ok=True)
        uptime = now - p.started_mono if p.popen is not None else 0.0
        p.popen, p.last_exit_code, p.started_at = None, code, None
        if uptime >= self.stable_after:  # it ran long enough: forget earlier crashes
            p.delay = self.backoff_base
            p.restart_times.clear()
        while p.restart_times and now - p.restart_times[0] > self.crashloop_window:
            p.restart_times.popleft()
        p.backoff, p.next_start = p.delay, now + p.delay
        p.delay = min(p.delay * 2, self.backoff_cap)
        looping = len(p.restart_times) >= self.crashloop_restarts
        p.phase = CRASH_LOOP if looping else PENDING
        how = "failed to start" if code is None else (
            f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}")
        p.message = f"{how}; restarting in {p.backoff:g}s"
        events = [self._event("Warning", "Exited", p.name, how)]
        if looping:
            message = f"Back-off {p.backoff:g}s restarting failed process ({p.restarts} restarts)"
            events.append(self._event("Warning", "BackOff", p.name, message))
        return events

    def _stop(self, names: Sequence[str], grace: float) -> list[EventRecord]:
        with self._lock:
            procs = [self._procs[n] for n in names if n in self._procs]
            for p in procs:
                p.phase = TERMINATING
        running = [p for p in procs if p.popen is not None]

        def reap() -> None:
            for p in running:
                p.popen.poll()  # a zombie leader keeps its pid: reap it

        # Outside the lock, so other threads see Terminating meanwhile.
        _kill_groups([p.popen.pid for p in running], grace, reap)
        for p in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=1.0)  # the leader may have died after the last reap()
        events = []
        with self._lock:
            for p in procs:
                if self._procs.get(p.name) is p:
                    del self._procs[p.name]
                self._pidfile(p.name).unlink(missing_ok=True)
                events.append(self._event("Normal", "Killing", p.name, f"stopped {p.name}"))
        return events
