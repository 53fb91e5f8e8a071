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


def objectives_follow(*, source, graph, user=None, via: str = "study") -> None:
    """``graph`` (an A/B variant of ``source``) starts with ``source``'s objectives: its goodput is
    read against the same SLO as the source arm's, and its cost at the same GPU-hour price."""
    from metrics.models import Objectives
    from metrics.services import objectives_set

    objectives = Objectives.objects.filter(graph=source).first()
    if objectives is not None:
        objectives_set(graph=graph, ttft_ms=objectives.ttft_ms, itl_ms=objectives.itl_ms,
                       gpu_hour_price=objectives.gpu_hour_price, user=user, via=via)
