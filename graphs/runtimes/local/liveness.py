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
worker busy on them may answer a probe late without being hung. So a hung worker is restarted
within about 15 s, a hung frontend within about 30 s. Django-free."""

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

    def due(self, probe: Probe, now: float) -> bool:
        return now >= self.next_at

    def record(self, probe: Probe, now: float, alive: bool) -> str:
        """Record one probe's outcome; the reason to restart the process, or ""."""
        self.next_at = now + probe.period
        if alive:
            self.answered, self.failures = True, 0
            return ""
        if not self.answered:  # still starting: the startup probe waits (2 h upstream)
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
