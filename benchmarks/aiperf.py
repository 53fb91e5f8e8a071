"""The one module that knows aiperf (NVIDIA's benchmark tool, successor of genai-perf): the
argv of one ``aiperf profile`` invocation, its environment, how far it got, and what its
``profile_export_aiperf.json`` says. No subprocess handling here (runner.py), no database.

Verified against aiperf 0.13.0 (``schema_version`` 1.4 of the export):

* the summary is ``profile_export_aiperf.json``: one object per metric tag, each with ``unit``
  and ``avg`` and, for per-request metrics, ``p1``..``p99``, ``min``, ``max``, ``std``;
* ``profile_export.jsonl`` gains one line per finished request while the run goes: the
  progress bar counts them;
* ``logs/aiperf.log`` says ``AIPerf System is PROFILING`` when the load starts and
  ``profiling -> processing`` when it ends;
* a run where every request failed exits 1 with no summary ("All N inference request(s)
  failed"); its log and the per-request errors in the .jsonl remain."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from .profiles import RunParams
from .schema import Stats, Step

EXPORT_JSON = "profile_export_aiperf.json"
RECORDS_JSONL = "profile_export.jsonl"
LOG_FILE = Path("logs") / "aiperf.log"
# Environment a run inherits; nothing else of the worker's (no database URL, no secrets).
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "VIRTUAL_ENV", "HF_HOME")
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}$")
# The export's metric tags we store, by our name.
STAT_TAGS = {
    "ttft": "time_to_first_token",
    "itl": "inter_token_latency",
    "request_latency": "request_latency",
    "tokens_per_user": "output_token_throughput_per_user",
    "input_tokens": "input_sequence_length",
    "output_tokens": "output_sequence_length",
}


class BadTarget(ValueError):
    """Not a frontend URL we are willing to load."""


class ExportMissing(Exception):
    """aiperf finished without a summary (it failed, or was stopped)."""


@dataclass(frozen=True)
class Tokenizer:
    """What aiperf tokenizes with, and whether its counts are the report's (client) or the
    server's usage counts are (server)."""

    path: str
    source: str  # "client" or "server"
    note: str = ""


def frontend_url(endpoint: str) -> str:
    """The base URL aiperf is given: a graph's own frontend, as the runtime wrote it on the
    Deployment. Only plain http(s): no credentials, query or fragment (aiperf appends
    /v1/chat/completions itself)."""
    try:
        parts = urlsplit((endpoint or "").strip())
        port = parts.port
    except ValueError as exc:
        raise BadTarget(f"the graph's endpoint {endpoint!r} is not a URL") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadTarget(f"the graph's endpoint {endpoint!r} is not an http(s) URL")
    if parts.username or parts.password or parts.query or parts.fragment or parts.path.strip("/"):
        raise BadTarget(f"the graph's endpoint {endpoint!r} carries a path, credentials, a query or a fragment")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}" if port else f"{parts.scheme}://{host}"


def check_model_name(name: str) -> str:
    if not MODEL_NAME_RE.match(name or ""):
        raise BadTarget(f"the served model name {name!r} cannot be passed to aiperf")
    return name


def executable() -> list[str]:
    return [settings.BENCHMARK_AIPERF] if settings.BENCHMARK_AIPERF else [sys.executable, "-m", "aiperf"]


def build_argv(*, params: RunParams, url: str, model: str, tokenizer: Tokenizer, artifact_dir: Path,
               concurrency: int | None, request_rate: float | None, slo: dict[str, float],
               request_timeout: float) -> list[str]:
    """argv of one ``aiperf profile`` invocation (one load point). Every value comes from a
    validated RunParams or from the graph's own Deployment; never a shell string."""
    argv = [*executable(), "profile",
            "--model", check_model_name(model), "--url", frontend_url(url), "--endpoint-type", "chat",
            "--tokenizer", tokenizer.path,
            "--isl", str(params.input_tokens_mean), "--isl-stddev", f"{params.input_tokens_stddev:g}",
            "--osl", str(params.output_tokens_mean), "--osl-stddev", f"{params.output_tokens_stddev:g}",
            "--random-seed", str(params.seed),
            "--request-timeout-seconds", f"{max(1.0, request_timeout):g}",
            "--artifact-dir", str(artifact_dir),
            "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry",
            "--workers-max", str(max(1, min(settings.BENCHMARK_AIPERF_WORKERS, concurrency or 8))),
            "--record-processors", "1"]
    if params.streaming:
        argv.append("--streaming")
    if params.ignore_eos:
        argv += ["--extra-inputs", "ignore_eos:true"]
    if tokenizer.source == "server":
        argv.append("--use-server-token-count")
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    if request_rate is not None:
        argv += ["--request-rate", f"{request_rate:g}"]
    if params.request_count is not None:
        argv += ["--request-count", str(params.request_count)]
    else:
        # Answers still streaming when the duration ends count if they finish within the grace.
        argv += ["--benchmark-duration", f"{params.duration_s:g}", "--benchmark-grace-period", "10"]
    if params.warmup_requests:
        argv += ["--warmup-request-count", str(params.warmup_requests)]
    goals = [f"{tag}:{slo[key]:g}" for key, tag in (("ttft_ms", "time_to_first_token"),
                                                     ("itl_ms", "inter_token_latency")) if slo.get(key)]
    if goals and params.streaming:
        argv += ["--goodput", " ".join(goals)]
    return argv


def build_env(scratch: Path, tokenizer: Tokenizer, base: dict[str, str] | None = None) -> dict[str, str]:
    """A run's environment: aiperf's memory-mapped dataset and temp files in the run's own
    scratch folder (removed after the run; aiperf leaves /tmp/aiperf_mmap_* behind otherwise),
    no dataset cache to grow, nothing of the worker's environment but a few basics."""
    source = os.environ if base is None else base
    env = {k: source[k] for k in INHERITED_ENV if k in source}
    env.update({
        "TMPDIR": str(scratch), "AIPERF_DATASET_MMAP_BASE_PATH": str(scratch),
        "AIPERF_DATASET_MMAP_CACHE_ENABLED": "false",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "COLUMNS": "160", "TERM": "dumb",
    })
    if not Path(tokenizer.path).is_absolute():
        # A hub id found in this host's cache: never fetch. (Not for a tokenizer directory: with
        # HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set, aiperf 0.13.0 on transformers 5 takes the
        # directory for a repo id and fails to load it.)
        env["HF_HUB_OFFLINE"] = "1"
    return env


# --- progress ------------------------------------------------------------------------------------

class Progress:
    """Follows one invocation's artifacts: which phase it is in and how many requests
    finished. Reads only what was appended since the last call."""

    def __init__(self, artifact_dir: Path):
        self.dir = artifact_dir
        self.records = 0
        self.phase = "starting"  # starting -> profiling -> processing
        self._offsets = {RECORDS_JSONL: 0, str(LOG_FILE): 0}
        self.profiling_since: float | None = None

    def _new_text(self, name: str) -> str:
        path = self.dir / name
        try:
            with open(path, "rb") as handle:
                handle.seek(self._offsets[name])
                chunk = handle.read()
        except OSError:
            return ""
        # Count only complete lines: the writer may be mid-line.
        end = chunk.rfind(b"\n") + 1
        self._offsets[name] += end
        return chunk[:end].decode(errors="replace")

    def update(self, now: float) -> None:
        log = self._new_text(str(LOG_FILE))
        if "AIPerf System is PROFILING" in log and self.phase == "starting":
            self.phase, self.profiling_since = "profiling", now
        if "profiling -> processing" in log:
            self.phase = "processing"
        self.records += self._new_text(RECORDS_JSONL).count("\n")

    def fraction(self, params: RunParams, now: float) -> float:
        """How far this invocation is, 0..1: requests done over requests asked, or time
        spent over the duration asked; starting counts as nothing, processing as almost done."""
        if self.phase == "processing":
            return 0.98
        if self.phase == "starting":
            return 0.0
        if params.request_count:
            done = self.records / (params.request_count + params.warmup_requests)
        else:
            done = (now - (self.profiling_since or now)) / float(params.duration_s or 1)
        return max(0.0, min(0.97, done))


# --- results -------------------------------------------------------------------------------------

def read_export(artifact_dir: Path) -> dict:
    path = artifact_dir / EXPORT_JSON
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportMissing(f"aiperf wrote no {EXPORT_JSON}") from None
    except (OSError, ValueError) as exc:
        raise ExportMissing(f"{EXPORT_JSON} cannot be read: {exc}") from None


def _avg(export: dict, tag: str) -> float | None:
    value = export.get(tag)
    return value.get("avg") if isinstance(value, dict) else None


def parse_step(export: dict, *, index: int, artifact: str, concurrency: int | None, request_rate: float | None,
               gpus: int) -> Step:
    """One Step from aiperf's summary export. Percentiles are copied as exported, unrounded."""
    stats = {ours: Stats.model_validate(export[tag]) for ours, tag in STAT_TAGS.items()
             if isinstance(export.get(tag), dict)}
    output = _avg(export, "output_token_throughput")
    completed = _avg(export, "completed_request_count")
    if completed is None:
        completed = _avg(export, "request_count")
    errors = _avg(export, "error_request_count") or 0
    return Step(index=index, concurrency=concurrency, request_rate=request_rate, artifact=artifact, **stats,
                request_throughput=_avg(export, "request_throughput"), output_token_throughput=output,
                tokens_per_gpu=(output / gpus) if output is not None and gpus else None,
                completed=int(completed or 0), errors=int(errors), duration_s=_avg(export, "benchmark_duration"),
                goodput=_avg(export, "goodput"), good_fraction=_avg(export, "good_request_fraction"))


def export_errors(export: dict) -> list[str]:
    """aiperf's own summary of failed requests, one line each."""
    out = []
    for item in export.get("error_summary") or []:
        if isinstance(item, dict):
            detail = item.get("error_details") or {}
            out.append(f"{item.get('count', '?')} x {detail.get('type') or ''} {detail.get('message') or ''}".strip())
    return out
