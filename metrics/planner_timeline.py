"""The Planner timeline of one graph: load, replicas per pool (desired and ready), each Planner
decision with its reason, TTFT and ITL against the targets, the Planner's own estimates where it
reports them, and a health line. Serves the chart on the graph page and
``GET /api/graphs/<name>/planner/``.

Decisions and replica history come from the database (graphs.models.PlannerDecision and
ReplicaSample, written by either runtime's observer); load and latency from Prometheus. A
Prometheus failure leaves the database half intact: the answer says why in ``state``/``message``."""

from __future__ import annotations

import datetime as dt
import time

from core.planner_config import PlannerSettingsError, planner_settings
from graphs.models import DecisionState, Deployment, Graph, PlannerDecision, ReplicaSample

from . import promql
from .charts import objectives_dict, parse_window, resolution, source_for, window_label
from .models import Objectives
from .prometheus import PrometheusError, PrometheusUnreachable, query_range

SERIES = ("request_rate", "input_tokens", "ttft_p50", "ttft_p90", "itl_p50", "itl_p90",
          *promql.PLANNER_ESTIMATES)
LATENCY = {"ttft_p50", "ttft_p90", "itl_p50", "itl_p90"}
MAX_DECISIONS = 500
# A decision the executor has not acknowledged after this long is worth a warning.
ACK_GRACE = dt.timedelta(seconds=120)
# Load "changes" when the last third of the quiet period differs from its first third by this much.
LOAD_CHANGE = 0.5
MIN_RATE = 0.05  # requests/s below which load is noise


def planner_of(graph: Graph, deployment: Deployment | None):
    """(the planner component, its settings or None) of the running revision, else the head."""
    revision = deployment.revision if deployment and deployment.active and deployment.revision else graph.head
    if revision is None:
        return None, None
    service = next((s for s in revision.graph_spec.services if s.role == "planner"), None)
    if service is None:
        return None, None
    try:
        return service, planner_settings(service.command, service.args)
    except PlannerSettingsError:
        return service, None


def targets_for(graph: Graph, settings) -> dict:
    """TTFT/ITL targets: the Planner's own when it scales for them (target sla), else the graph's
    objectives (metrics.Objectives), else none."""
    if settings is not None and settings.uses_latency_targets:
        return {"ttft_ms": settings.ttft_ms, "itl_ms": settings.itl_ms, "from": "planner",
                "optimization_target": settings.optimization_target}
    objectives = objectives_dict(Objectives.objects.filter(graph=graph).first())
    return {"ttft_ms": objectives["ttft_ms"], "itl_ms": objectives["itl_ms"],
            "from": "objectives" if objectives["ttft_ms"] or objectives["itl_ms"] else None,
            "optimization_target": settings.optimization_target if settings else None}


def decision_dict(d: PlannerDecision) -> dict:
    return {"at": d.at.timestamp(), "source": d.source, "decision_id": d.decision_id, "desired": d.desired,
            "before": d.before, "reason": d.reason, "actor": d.actor, "state": d.state,
            "operations": d.operations, "message": d.message,
            "acknowledged_at": d.acknowledged_at.timestamp() if d.acknowledged_at else None}


def replica_steps(graph: Graph, start: int, end: int) -> dict[str, dict[str, list]]:
    """Per pool, desired and ready as step points [t, value], starting with the value at ``start``."""
    begin = dt.datetime.fromtimestamp(start, tz=dt.UTC)
    out: dict[str, dict[str, list]] = {}
    services = ReplicaSample.objects.filter(graph=graph).values_list("service", flat=True).distinct()
    for service in sorted(set(services)):
        first = ReplicaSample.objects.filter(graph=graph, service=service, at__lt=begin).order_by("-at").first()
        rows = list(ReplicaSample.objects.filter(graph=graph, service=service, at__gte=begin,
                                                 at__lte=dt.datetime.fromtimestamp(end, tz=dt.UTC)).order_by("at"))
        points = ([(start, first)] if first else []) + [(r.at.timestamp(), r) for r in rows]
        out[service] = {"desired": [[t, r.desired] for t, r in points], "ready": [[t, r.ready] for t, r in points]}
    return out


def timeline_data(graph: Graph, window_text: str | None = None, *, now: float | None = None) -> dict:
    window = parse_window(window_text)
    deployment = Deployment.objects.filter(graph=graph).select_related("revision").first()
    source = source_for(graph, deployment)
    now_ts = time.time() if now is None else now
    res = resolution(window, source.scope.scrape_interval, now_ts)
    service, settings = planner_of(graph, deployment)
    # The database half runs to now; Prometheus's ends on the last scrape boundary.
    begin, finish = (dt.datetime.fromtimestamp(t, tz=dt.UTC) for t in (res.start, now_ts))
    decisions = list(PlannerDecision.objects.filter(graph=graph, at__gte=begin, at__lte=finish)
                     .order_by("-at", "-id")[:MAX_DECISIONS])[::-1]
    out = {
        "graph": graph.name, "runtime": source.runtime, "prometheus": source.url, "state": "ok", "message": "",
        "window": window_label(window), "window_seconds": window, "start": res.start, "end": res.end,
        "step": res.step, "timestamps": res.timestamps, "now": now_ts,
        "planner": {"component": service.name if service else None,
                    "settings": settings.model_dump() if settings else None},
        "targets": targets_for(graph, settings),
        "series": {name: [None] * len(res.timestamps) for name in SERIES},
        "replicas": replica_steps(graph, res.start, int(now_ts) + 1),
        "decisions": [decision_dict(d) for d in decisions],
    }
    try:
        rows = query_range(promql.planner_timeline_series(source.scope, res.rate_window), url=source.url,
                           start=res.start, end=res.end, step=res.step)
    except PrometheusError as exc:
        out["state"] = "unreachable" if isinstance(exc, PrometheusUnreachable) else "error"
        out["message"] = exc.message
        rows = []
    index = {t: i for i, t in enumerate(res.timestamps)}
    for row in rows:
        name = row.labels.get("series")
        if name in out["series"]:
            scale = 1000 if name in LATENCY else 1
            for ts, value in row.points:
                if ts in index and value is not None:
                    out["series"][name][index[ts]] = value * scale
    out["estimates_reported"] = any(v is not None for name in promql.PLANNER_ESTIMATES
                                    for v in out["series"][name])
    out["health"] = health(graph, service, settings, out["series"]["request_rate"], res.timestamps,
                           now=dt.datetime.fromtimestamp(now_ts, tz=dt.UTC),
                           runtime_planner=(deployment.runtime_info or {}).get("planner") if deployment else None)
    return out


def _ago(delta: dt.timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def health(graph: Graph, service, settings, rates: list, timestamps: list[int], *, now: dt.datetime,
           runtime_planner: dict | None = None) -> dict:
    """One line: when the Planner last decided, and a warning when it cannot run where the graph
    runs (``runtime_planner``: the local runtime's report), a decision was not acknowledged,
    failed, or decisions stopped arriving while the load changed."""
    last = PlannerDecision.objects.filter(graph=graph).order_by("-at", "-id").first()
    if service is None and last is None:
        return {"level": "none", "message": "This graph has no Planner component.", "last_decision_at": None,
                "warnings": []}
    warnings = []
    if runtime_planner is not None and not runtime_planner.get("runs", True):
        warnings.append("Dynamo's Planner does not run on this host, so no decision of its own will come: "
                        + "; ".join(runtime_planner.get("missing") or ["see the runtime card"]))
    stuck = (PlannerDecision.objects.filter(graph=graph, state__in=[DecisionState.RECEIVED, DecisionState.EXECUTING],
                                            at__lt=now - ACK_GRACE).order_by("at").first())
    if stuck is not None:
        warnings.append(f"decision {stuck.decision_id if stuck.decision_id is not None else stuck.pk} "
                        f"({stuck.reason or 'no reason given'}) is not acknowledged {_ago(now - stuck.at)} "
                        f"after it arrived: {stuck.message or 'no scale operation has started'}")
    if last is not None and last.state == DecisionState.FAILED:
        warnings.append(f"the last decision failed: {last.message}")
    interval = settings.adjustment_interval_seconds if settings else 60
    quiet_since = last.at.timestamp() if last else (timestamps[0] if timestamps else now.timestamp())
    if now.timestamp() - quiet_since > max(3 * interval, 60):
        recent = [v for t, v in zip(timestamps, rates, strict=False) if t >= quiet_since and v is not None]
        third = len(recent) // 3
        if third:
            before, after = sum(recent[:third]) / third, sum(recent[-third:]) / third
            if max(before, after) > MIN_RATE and abs(after - before) > LOAD_CHANGE * max(before, after):
                warnings.append(f"no decision since {_ago(now - dt.datetime.fromtimestamp(quiet_since, tz=dt.UTC))} "
                                f"while the load went from {before:.2f} to {after:.2f} requests/s "
                                f"(the Planner adjusts every {interval} s): is it running?")
    if last is None:
        message = "The Planner has made no decision yet."
    else:
        which = f"decision {last.decision_id}" if last.decision_id is not None else "a decision"
        message = (f"Last decision {_ago(now - last.at)}: {which} ({last.reason}), "
                   f"{last.get_state_display().lower()}.")
    return {"level": "warning" if warnings else "ok", "message": message, "warnings": warnings,
            "last_decision_at": last.at.timestamp() if last else None}
