"""Every PromQL string the control plane sends, each built by a named function and scoped to
one graph, or, for the overview, to a known list of graphs.

Users never send PromQL: they pick a graph and a time window; label values are escaped here.
A graph's series are found by the labels its scraper attaches:

* local runtime: our own Prometheus scrapes each graph's processes through file-based service
  discovery (localprom.py) and labels them ``job="dynamo-local"``, ``graph``, ``pool``, ``pod``;
* Kubernetes: the Dynamo operator's PodMonitors relabel the pod label
  ``nvidia.com/dynamo-namespace`` (``<k8s namespace>-<DGD name>``) to ``dynamo_namespace``, and
  the scraper adds ``namespace``. Both matchers are needed: the first alone may collide with a
  runtime-injected ``dynamo_namespace`` on worker series.

Latency comes from the frontend's histograms, whose buckets are log-spaced about 2x apart, so a
quantile is an interpolation inside a bucket, never a measured value (dynamo-facts.md, section 4).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .series import (
    ACTIVE_REQUESTS,
    CACHED_TOKENS,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    INFLIGHT_REQUESTS,
    INPUT_TOKENS,
    ITL,
    OUTPUT_TOKENS,
    REQUESTS,
    ROUTER_CACHED_PREFIX,
    ROUTER_INPUT_TOKENS,
    TTFT,
    WORKER_KV_BLOCKS,
    WORKER_LAST_ITL,
    WORKER_LAST_TTFT,
)

LOCAL_JOB = "dynamo-local"
QUANTILES = (0.5, 0.9, 0.99)
# The rate window baked into deploy/prometheus/recording-rules.yaml.
RECORDED_RATE = "1m"

MIN_WINDOW = 15 * 60
MAX_WINDOW = 7 * 24 * 3600
MAX_POINTS = 300


def quote(value: str) -> str:
    """A PromQL string literal."""
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def any_of(values: Iterable[str]) -> str:
    """An RE2 alternation that matches exactly these values (PromQL anchors regexes)."""
    return "|".join(re.escape(v) for v in sorted(set(values)))


def duration(seconds: int) -> str:
    return f"{int(seconds)}s"


@dataclass(frozen=True)
class Scope:
    """The label matchers that select one graph's series (or a known list of graphs), and the
    labels that tell the graphs apart when several are read in one query."""

    matchers: tuple[tuple[str, str, str], ...]  # (label, "=" or "=~", value)
    by: tuple[str, ...] = ()  # empty for a single graph
    scrape_interval: int = 5
    recorded: bool = False  # read deploy/prometheus/recording-rules.yaml's series for quantiles
    # Count a counter born while its target was already scraped whole (_counter_rate). Local
    # graphs only: their targets carry the series' own labels (job, graph), so ``up`` matches.
    births: bool = False

    def selector(self, **extra: str) -> str:
        parts = [f"{label}{op}{quote(value)}" for label, op, value in self.matchers]
        parts += [f"{label}={quote(value)}" for label, value in extra.items()]
        return "{" + ",".join(parts) + "}"

    def grouping(self, *extra: str) -> str:
        labels = [*self.by, *extra]
        return f"sum by ({', '.join(labels)})" if labels else "sum"


def local_scope(graph: str, *, scrape_interval: int = 5) -> Scope:
    return Scope((("job", "=", LOCAL_JOB), ("graph", "=", graph)), scrape_interval=scrape_interval, births=True)


def local_graphs_scope(graphs: Iterable[str], *, scrape_interval: int = 5) -> Scope:
    return Scope((("job", "=", LOCAL_JOB), ("graph", "=~", any_of(graphs))), by=("graph",),
                 scrape_interval=scrape_interval, births=True)


def dynamo_namespace(namespace: str, dgd: str) -> str:
    return f"{namespace}-{dgd}"


def kubernetes_scope(namespace: str, dgd: str, *, scrape_interval: int = 5, recorded: bool = False) -> Scope:
    return Scope((("namespace", "=", namespace), ("dynamo_namespace", "=", dynamo_namespace(namespace, dgd))),
                 scrape_interval=scrape_interval, recorded=recorded)


def kubernetes_graphs_scope(graphs: Iterable[tuple[str, str]], *, scrape_interval: int = 5,
                            recorded: bool = False) -> Scope:
    """``graphs`` is (k8s namespace, DGD name) pairs; rows come back keyed by both labels."""
    graphs = list(graphs)
    return Scope((("namespace", "=~", any_of(ns for ns, _ in graphs)),
                  ("dynamo_namespace", "=~", any_of(dynamo_namespace(ns, dgd) for ns, dgd in graphs))),
                 by=("namespace", "dynamo_namespace"), scrape_interval=scrape_interval, recorded=recorded)


# ------------------------------------------------------------------ resolution


def step_seconds(window: int, scrape_interval: int) -> int:
    """The step that gives at most MAX_POINTS points over ``window``, a whole number of scrape
    intervals: finer steps would only repeat samples."""
    per_point = window / (MAX_POINTS - 1)  # points = window / step + 1
    return max(1, math.ceil(per_point / scrape_interval)) * scrape_interval


def rate_window_seconds(step: int, scrape_interval: int) -> int:
    """At least four scrapes, so that one missed scrape never empties a rate (Grafana's
    $__rate_interval rule), and two steps, so that consecutive points overlap and no sample
    falls between them."""
    return max(4 * scrape_interval, 2 * step)


# ------------------------------------------------------------------ building blocks


def _rate(metric: str, scope: Scope, window: int, **extra: str) -> str:
    return f"rate({metric}{scope.selector(**extra)}[{duration(window)}])"


def _recorded_name(metric: str, q: float) -> str:
    return f"dynamo_namespace:{metric}:p{round(q * 100):d}_rate{RECORDED_RATE}"


def labelled(expr: str, label: str, value: str) -> str:
    """``expr`` with one more label, so that several expressions can share one query."""
    return f'label_replace({expr}, {quote(label)}, {quote(value)}, "", "")'


def either(*exprs: str) -> str:
    """Several labelled expressions in one query (one round trip instead of several)."""
    return " or ".join(exprs)


# ------------------------------------------------------------------ latency


def latency_quantile(metric: str, q: float, scope: Scope, window: int) -> str:
    """The q-quantile of a frontend latency histogram, in seconds, over ``window`` seconds."""
    if scope.recorded:
        series = _recorded_name(metric, q) + scope.selector()
        return f"max by ({', '.join(scope.by)}) ({series})" if scope.by else series
    return f"histogram_quantile({q:g}, {scope.grouping('le')} ({_rate(metric + '_bucket', scope, window)}))"


def ttft_quantile(q: float, scope: Scope, window: int) -> str:
    return latency_quantile(TTFT, q, scope, window)


def itl_quantile(q: float, scope: Scope, window: int) -> str:
    return latency_quantile(ITL, q, scope, window)


# ------------------------------------------------------------------ load


def _counter_rate(metric: str, scope: Scope, window: int) -> str:
    """rate(), and what it cannot see: the frontend makes a counter at its first request, so the
    first scrape that finds it already holds the requests before it. A series that was absent a
    window ago while its target was scraped then was born inside the window, from zero: its whole
    value counts. Where the target itself is newer than the window, rate() alone, as before."""
    plain = _rate(metric, scope, window)
    if not scope.births:
        return plain
    series, d = f"{metric}{scope.selector()}", duration(window)
    born = (f"({series} unless {series} offset {d}) / {int(window)} "
            f"and on(instance, job) (up{scope.selector()} offset {d})")
    return f"(({plain} and {series} offset {d}) or ({born}) or {plain})"


def request_rate(scope: Scope, window: int) -> str:
    """Finished requests per second, successful or not."""
    return f"{scope.grouping()} ({_counter_rate(REQUESTS, scope, window)})"


def output_token_rate(scope: Scope, window: int) -> str:
    return f"{scope.grouping()} ({_counter_rate(OUTPUT_TOKENS, scope, window)})"


def input_token_rate(scope: Scope, window: int) -> str:
    """Prompt tokens per second, from the input-length histogram's sum."""
    return f"{scope.grouping()} ({_counter_rate(INPUT_TOKENS + '_sum', scope, window)})"


def in_flight(scope: Scope) -> str:
    """Requests being served now; falls back to the deprecated gauge on older frontends."""
    return (f"{scope.grouping()} ({ACTIVE_REQUESTS}{scope.selector()}) "
            f"or {scope.grouping()} ({INFLIGHT_REQUESTS}{scope.selector()})")


def _routed(metric: str, scope: Scope, window: int) -> str:
    # The decode hop of a disaggregated request reuses no prompt prefix: count where the
    # prompt is read (prefill, or aggregated workers).
    selector = scope.selector()[:-1] + (',' if scope.matchers else '') + 'phase!="decode"}'
    return f"{scope.grouping()} (rate({metric}{selector}[{duration(window)}]))"


def kv_hit_rate(scope: Scope, window: int) -> str:
    """The KV router's cache hit rate, 0..1: of the prompt tokens it routed, the share already
    cached on the worker it chose (Dynamo's own router metrics). No sample without KV routing
    or without traffic."""
    return (f"{_routed(ROUTER_CACHED_PREFIX, scope, window)} / "
            f"({_routed(ROUTER_INPUT_TOKENS + '_sum', scope, window)} > 0)")


def cached_token_share(scope: Scope, window: int) -> str:
    """The share of prompt tokens the engines reported as cached (the frontend's
    cached-tokens histogram over its input-length histogram), 0..1."""
    return (f"{scope.grouping()} ({_rate(CACHED_TOKENS + '_sum', scope, window)}) / "
            f"({scope.grouping()} ({_rate(INPUT_TOKENS + '_sum', scope, window)}) > 0)")


def dcgm_by_pod(metric: str, namespace: str, pods: Iterable[str], agg: str = "sum") -> str:
    """A DCGM metric per pod of ``namespace``. dcgm-exporter puts the GPU's pod in ``pod`` and
    ``namespace``, unless the scrape's own target labels win (honor_labels false): then they
    are ``exported_pod`` and ``exported_namespace``. Both forms are read, as ``pod``."""
    regex, ns = quote(any_of(pods)), quote(namespace)
    direct = f"{agg} by (pod) ({metric}{{namespace={ns},pod=~{regex}}})"
    exported = (f"{agg} by (pod) (label_replace({metric}{{exported_namespace={ns},exported_pod=~{regex}}}, "
                f'"pod", "$1", "exported_pod", "(.*)"))')
    return f"{direct} or {exported}"


def pod_gpus(namespace: str, pods: Iterable[str]) -> str:
    """Per pod: GPU memory in use (MiB, summed over its GPUs) and utilisation (%, averaged)."""
    pods = list(pods)
    return either(labelled(dcgm_by_pod(DCGM_FB_USED, namespace, pods, "sum"), "stat", "fb_used_mib"),
                  labelled(dcgm_by_pod(DCGM_GPU_UTIL, namespace, pods, "avg"), "stat", "gpu_util"))


def scrape_targets(scope: Scope) -> str:
    """One sample per scrape target: 1 when its last scrape worked, 0 when it did not."""
    return f"up{scope.selector()}"


def bucket_series(metric: str, scope: Scope) -> str:
    """The series selector whose ``le`` values are the histogram's bucket bounds."""
    return f"{metric}_bucket{scope.selector()}"


# ------------------------------------------------------------------ SLOs


def slo_share(metric: str, scope: Scope, window: int, target_seconds: float, bounds: Iterable[str]) -> str:
    """The share of observations at or under ``target_seconds``, between 0 and 1.

    Exact when the target is a bucket bound. Otherwise the count inside the bucket that holds
    the target is interpolated linearly, the assumption histogram_quantile makes, so the share
    and the charted quantiles agree. A target past the last finite bound counts only the
    observations under that bound. ``bounds`` are the histogram's ``le`` values as exported
    (exact strings: they are matched as labels). No traffic in the window gives no sample."""
    finite = sorted((float(b), b) for b in set(bounds) if b not in ("+Inf", "Inf"))
    if not finite:
        raise ValueError(f"no bucket bounds for {metric}")
    lower = max((b for b in finite if b[0] <= target_seconds), default=None)
    upper = min((b for b in finite if b[0] > target_seconds), default=None)

    def below(bound: str) -> str:
        return f"{scope.grouping()} ({_rate(metric + '_bucket', scope, window, le=bound)})"

    if lower is not None and (lower[0] == target_seconds or upper is None):
        good = below(lower[1])
    else:
        low_value = lower[0] if lower else 0.0
        fraction = round((target_seconds - low_value) / (upper[0] - low_value), 6)
        if lower is None:
            good = f"{fraction:g} * {below(upper[1])}"
        else:
            good = f"({below(lower[1])} + {fraction:g} * ({below(upper[1])} - {below(lower[1])}))"
    total = f"{scope.grouping()} ({_rate(metric + '_count', scope, window)})"
    return f"{good} / ({total} > 0)"


def goodput(*shares: str) -> str:
    """Estimated share of requests meeting every target whose slo_share is given.

    The frontend exports the two distributions separately (TTFT once per request, ITL once per
    token gap), so which requests met both is not recorded anywhere. The estimate multiplies
    the shares, as if a request's TTFT and its token gaps were independent; the ITL share is a
    share of token gaps, standing in for the share of requests whose gaps meet the target.
    charts.goodput_bounds gives the range that holds whatever the correlation."""
    if not shares:
        raise ValueError("goodput needs at least one SLO share")
    return " * ".join(f"({share})" for share in shares)


# ------------------------------------------------------------------ composed queries
# Each chart or table is one query: its parts carry a label naming them, so one round trip
# brings back everything, and a cold chart costs one range query, not nine.


def _pct(q: float) -> str:
    return f"p{round(q * 100):d}"


def chart_series(scope: Scope, rate_window: int, *, goodput_expr: str | None = None) -> str:
    """The time series of one graph's chart, labelled ``series``: ttft_p50 .. itl_p99
    (seconds), request_rate (1/s), output_tokens (1/s), in_flight, and goodput (0..1) when
    the graph has SLO targets."""
    parts = [labelled(latency_quantile(metric, q, scope, rate_window), "series", f"{name}_{_pct(q)}")
             for name, metric in (("ttft", TTFT), ("itl", ITL)) for q in QUANTILES]
    parts += [labelled(request_rate(scope, rate_window), "series", "request_rate"),
              labelled(output_token_rate(scope, rate_window), "series", "output_tokens"),
              labelled(in_flight(scope), "series", "in_flight")]
    if goodput_expr:
        parts.append(labelled(goodput_expr, "series", "goodput"))
    return either(*parts)


def window_summary(scope: Scope, window: int, *, shares: dict[str, str] | None = None) -> str:
    """One number per ``stat`` over the whole window: the latency quantiles, request rate,
    input and output tokens per second, and the SLO shares passed in (``ttft_share``...)."""
    raw = Scope(scope.matchers, scope.by, scope.scrape_interval)  # recorded series are 1m rates
    parts = [labelled(latency_quantile(metric, q, raw, window), "stat", f"{name}_{_pct(q)}")
             for name, metric in (("ttft", TTFT), ("itl", ITL)) for q in QUANTILES]
    parts += [labelled(request_rate(scope, window), "stat", "request_rate"),
              labelled(input_token_rate(scope, window), "stat", "input_tokens"),
              labelled(output_token_rate(scope, window), "stat", "output_tokens"),
              labelled(kv_hit_rate(scope, window), "stat", "kv_hit_rate"),
              labelled(cached_token_share(scope, window), "stat", "cached_token_share")]
    parts += [labelled(expr, "stat", name) for name, expr in (shares or {}).items()]
    return either(*parts)


def overview(scope: Scope, window: int) -> str:
    """Per graph of a batched scope (``scope.by`` labels): TTFT and ITL p90, request rate,
    input and output tokens per second over the last ``window`` seconds, and in-flight now."""
    return either(
        labelled(ttft_quantile(0.9, scope, window), "stat", "ttft_p90"),
        labelled(itl_quantile(0.9, scope, window), "stat", "itl_p90"),
        labelled(request_rate(scope, window), "stat", "request_rate"),
        labelled(input_token_rate(scope, window), "stat", "input_tokens"),
        labelled(output_token_rate(scope, window), "stat", "output_tokens"),
        labelled(in_flight(scope), "stat", "in_flight"),
        labelled(kv_hit_rate(scope, window), "stat", "kv_hit_rate"),
    )


# ------------------------------------------------------------------ the Planner timeline

# Gauges Dynamo 1.6.1's Planner exports about itself (dynamo/planner/monitoring/planner_metrics.py),
# charted beside the measured values they estimate.
PLANNER_ESTIMATES = {
    "planner_predicted_requests_per_second": "dynamo_planner_predicted_requests_per_second",
    "planner_estimated_ttft_ms": "dynamo_planner_estimated_ttft_ms",
    "planner_estimated_itl_ms": "dynamo_planner_estimated_itl_ms",
    "planner_predicted_num_prefill_replicas": "dynamo_planner_predicted_num_prefill_replicas",
    "planner_predicted_num_decode_replicas": "dynamo_planner_predicted_num_decode_replicas",
    "planner_observed_requests_per_second": "dynamo_planner_observed_requests_per_second",
}


def planner_timeline_series(scope: Scope, rate_window: int) -> str:
    """The Planner timeline of one graph, labelled ``series``: request_rate and input_tokens
    (1/s), ttft_p50/p90 and itl_p50/p90 (seconds), and the Planner's own gauges (their units)."""
    parts = [labelled(request_rate(scope, rate_window), "series", "request_rate"),
             labelled(input_token_rate(scope, rate_window), "series", "input_tokens")]
    parts += [labelled(latency_quantile(metric, q, scope, rate_window), "series", f"{name}_{_pct(q)}")
              for name, metric in (("ttft", TTFT), ("itl", ITL)) for q in (0.5, 0.9)]
    parts += [labelled(f"max({metric}{scope.selector()})", "series", name)
              for name, metric in PLANNER_ESTIMATES.items()]
    return either(*parts)


def routed_workers(scope: Scope, window: int) -> str:
    """Workers per ``worker_type`` the frontend routes to: those its last-TTFT or last-ITL gauge
    moved for within ``window`` (a request went there), or, with KV routing, those its router
    holds now; the larger of the two counts per worker type."""
    sel, w = scope.selector(), duration(window)
    moved = f"changes({WORKER_LAST_TTFT}{sel}[{w}]) > 0 or changes({WORKER_LAST_ITL}{sel}[{w}]) > 0"
    served = f"count by (worker_type) (max by (worker_type, worker_id) ({moved}))"
    held = f"count by (worker_type) (max by (worker_type, worker_id) ({WORKER_KV_BLOCKS}{sel}))"
    return f"(({served}) >= ({held})) or ({held}) or ({served})"
