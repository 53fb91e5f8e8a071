"""argv and env for one Dynamo process of the local runtime, built from typed inputs (never
from a command string). Django-free.

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

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from core.dgd.commandline import ROUTER_FLAGS, tokens
from core.facts import ROUTER_MODES as DYNAMO_ROUTER_MODES
from core.spec import Service

from ..processes import LOOPBACK

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


MIGRATION_LIMIT = 3  # the frontend's re-sends of one request, where the spec sets none


def build_process_argv(
    *, kind: Kind, python: str = sys.executable, http_port: int | None = None,
    model_path: str | Path | None = None, model_name: str | None = None, mode: Mode = "agg",
    bootstrap_port: int | None = None, speedup_ratio: float | None = None,
    router_mode: str = "round-robin", extra_args: Sequence[str] = (), profile_data: Path | None = None,
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
        # A stream cut by a worker that leaves (a rollout's drain, a scale-down, a crash) is sent
        # again to another worker, from the tokens it has, unless the spec says otherwise:
        # dynamo.frontend's default is 0, and a vLLM worker stops its engine 5 s after leaving
        # discovery (graceful_shutdown.py), cutting the longer streams it still serves
        # (bench/rollout.py --engine vllm-cpu measured 3 such and 1 request in flight; rollout.py).
        migration = [] if "--migration-limit" in extra else ["--migration-limit", str(MIGRATION_LIMIT)]
        return [*argv, "--http-host", LOOPBACK, "--http-port", str(_port(http_port)), *planes,
                "--router-mode", router_mode, *migration, *extra]
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
        if profile_data is not None:
            # A mocker-format NPZ (prefill TTFT by ISL, decode ITL by KV tokens and context): the
            # mocker times each step from it instead of its built-in model (dynamo/mocker/args.py).
            argv += ["--planner-profile-data", str(profile_data)]
        return argv + extra
    # dynamo.vllm: on a GPU host, or on this CPU (vllm_cpu.py adds the rest).
    argv += ["--model", str(model_path), "--served-model-name", model_name, *planes,
             "--disaggregation-mode", mode]
    if mode == "prefill" and "--kv-transfer-config" not in extra:  # extras come back split at "="
        # 1.6.1 refuses a prefill worker without an explicit connector (the NIXL default is gone).
        argv += ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}']
    return argv + extra


def build_process_env(
    *, discovery_dir: Path, system_port: int | None = None, log_level: str = DEFAULT_LOG,
    extra_env: Mapping[str, str] | None = None, base_env: Mapping[str, str] | None = None,
    hub_offline: bool = True,
) -> dict[str, str]:
    """Env for one Dynamo process: a few inherited basics (never the operator's secrets), the
    spec's checked extras, then everything that keeps the graph offline and on loopback.
    ``hub_offline=False`` (a real engine allowed to download its model) drops only the hub's
    offline switches."""
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
    if not hub_offline:
        for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            env.pop(key)
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


# Flags the operator sets itself from the spec (model, role, discovery): never copied.
# A vLLM prefill worker's --max-num-seqs bounds the prefills it batches, and more requests queue;
# the 1.6.1 mocker's prefill worker also bounds by it the KV hand-offs waiting for a decode
# worker, and refuses the request beyond ("mocker handoff session limit reached"): with
# AIConfigurator's prefill batch of 1, all but one request in flight would fail.
_MOCKER_PREFILL_IGNORED = frozenset({"--max-num-seqs"})
_OWN_FLAGS = {"--model", "--model-path", "--model-name", "--served-model-name", "--disaggregation-mode",
              "--is-prefill-worker", "--is-decode-worker", "--discovery-backend", "--request-plane",
              "--bootstrap-ports", "--speedup-ratio", "--http-port", "--http-host", "--router-mode"}


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
