"""Where every benchmark writes what it measured: bench/results/<name>.json, with the command
that made it, the date, the machine and the versions of what was measured, so that a figure in
README.md can always be traced to a committed file and re-made."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PACKAGES = ("django", "uvicorn", "psycopg", "ai-dynamo", "aiohttp", "httpx", "prometheus-client")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "platform": platform.platform(), "load_average_at_start": [round(x, 2) for x in load] if load else None}


def write(name: str, data: dict, *, argv: list[str] | None = None) -> Path:
    """Write bench/results/<name>.json: ``data`` plus command, date, commit, machine and versions."""
    record = {"benchmark": name, "command": " ".join(["python", *(argv if argv is not None else sys.argv)]),
              "date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": _commit(),
              "machine": machine(), "versions": _versions(), **data}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
