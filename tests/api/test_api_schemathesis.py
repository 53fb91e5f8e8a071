"""The API as an outsider's schemathesis finds it: scripts/api_schemathesis.sh (a real uvicorn and
Celery worker, the newest schemathesis, every check, every phase, 25 examples an operation, the
configuration in schemathesis.toml) ends with no failure and no error. On PostgreSQL when the
suite is (make test), in a database of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_independent_schemathesis_run_of_every_check_and_phase_finds_nothing(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "scripts" / "api_schemathesis.sh"), str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=2400)
    summary = [line for line in done.stdout.splitlines() if line.startswith("=") or "❌" in line or "🚫" in line]
    # Every failure or error, with its reproduction, is in the output: show the end of it.
    assert done.returncode == 0, "\n".join(summary) + "\n" + done.stdout[-12000:] + done.stderr[-3000:]
