"""Liveness of a local graph's processes, as the Dynamo operator gives its pods: a process that
stops answering ``GET /live`` is killed and started again (the supervisor's back-off), as the
kubelet restarts a container whose liveness probe fails. Without it a worker paused for three
minutes (SIGSTOP, a hung engine) lost its discovery record, came back unregistered and left the
graph broken for good, reported as "no worker has registered".

The operator's probes (deploy/operator/internal/dynamo at 2a6da14c): a worker's
``/live`` on its system port every 5 s, timeout 4 s, one failure restarts it
(component_worker.go:43-52), after its startup probe on ``/live`` passed (:67-76); a frontend's
``/live`` every 10 s, timeout 1 s, three failures (component_frontend.go:43-53). Locally a
worker's probe waits 2 s, not 4, since the operator's loop waits on it, and a worker restarts
after three failures in a row, not one: every process of every graph shares this host's cores, and a
worker busy on them may answer a probe late without being hung. For the same reason a probe
that fails counts only when the process used no CPU since the probe before (paused, or blocked):
a vLLM-on-CPU worker computing a long prefill on its one core answered /live late three times
in a row and was killed while it served. So a hung worker is restarted within about 15 s, a
hung frontend within about 30 s. Django-free."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    path: str
    period: float  # seconds between probes
    timeout: float  # seconds a probe waits for an answer
    failures: int  # failures in a row that restart the process


PROBES = {"worker": Probe("/live", 5.0, 2.0, 3), "frontend": Probe("/live", 10.0, 1.0, 3)}


@dataclass
class Liveness:
    """One process's probe state; a new one with every start."""

    answered: bool = False  # the startup probe passed: /live answered once
    failures: int = 0
    next_at: float = 0.0
    cpu: int | None = None  # the process's CPU time (clock ticks) at the last probe

    def due(self, probe: Probe, now: float) -> bool:
        return now >= self.next_at

    def record(self, probe: Probe, now: float, alive: bool, cpu: int | None = None) -> str:
        """Record one probe's outcome (``cpu``: the process's CPU ticks now, when read); the
        reason to restart the process, or ""."""
        self.next_at = now + probe.period
        busy = cpu is not None and self.cpu is not None and cpu > self.cpu
        self.cpu = cpu
        if alive:
            self.answered, self.failures = True, 0
            return ""
        if not self.answered or busy:  # still starting (the startup probe waits 2 h), or working
            return ""
        self.failures += 1
        if self.failures < probe.failures:
            return ""
        self.failures = 0
        return (f"Liveness probe failed: GET {probe.path} did not answer 200 within {probe.timeout:g} s, "
                f"{probe.failures} times {probe.period:g} s apart; killing it to restart it")


def alive(get: Callable[..., tuple[int, bytes] | None], port: int, probe: Probe) -> bool:
    result = get(port, probe.path, timeout=probe.timeout)
    return bool(result and result[0] == 200)


def cpu_ticks(pid: int) -> int | None:
    """User plus system CPU time of process ``pid`` (all its threads), in clock ticks; None when
    it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of proc(5)
    except (OSError, IndexError, ValueError):
        return None
