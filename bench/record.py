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


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def provenance() -> dict:
    """The commit measured and whether the tree was clean. Results are written under
    bench/results/ while a benchmark runs, so those files do not make a tree dirty; any other
    change does, and is listed: a figure from a dirty tree cannot be re-made from a commit."""
    try:
        commit = _git("rev-parse", "HEAD").strip()
        changed = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=normal").splitlines()
                   if not line[3:].startswith("bench/results/")]
    except (OSError, subprocess.CalledProcessError):
        # A copy of the tree without its .git (a remote machine): the caller, who copied it from
        # a checkout, names that checkout's commit and whether it was clean, and the file says so.
        if os.environ.get("BENCH_COMMIT"):
            return {"commit": os.environ["BENCH_COMMIT"], "clean_tree": os.environ.get("BENCH_CLEAN_TREE") == "1",
                    "commit_source": "BENCH_COMMIT, BENCH_CLEAN_TREE: given by the checkout this copy came from"}
        return {"commit": "", "clean_tree": False, "changed_files": ["(not a git checkout)"]}
    out = {"commit": commit, "clean_tree": not changed}
    if changed:
        out["changed_files"] = changed
    return out


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "platform": platform.platform(), "load_average_at_start": [round(x, 2) for x in load] if load else None}


def write(name: str, data: dict, *, argv: list[str] | None = None) -> Path:
    """Write bench/results/<name>.json: ``data`` plus command, date, commit (and whether the tree
    was clean), machine and versions."""
    command = " ".join(["python", *(argv if argv is not None else sys.argv)])
    record = {"benchmark": name, "command": command, "date": datetime.now(UTC).isoformat(timespec="seconds"),
              **provenance(), "machine": machine(), "versions": _versions(), **data}
    if not record["clean_tree"]:
        print(f"warning: {name}: measured on a tree with uncommitted changes ({', '.join(record['changed_files'])}); "
              "commit them and measure again before quoting it", file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
