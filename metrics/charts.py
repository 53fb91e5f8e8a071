"""What the pages and the API show: a graph's chart data for a time window, and one row per
graph for the overview. Reads Prometheus through promql.py and prometheus.py, and the
graph's apply and scale operations (the change markers) from the database.

Nothing here raises for Prometheus trouble: every answer carries a ``state`` (ok, no_data,
unreachable, error) and a ``message`` fit to show as it is."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from graphs.engines import Host, deployment_simulation
from graphs.models import Deployment, Graph, Operation, OperationKind, specs_validated
from graphs.runtimes.registry import DEFAULT_KIND, RUNTIMES, on_cluster

from . import promql, series
from .models import Objectives, global_gpu_hour_price
from .prometheus import PrometheusError, PrometheusUnreachable, label_values, query, query_range

WINDOWS = ("15m", "1h", "6h", "24h", "7d")  # the picker's choices; any duration in 15m..7d is accepted
DEFAULT_WINDOW = "1h"
CURRENT_WINDOW = 300  # "now" on the overview means the last five minutes
QUANTILE_NAMES = ("p50", "p90", "p99")
LATENCY_SERIES = tuple(f"{m}_{q}" for m in ("ttft", "itl") for q in QUANTILE_NAMES)
SERIES = (*LATENCY_SERIES, "request_rate", "output_tokens", "in_flight", "goodput")
MAX_MARKERS = 200
_UNITS = {"m": 60, "h": 3600, "d": 86400}


class WindowError(ValueError):
    pass


def parse_window(text: str | None) -> int:
    """'15m', '1h', '36h', '7d' -> seconds, between 15 minutes and 7 days."""
    # Up to 9 digits (leading zeros allowed, as the API's pattern allows them): the range check
    # below says what is too long; 10080m is 7d.
    found = re.fullmatch(r"\s*(\d{1,9})\s*([mhd])\s*", text or DEFAULT_WINDOW)
    if not found:
        raise WindowError(f"window {text!r} is not a duration like 15m, 6h or 7d")
    seconds = int(found.group(1)) * _UNITS[found.group(2)]
    if not promql.MIN_WINDOW <= seconds <= promql.MAX_WINDOW:
        raise WindowError("the window must be between 15m and 7d")
    return seconds


def window_label(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True)
class Source:
    """Where a graph's series live and how to select them."""

    url: str
    scope: promql.Scope
    runtime: str
    key: tuple[str, ...]  # the graph's values of the labels that tell graphs apart in a batch


def kubernetes_names(graph: Graph, deployment: Deployment | None) -> tuple[str, str]:
    """(k8s namespace, DGD name): the DGD is named after the graph."""
    namespace = deployment.namespace if deployment and deployment.namespace else ""
    if not namespace and graph.head_id:
        namespace = graph.head.graph_spec.namespace or ""
    return namespace or "default", graph.name


def source_for(graph: Graph, deployment: Deployment | None) -> Source:
    if on_cluster(deployment):
        namespace, dgd = kubernetes_names(graph, deployment)
        scope = promql.kubernetes_scope(namespace, dgd, scrape_interval=settings.PROMETHEUS_KUBERNETES_SCRAPE_INTERVAL,
                                        recorded=settings.PROMETHEUS_KUBERNETES_RECORDING_RULES)
        return Source(settings.PROMETHEUS_KUBERNETES_URL or settings.PROMETHEUS_URL, scope, deployment.runtime,
                      (namespace, promql.dynamo_namespace(namespace, dgd)))
    scope = promql.local_scope(graph.name, scrape_interval=settings.PROMETHEUS_SCRAPE_INTERVAL)
    return Source(settings.PROMETHEUS_URL, scope, deployment.runtime if deployment else DEFAULT_KIND, (graph.name,))


def batch_scope(runtime: str, sources: list[Source]) -> promql.Scope:
    """One scope for several graphs read from the same server."""
    first = sources[0].scope
    if RUNTIMES[runtime].on_cluster:
        pairs = [(ns, dns.removeprefix(f"{ns}-")) for ns, dns in (s.key for s in sources)]
        return promql.kubernetes_graphs_scope(pairs, scrape_interval=first.scrape_interval, recorded=first.recorded)
    return promql.local_graphs_scope((s.key[0] for s in sources), scrape_interval=first.scrape_interval)


@dataclass(frozen=True)
class Resolution:
    window: int
    step: int
    rate_window: int
    start: int
    end: int

    @property
    def timestamps(self) -> list[int]:
        return list(range(self.start, self.end + 1, self.step))


def resolution(window: int, scrape_interval: int, now: float) -> Resolution:
    """Step and rate window for a chart ending now. The range ends on a scrape boundary, so
    that every viewer within one scrape interval asks the same question (and shares one cached
    answer), and the newest point is never more than one scrape old."""
    step = promql.step_seconds(window, scrape_interval)
    end = int(now // scrape_interval * scrape_interval)
    start = end - (window // step) * step
    return Resolution(window, step, promql.rate_window_seconds(step, scrape_interval), start, end)


# ------------------------------------------------------------------ pools and money


def pool_gpus(deployment: Deployment | None) -> dict[str, int]:
    """GPUs per role (prefill, decode, worker) as the running revision asks for them: what the
    pools hold on a cluster. Local mocker workers use none, so for local graphs this is the
    bill the same graph would run up on GPUs."""
    if deployment is None or not deployment.active or deployment.revision is None:
        return {}
    spec = deployment.revision.graph_spec
    replicas = deployment.desired_replicas(spec)
    out: dict[str, int] = {}
    for service in spec.services:
        if service.role in ("prefill", "decode", "worker"):
            out[service.role] = out.get(service.role, 0) + (service.gpus or 0) * replicas.get(service.name, 0)
    return out


def cost_per_million_tokens(gpus: int, price: Decimal | float | None, tokens_per_second: float | None) -> float | None:
    """What one million tokens cost at this rate: GPUs x price per GPU-hour / tokens per hour.
    Idle time counts, as on the bill: the rate is averaged over the whole window."""
    if not gpus or price is None or not tokens_per_second:
        return None
    return float(gpus) * float(price) / (tokens_per_second * 3600) * 1_000_000


def costs(gpus: dict[str, int], price: Decimal | None, input_tps: float | None, output_tps: float | None) -> dict:
    out = {"gpu_hour_price": float(price) if price is not None else None, "currency": settings.GPU_PRICE_CURRENCY,
           "gpus": gpus, "per_million_input": None, "per_million_output": None, "per_million_tokens": None}
    if "prefill" in gpus or "decode" in gpus:
        # Disaggregated: the prefill pool turns prompts into KV cache, the decode pool makes output.
        out["per_million_input"] = cost_per_million_tokens(gpus.get("prefill", 0), price, input_tps)
        out["per_million_output"] = cost_per_million_tokens(gpus.get("decode", 0), price, output_tps)
    elif "worker" in gpus:
        # Aggregated workers do both: only the cost of all tokens together means something.
        total = (input_tps or 0) + (output_tps or 0)
        out["per_million_tokens"] = cost_per_million_tokens(gpus["worker"], price, total)
    if price is not None and all(out[k] is None for k in ("per_million_input", "per_million_output",
                                                          "per_million_tokens")):
        # Said instead of "— / —": why there is no figure.
        out["reason"] = ("no GPUs: the running revision's workers ask for none" if not any(gpus.values())
                         else "no tokens in this window")
    return out


def goodput_bounds(shares: list[float]) -> dict | None:
    """The estimate (independence) and the bounds that hold whatever the correlation between
    TTFT and ITL: at best the smaller share, at worst the overlap the two shares force."""
    if not shares:
        return None
    estimate = 1.0
    for share in shares:
        estimate *= share
    return {"estimate": estimate, "upper": min(shares), "lower": max(0.0, sum(shares) - (len(shares) - 1))}


def _objectives(graph: Graph) -> Objectives | None:
    return Objectives.objects.filter(graph=graph).first()


def objectives_dict(objectives: Objectives | None) -> dict:
    price = objectives.price if objectives else global_gpu_hour_price()
    return {"ttft_ms": objectives.ttft_ms if objectives else None, "itl_ms": objectives.itl_ms if objectives else None,
            "gpu_hour_price": float(price) if price is not None else None,
            "price_is_default": not (objectives and objectives.gpu_hour_price is not None),
            "currency": settings.GPU_PRICE_CURRENCY}


# ------------------------------------------------------------------ markers


def _marker_label(op: Operation) -> str:
    if op.kind == OperationKind.SCALE:
        text = f"scale {op.params.get('service', '?')} {op.before.get('replicas', '?')}→{op.after.get('replicas', '?')}"
    else:
        before = op.before.get("revision")
        text = f"apply revision {op.after.get('revision', '?')}" + (f" (was {before})" if before else "")
    return text if op.state == "succeeded" else f"{text} ({op.state})"


def markers(graph: Graph, start: int, end: int) -> list[dict]:
    """Applies and scale changes in [start, end]: what changed, who asked, how it ended.
    Dry runs change nothing and are left out."""
    from datetime import UTC, datetime

    ops = (Operation.objects.filter(graph=graph, kind__in=[OperationKind.APPLY, OperationKind.SCALE],
                                    created_at__gte=datetime.fromtimestamp(start, tz=UTC),
                                    created_at__lte=datetime.fromtimestamp(end, tz=UTC))
           .select_related("requested_by").order_by("-created_at")[:MAX_MARKERS])
    return [{"at": op.created_at.timestamp(), "kind": op.kind, "state": op.state, "label": _marker_label(op),
             "by": op.requested_by.username if op.requested_by else op.via, "operation": op.pk}
            for op in reversed(list(ops)) if not op.params.get("dryRun")]


# ------------------------------------------------------------------ one graph


def _bounds(metric: str, source: Source) -> list[str]:
    return label_values("le", url=source.url, match=promql.bucket_series(metric, source.scope))


def _shares(source: Source, objectives: dict, *windows: int) -> list[dict[str, str]]:
    """For each window, the SLO share expressions of the targets this graph has. None before
    the graph's first scrape: the bucket bounds are read from its series."""
    out: list[dict[str, str]] = [{} for _ in windows]
    for name, metric, target in (("ttft_share", series.TTFT, objectives["ttft_ms"]),
                                 ("itl_share", series.ITL, objectives["itl_ms"])):
        bounds = _bounds(metric, source) if target else []
        for shares, window in zip(out, windows, strict=True):
            if bounds:
                shares[name] = promql.slo_share(metric, source.scope, window, target / 1000, bounds)
    return out


def _targets(source: Source, at: float) -> dict:
    samples = query(promql.scrape_targets(source.scope), url=source.url, at=at)
    down = sorted(s.labels.get("pod") or s.labels.get("instance", "?") for s in samples if s.value != 1)
    return {"total": len(samples), "up": len(samples) - len(down), "down": down}


def _no_data_message(graph: Graph, source: Source, targets: dict, window: int) -> str:
    span = window_label(window)
    if targets["total"] == 0:
        if not RUNTIMES[source.runtime].on_cluster:
            return (f"Prometheus at {source.url} has no scrape targets for {graph.name}. Local graphs are scraped by "
                    "the control plane's own Prometheus (manage.py runprometheus, started by manage.py up) once "
                    "their pods run.")
        return (f"Prometheus at {source.url} has no series for {graph.name}: does it scrape Dynamo's PodMonitors "
                "(label dynamo_namespace)?")
    if targets["up"] == 0:
        return f"All {targets['total']} scrape targets of {graph.name} are down."
    return f"No requests reached {graph.name} in the last {span}."


def chart_data(graph: Graph, window_text: str | None = None, *, now: float | None = None) -> dict:
    """Everything one graph's panel draws for a window ending now."""
    window = parse_window(window_text)
    deployment = Deployment.objects.filter(graph=graph).select_related("revision").first()
    source = source_for(graph, deployment)
    res = resolution(window, source.scope.scrape_interval, time.time() if now is None else now)
    objectives = objectives_dict(_objectives(graph))
    out = {
        "graph": graph.name, "runtime": source.runtime, "prometheus": source.url, "state": "ok", "message": "",
        "window": window_label(window), "window_seconds": window, "start": res.start, "end": res.end,
        "step": res.step, "rate_window": res.rate_window, "objectives": objectives,
        "timestamps": res.timestamps, "series": {name: [] for name in SERIES}, "summary": None,
        "markers": markers(graph, res.start, res.end),
        # Numbers of workers that are Dynamo's mocker carry its label (graphs.engines).
        "simulation": _simulation(deployment),
    }
    try:
        shares, window_shares = _shares(source, objectives, res.rate_window, window)
        goodput = promql.goodput(*shares.values()) if shares else None
        rows = query_range(promql.chart_series(source.scope, res.rate_window, goodput_expr=goodput),
                           url=source.url, start=res.start, end=res.end, step=res.step)
        stats = {s.labels.get("stat"): s.value for s in query(
            promql.window_summary(source.scope, window, shares=window_shares), url=source.url, at=res.end)}
        targets = _targets(source, res.end)
    except PrometheusError as exc:
        out["state"] = "unreachable" if isinstance(exc, PrometheusUnreachable) else "error"
        out["message"] = exc.message
        return out
    index = {t: i for i, t in enumerate(res.timestamps)}
    out["series"] = {name: [None] * len(index) for name in SERIES}  # one value or null per timestamp
    for row in rows:
        name = row.labels.get("series")
        if name not in out["series"]:
            continue
        values = out["series"][name]
        scale = 1000 if name in LATENCY_SERIES else 1
        for ts, value in row.points:
            if ts in index and value is not None:
                values[index[ts]] = value * scale
    out["summary"] = _summary(stats, deployment, objectives, targets)
    if not any(v is not None for values in out["series"].values() for v in values):
        out["state"] = "no_data"
        out["message"] = _no_data_message(graph, source, targets, window)
    elif not any(v is not None for name in LATENCY_SERIES for v in out["series"][name]):
        out["message"] = _no_data_message(graph, source, targets, window)
    elif targets["down"]:
        down = ", ".join(targets["down"])
        out["message"] = f"{len(targets['down'])} of {targets['total']} scrape targets down: {down}"
    return out


def _simulation(deployment: Deployment | None, host: Host | None = None) -> dict | None:
    simulation = deployment_simulation(deployment, host)
    return simulation.as_dict() if simulation else None


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _summary(stats: dict, deployment: Deployment | None, objectives: dict, targets: dict) -> dict:
    shares = [stats[k] for k in ("ttft_share", "itl_share") if stats.get(k) is not None]
    price = Decimal(str(objectives["gpu_hour_price"])) if objectives["gpu_hour_price"] is not None else None
    return {
        **{name: _ms(stats.get(name)) for name in LATENCY_SERIES},  # ms, like the series
        "request_rate": stats.get("request_rate"),
        "input_tokens": stats.get("input_tokens"),
        "output_tokens": stats.get("output_tokens"),
        "kv_hit_rate": stats.get("kv_hit_rate"),
        "cached_token_share": stats.get("cached_token_share"),
        "ttft_share": stats.get("ttft_share"),
        "itl_share": stats.get("itl_share"),
        "goodput": goodput_bounds(shares),
        "cost": costs(pool_gpus(deployment), price, stats.get("input_tokens"), stats.get("output_tokens")),
        "targets": targets,
    }


# ------------------------------------------------------------------ all graphs


SLO_LABELS = {"met": "met", "missed": "missed", "no_traffic": "no traffic", "not_set": "not set",
              "unknown": "unknown"}


def slo_state(row: dict, objectives: dict) -> str:
    """met / missed against p90, no_traffic, or not_set."""
    checks = [(row.get("ttft_p90_ms"), objectives["ttft_ms"]), (row.get("itl_p90_ms"), objectives["itl_ms"])]
    checks = [(value, target) for value, target in checks if target]
    if not checks:
        return "not_set"
    if any(value is None for value, _ in checks):
        return "no_traffic"
    return "met" if all(value <= target for value, target in checks) else "missed"


def graph_summaries(graphs: list[Graph], *, now: float | None = None) -> dict:
    """The overview: per graph, TTFT and ITL p90 and request rate over the last five minutes,
    in-flight requests, SLO state and cost. One query per Prometheus server and runtime kind,
    whatever the number of graphs. Returns {"rows": {graph id: row}, "errors": [message]}."""
    now = time.time() if now is None else now
    # The revisions' specs are validated once per process: their JSON is read only for those
    # this process has not seen (specs_validated), not for 50 revisions on every refresh.
    deployments = {d.graph_id: d for d in Deployment.objects.filter(graph__in=graphs).select_related("revision")
                   .defer("manifest", "revision__source_yaml", "revision__spec", "revision__companions")}
    specs_validated(d.revision for d in deployments.values())
    objectives = {o.graph_id: o for o in Objectives.objects.filter(graph__in=graphs)}
    host = Host.detect()  # once for the page's graphs, not once each (it reads this machine)
    groups: dict[tuple[str, str], list[tuple[Graph, Source]]] = {}
    for graph in graphs:
        source = source_for(graph, deployments.get(graph.pk))
        groups.setdefault((source.url, source.runtime), []).append((graph, source))
    stats: dict[int, dict] = {g.pk: {} for g in graphs}
    errors: dict[int, str] = {}
    messages: list[str] = []
    for (url, runtime), members in groups.items():
        keys = {source.key: graph for graph, source in members}
        scope = batch_scope(runtime, [source for _, source in members])
        # On a scrape boundary: every viewer within one scrape interval shares one cached answer.
        at = int(now // scope.scrape_interval * scope.scrape_interval)
        try:
            samples = query(promql.overview(scope, CURRENT_WINDOW), url=url, at=at)
        except PrometheusError as exc:
            messages.append(exc.message)
            for graph, _ in members:
                errors[graph.pk] = exc.message
            continue
        for sample in samples:
            graph = keys.get(tuple(sample.labels.get(label, "") for label in scope.by))
            if graph is not None:
                stats[graph.pk][sample.labels.get("stat")] = sample.value
    rows = {}
    for graph in graphs:
        s, objs = stats[graph.pk], objectives_dict(objectives.get(graph.pk))
        price = Decimal(str(objs["gpu_hour_price"])) if objs["gpu_hour_price"] is not None else None
        row = {"graph": graph.name, "ttft_p90_ms": _ms(s.get("ttft_p90")), "itl_p90_ms": _ms(s.get("itl_p90")),
               "request_rate": s.get("request_rate"), "in_flight": s.get("in_flight"),
               "kv_hit_rate": s.get("kv_hit_rate"),
               "objectives": objs, "error": errors.get(graph.pk, ""),
               "simulation": _simulation(deployments.get(graph.pk), host),
               "cost": costs(pool_gpus(deployments.get(graph.pk)), price, s.get("input_tokens"),
                             s.get("output_tokens"))}
        row["slo"] = "unknown" if row["error"] else slo_state(row, objs)
        row["slo_label"] = SLO_LABELS[row["slo"]]
        rows[graph.pk] = row
    return {"rows": rows, "errors": list(dict.fromkeys(messages)), "window": window_label(CURRENT_WINDOW)}
