"""A graph's latency targets (SLOs), as benchmarks read them: the one place that knows they
live in the metrics app (metrics.models.Objectives, set on the graph's metrics page)."""

from __future__ import annotations


def slo_targets(graph) -> dict[str, float]:
    """{"ttft_ms": ..., "itl_ms": ...} with only the targets that are set."""
    from metrics.models import Objectives

    objectives = Objectives.objects.filter(graph=graph).first()
    if objectives is None:
        return {}
    return {key: float(value) for key, value in (("ttft_ms", objectives.ttft_ms), ("itl_ms", objectives.itl_ms))
            if value is not None}
