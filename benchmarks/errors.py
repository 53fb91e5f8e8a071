"""The benchmark app's own error types."""

from __future__ import annotations

from core.errors import Refused


class BenchmarkRefused(Refused):
    """A run, study or recommendation that cannot start or change: the graph is not serving,
    another run is active, the run already finished. Shown to the user as is (HTTP 409)."""


class RunFailed(Exception):
    """aiperf failed, timed out or could not start. The message is the run's error."""


class RunCancelled(Exception):
    """The run was stopped on request."""
