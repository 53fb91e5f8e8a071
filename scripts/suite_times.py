"""The test suite's size, time and slowest tests, read from CI's own output (the log of
`bash .ci/run`, which runs `make test`: pytest with --durations=30), written as JSON for the
README to quote.

    python scripts/suite_times.py ci.log --commit 1234abc --output bench/results/suite.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import record

SUMMARY = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s")
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)")


def read(log: str) -> dict:
    """The counts (passed, skipped, failed, ...), the seconds and the slowest test phases."""
    counts, seconds, slowest = {}, None, []
    for line in log.splitlines():
        line = line.strip()
        match = DURATION.match(line)
        if match:
            slowest.append({"test": match["test"], "phase": match["phase"], "seconds": float(match["seconds"])})
            continue
        match = SUMMARY.match(line)
        if match:
            seconds = float(match["seconds"])
            counts = {word: int(n) for n, word in (part.split(" ", 1) for part in match["counts"].split(", "))}
    if seconds is None:
        raise ValueError("no pytest summary line (N passed ... in S s) in the log")
    return {"counts": counts, "seconds": seconds, "slowest": slowest}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the output of `bash .ci/run`")
    parser.add_argument("--commit", required=True, help="the commit CI ran")
    parser.add_argument("--output", type=Path, default=Path("bench/results/suite.json"))
    args = parser.parse_args(argv)
    try:
        found = read(args.log.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        print(f"suite_times: {exc}", file=sys.stderr)
        return 2
    # As bench/record.py writes a result: what ran, when (the log's last write: the run's end),
    # which commit (a fresh clone: a clean tree) and on which machine.
    ended = datetime.fromtimestamp(args.log.stat().st_mtime, UTC).isoformat(timespec="seconds")
    found = {"benchmark": "suite", "command": "bash .ci/run (make test) on a fresh clone", "date": ended,
             "commit": args.commit, "clean_tree": True,
             "machine": {k: v for k, v in record.machine().items() if k != "load_average_at_start"}, **found}
    args.output.write_text(json.dumps(found, indent=2) + "\n")
    tests = sum(n for word, n in found["counts"].items() if not word.startswith("warning"))
    print(f"{tests} tests in {found['seconds']:.0f} s; written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
