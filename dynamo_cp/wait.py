"""Following an operation or a benchmark run to its end, with progress on stderr: on a
terminal one line that updates in place; otherwise (CI logs) a line per change and one every
``HEARTBEAT`` seconds, so a long wait is never silent."""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Callable

from . import exits
from .exits import CliError

OPERATION_DONE = {"succeeded": exits.OK, "failed": exits.FAILED}
RUN_DONE = {"succeeded": exits.OK, "failed": exits.FAILED, "cancelled": exits.FAILED}
HEARTBEAT = 10.0
ELAPSED = re.compile(r" \(\d+s\)")  # "(12s)": a new second alone is no news
MAX_SECONDS = 7 * 24 * 3600.0


def seconds(text: str) -> float:
    """An argparse type for a timeout: a number of seconds above 0 and at most a week (a
    negative, zero, NaN or endless timeout is refused before anything is sent)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text} s: give a number of seconds above 0 and at most {MAX_SECONDS:g} "
                                         "(a week)")
    return value


class Progress:
    def __init__(self, *, quiet: bool = False, stream=None):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last = ""  # the last line written, without its elapsed time
        self.last_at = 0.0

    def update(self, text: str) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        key = ELAPSED.sub("", text)
        if self.tty:
            self.stream.write("\r\033[K" + text)
        elif key != self.last or now - self.last_at >= HEARTBEAT:
            self.stream.write(text + "\n")
        else:
            return
        self.stream.flush()
        self.last, self.last_at = key, now

    def done(self) -> None:
        if self.tty and self.last and not self.quiet:
            self.stream.write("\n")
            self.stream.flush()


def follow(fetch: Callable[[], dict], *, describe: Callable[[dict, float], str], done: dict[str, int],
           timeout: float, progress: Progress, interval: float = 1.0,
           hint: str = "follow it with `dynamo-cp operations wait ID`") -> tuple[dict, int]:
    """Poll ``fetch`` until the object's ``state`` is in ``done``; return it and its exit status.
    Raises CliError(TIMEOUT) when ``timeout`` seconds pass first."""
    start = time.monotonic()
    try:
        while True:
            obj = fetch()
            elapsed = time.monotonic() - start
            progress.update(describe(obj, elapsed))
            if obj.get("state") in done:
                return obj, done[obj["state"]]
            if elapsed >= timeout:
                raise CliError(exits.TIMEOUT, f"still {obj.get('state')} after {timeout:g}s; it goes on on the "
                                              f"server ({hint})")
            time.sleep(min(interval, max(0.05, timeout - elapsed)))
    finally:
        progress.done()


def describe_operation(op: dict, elapsed: float) -> str:
    result = f": {op['result']}" if op.get("result") and op.get("state") in OPERATION_DONE else ""
    return f"operation #{op['id']} {op.get('kind')} {op.get('graph')}: {op.get('state')} ({elapsed:.0f}s){result}"


def describe_run(run: dict, elapsed: float) -> str:
    pct = run.get("progress")
    share = f" {pct:.0f}%" if isinstance(pct, (int, float)) else ""
    text = f" {run['progress_text']}" if run.get("progress_text") else ""
    return f"benchmark #{run['id']} of {run.get('graph')}: {run.get('state')}{share}{text} ({elapsed:.0f}s)"
