"""The PromQL builders (metrics/promql.py): exact strings for each, graph scoping on every one,
escaping, the step and rate-window rules, and the SLO-share interpolation. No server needed:
tests/metrics/test_metrics_live.py runs every builder against a real Prometheus."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from metrics import promql, series
from metrics.charts import WindowError, cost_per_million_tokens, goodput_bounds, parse_window, resolution

LOCAL = promql.local_scope("demo", scrape_interval=5)
K8S = promql.kubernetes_scope("prod", "llama", scrape_interval=5)
LOCAL_SEL = '{job="dynamo-local",graph="demo"}'
K8S_SEL = '{namespace="prod",dynamo_namespace="prod-llama"}'
TTFT_BUCKETS = ["0", "0.0022", "0.0047", "0.01", "0.022", "0.047", "0.1", "0.22", "0.47", "1", "+Inf"]


# ------------------------------------------------------------------ scopes


def test_a_local_graph_is_selected_by_our_scrape_job_and_its_graph_label():
    assert LOCAL.selector() == LOCAL_SEL
    assert LOCAL.selector(le="0.1") == '{job="dynamo-local",graph="demo",le="0.1"}'


def test_a_kubernetes_graph_is_selected_by_namespace_and_dynamo_namespace():
    assert K8S.selector() == K8S_SEL


def test_label_values_are_escaped():
    scope = promql.local_scope('we"ird\\name\n')
    assert scope.selector() == '{job="dynamo-local",graph="we\\"ird\\\\name\\n"}'


def test_batched_scopes_match_exactly_the_listed_graphs_and_group_by_them():
    local = promql.local_graphs_scope(["b", "a.b", "a"])
    assert local.selector() == '{job="dynamo-local",graph=~"a|a\\\\.b|b"}'
    assert local.by == ("graph",)
    k8s = promql.kubernetes_graphs_scope([("prod", "llama"), ("dev", "qwen")])
    assert k8s.selector() == '{namespace=~"dev|prod",dynamo_namespace=~"dev\\\\-qwen|prod\\\\-llama"}'
    assert k8s.by == ("namespace", "dynamo_namespace")


# ------------------------------------------------------------------ resolution


@pytest.mark.parametrize(("window", "scrape", "step"), [
    (900, 5, 5), (3600, 5, 15), (6 * 3600, 5, 75), (24 * 3600, 5, 290), (7 * 86400, 5, 2025),
    (900, 1, 4), (3600, 1, 13), (900, 30, 30), (7 * 86400, 30, 2040),
])
def test_the_step_is_a_whole_number_of_scrapes_giving_at_most_300_points(window, scrape, step):
    assert promql.step_seconds(window, scrape) == step
    assert step % scrape == 0
    assert window // step + 1 <= promql.MAX_POINTS


@pytest.mark.parametrize("window", [900, 3600, 6 * 3600, 86400, 7 * 86400])
@pytest.mark.parametrize("scrape", [1, 5, 15, 30])
def test_every_window_from_15m_to_7d_stays_under_300_points_and_covers_4_scrapes(window, scrape):
    res = resolution(window, scrape, now=1_800_000_123.4)
    assert len(res.timestamps) <= 300
    assert res.rate_window >= 4 * scrape
    assert res.rate_window >= 2 * res.step  # consecutive points overlap: no sample falls between
    assert res.end % scrape == 0 and 0 <= 1_800_000_123.4 - res.end < scrape  # at most one scrape old
    assert res.timestamps[-1] == res.end and res.end - res.start <= window


def test_viewers_within_one_scrape_interval_ask_the_same_range():
    a, b = resolution(3600, 5, now=1_800_000_000.2), resolution(3600, 5, now=1_800_000_004.9)
    assert (a.start, a.end, a.step) == (b.start, b.end, b.step)
    assert resolution(3600, 5, now=1_800_000_005).end == a.end + 5


@pytest.mark.parametrize(("text", "seconds"), [("15m", 900), ("1h", 3600), ("36h", 129600), ("7d", 604800),
                                               (None, 3600), ("", 3600)])
def test_windows_parse_between_15_minutes_and_7_days(text, seconds):
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["5m", "8d", "1w", "1h;drop", "-1h", "999999h", "1.5h"])
def test_other_windows_are_refused(text):
    with pytest.raises(WindowError):
        parse_window(text)


# ------------------------------------------------------------------ each builder


def test_ttft_quantile():
    assert promql.ttft_quantile(0.9, LOCAL, 30) == (
        "histogram_quantile(0.9, sum by (le) "
        f"(rate(dynamo_frontend_time_to_first_token_seconds_bucket{LOCAL_SEL}[30s])))")


def test_itl_quantile():
    assert promql.itl_quantile(0.5, K8S, 20) == (
        "histogram_quantile(0.5, sum by (le) "
        f"(rate(dynamo_frontend_inter_token_latency_seconds_bucket{K8S_SEL}[20s])))")


def test_quantiles_of_a_batch_keep_the_graph_label():
    scope = promql.local_graphs_scope(["a", "b"])
    assert promql.ttft_quantile(0.99, scope, 300).startswith("histogram_quantile(0.99, sum by (graph, le) (rate(")


def test_recorded_quantiles_read_the_recording_rules_series():
    scope = promql.kubernetes_scope("prod", "llama", recorded=True)
    assert promql.ttft_quantile(0.9, scope, 30) == (
        f"dynamo_namespace:dynamo_frontend_time_to_first_token_seconds:p90_rate1m{K8S_SEL}")
    batch = promql.kubernetes_graphs_scope([("prod", "llama")], recorded=True)
    assert promql.itl_quantile(0.99, batch, 30).startswith(
        "max by (namespace, dynamo_namespace) "
        "(dynamo_namespace:dynamo_frontend_inter_token_latency_seconds:p99_rate1m{")


def test_recorded_names_are_the_ones_the_rules_file_records():
    from pathlib import Path

    import yaml

    rules = yaml.safe_load((Path(__file__).parents[2] / "deploy/prometheus/recording-rules.yaml").read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"]}
    for metric in (series.TTFT, series.ITL):
        for q in promql.QUANTILES:
            assert promql._recorded_name(metric, q) in recorded


def test_request_rate():
    rate, series = f"rate(dynamo_frontend_requests_total{LOCAL_SEL}[30s])", f"dynamo_frontend_requests_total{LOCAL_SEL}"
    # A local frontend's counter born inside the window, while its target was scraped, counts whole.
    assert promql.request_rate(LOCAL, 30) == (
        f"sum ((({rate} and {series} offset 30s) or (({series} unless {series} offset 30s) / 30 "
        f"and on(instance, job) (up{LOCAL_SEL} offset 30s)) or {rate}))")
    assert promql.request_rate(K8S, 30) == f"sum (rate(dynamo_frontend_requests_total{K8S_SEL}[30s]))"


def test_output_token_rate():
    assert promql.output_token_rate(K8S, 60) == f"sum (rate(dynamo_frontend_output_tokens_total{K8S_SEL}[60s]))"


def test_input_token_rate_reads_the_input_length_histograms_sum():
    assert promql.input_token_rate(K8S, 60) == (
        f"sum (rate(dynamo_frontend_input_sequence_tokens_sum{K8S_SEL}[60s]))")
    assert "dynamo_frontend_input_sequence_tokens_sum" in promql.input_token_rate(LOCAL, 60)


def test_in_flight_falls_back_to_the_deprecated_gauge():
    assert promql.in_flight(LOCAL) == (
        f"sum (dynamo_frontend_active_requests{LOCAL_SEL}) or sum (dynamo_frontend_inflight_requests{LOCAL_SEL})")


def test_scrape_targets_and_bucket_series():
    assert promql.scrape_targets(LOCAL) == f"up{LOCAL_SEL}"
    assert promql.bucket_series(series.ITL, K8S) == f"dynamo_frontend_inter_token_latency_seconds_bucket{K8S_SEL}"


def test_labelled_and_either_combine_expressions_into_one_query():
    expr = promql.either(promql.labelled("a", "series", "x"), promql.labelled("b", "series", "y"))
    assert expr == 'label_replace(a, "series", "x", "", "") or label_replace(b, "series", "y", "", "")'


# ------------------------------------------------------------------ SLO shares and goodput


def _share_parts(expr: str) -> tuple[list[str], str]:
    return re.findall(r'le="([^"]+)"', expr), expr


def test_a_target_on_a_bucket_bound_counts_that_bucket_exactly():
    expr = promql.slo_share(series.TTFT, LOCAL, 30, 0.1, TTFT_BUCKETS)
    assert expr == (
        f'sum (rate(dynamo_frontend_time_to_first_token_seconds_bucket{{job="dynamo-local",graph="demo",le="0.1"}}'
        f"[30s])) / (sum (rate(dynamo_frontend_time_to_first_token_seconds_count{LOCAL_SEL}[30s])) > 0)")


def test_a_target_inside_a_bucket_is_interpolated_linearly_like_histogram_quantile():
    expr = promql.slo_share(series.TTFT, LOCAL, 30, 0.2, TTFT_BUCKETS)
    bounds, _ = _share_parts(expr)
    assert bounds == ["0.1", "0.22", "0.1"]
    assert " + 0.833333 * (" in expr  # (0.2 - 0.1) / (0.22 - 0.1)


def test_a_target_past_the_last_finite_bound_counts_what_is_under_it():
    expr = promql.slo_share(series.TTFT, LOCAL, 30, 5.0, TTFT_BUCKETS)
    assert _share_parts(expr)[0] == ["1"]


def test_a_target_under_the_first_bound_interpolates_from_zero():
    expr = promql.slo_share(series.ITL, LOCAL, 30, 0.001, ["0.0018", "0.0033", "+Inf"])
    assert expr.startswith("0.555556 * sum (rate(dynamo_frontend_inter_token_latency_seconds_bucket{")


def test_a_histogram_without_bounds_cannot_give_a_share():
    with pytest.raises(ValueError, match="no bucket bounds"):
        promql.slo_share(series.TTFT, LOCAL, 30, 0.1, ["+Inf"])


def test_goodput_multiplies_the_shares():
    assert promql.goodput("A", "B") == "(A) * (B)"
    assert promql.goodput("A") == "(A)"
    with pytest.raises(ValueError):
        promql.goodput()


def test_goodput_bounds_hold_whatever_the_correlation():
    bounds = goodput_bounds([0.9, 0.8])
    assert bounds == pytest.approx({"estimate": 0.72, "upper": 0.8, "lower": 0.7})
    assert goodput_bounds([0.3, 0.4])["lower"] == 0.0
    assert goodput_bounds([]) is None


def test_cost_per_million_tokens_is_gpu_hours_over_tokens_per_hour():
    # 4 GPUs at 2.50 an hour make 10.00 an hour; 1000 tokens/s make 3.6 M tokens an hour.
    assert cost_per_million_tokens(4, 2.5, 1000.0) == pytest.approx(10 / 3.6)
    assert cost_per_million_tokens(0, 2.5, 1000.0) is None
    assert cost_per_million_tokens(4, None, 1000.0) is None
    assert cost_per_million_tokens(4, 2.5, 0.0) is None


def test_a_cost_that_cannot_be_had_says_why_instead_of_dashes():
    from metrics.charts import costs

    assert costs({"prefill": 0, "decode": 0}, Decimal("2.5"), 100.0, 50.0)["reason"] == (
        "no GPUs: the running revision's workers ask for none")
    assert costs({"prefill": 1, "decode": 1}, Decimal("2.5"), None, None)["reason"] == "no tokens in this window"
    assert "reason" not in costs({"prefill": 1, "decode": 1}, Decimal("2.5"), 100.0, 50.0)
    assert "reason" not in costs({"worker": 0}, None, 100.0, 50.0)  # no price: the page asks for one


# ------------------------------------------------------------------ composed queries


def test_the_chart_is_one_query_with_every_series_labelled():
    expr = promql.chart_series(LOCAL, 30, goodput_expr="(A) * (B)")
    names = re.findall(r'"series", "([a-z0-9_]+)"', expr)
    assert names == ["ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99", "request_rate",
                     "output_tokens", "in_flight", "goodput"]
    assert "goodput" not in promql.chart_series(LOCAL, 30)


def test_the_window_summary_uses_the_whole_window_and_raw_buckets():
    scope = promql.kubernetes_scope("prod", "llama", recorded=True)
    expr = promql.window_summary(scope, 3600, shares={"ttft_share": "S"})
    assert "[3600s]" in expr and ":p90_rate1m" not in expr  # recorded series are 1-minute rates
    assert re.findall(r'"stat", "([a-z0-9_]+)"', expr) == [
        "ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99", "request_rate", "input_tokens",
        "output_tokens", "kv_hit_rate", "cached_token_share", "ttft_share"]


def test_the_overview_is_one_query_grouped_by_graph():
    expr = promql.overview(promql.local_graphs_scope(["a", "b"]), 300)
    assert re.findall(r'"stat", "([a-z0-9_]+)"', expr) == [
        "ttft_p90", "itl_p90", "request_rate", "input_tokens", "output_tokens", "in_flight", "kv_hit_rate"]
    # both quantiles, three rates, both in-flight gauges, the two sides of the KV hit rate
    assert expr.count("sum by (graph") == 9


# ------------------------------------------------------------------ lint: nothing scans the whole TSDB


def _every_query() -> list[str]:
    out = []
    for scope in (LOCAL, K8S, promql.local_graphs_scope(["a"]), promql.kubernetes_graphs_scope([("p", "g")]),
                  promql.kubernetes_scope("prod", "llama", recorded=True)):
        share = promql.slo_share(series.TTFT, scope, 30, 0.2, TTFT_BUCKETS)
        out += [promql.ttft_quantile(0.9, scope, 30), promql.itl_quantile(0.9, scope, 30),
                promql.request_rate(scope, 30), promql.output_token_rate(scope, 30),
                promql.input_token_rate(scope, 30), promql.in_flight(scope), promql.scrape_targets(scope),
                promql.bucket_series(series.TTFT, scope), share, promql.goodput(share),
                promql.chart_series(scope, 30, goodput_expr=promql.goodput(share)),
                promql.window_summary(scope, 3600, shares={"ttft_share": share}), promql.overview(scope, 300)]
    return out


def test_every_selector_in_every_query_carries_a_graph_matcher():
    queries = _every_query()
    assert len(queries) > 20
    for expr in queries:
        selectors = re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})", expr)
        assert selectors, expr
        for metric, selector in selectors:
            assert ('graph="' in selector or 'graph=~"' in selector or 'dynamo_namespace="' in selector
                    or 'dynamo_namespace=~"' in selector), f"{metric}{selector} is not scoped to a graph"
        # every metric name is followed by a selector: no bare metric reads all graphs
        outside = re.sub(r"\{[^}]*\}|by \([^)]*\)", "{}", expr)  # selectors and grouping labels aside
        bare = re.findall(r"\b(dynamo_[a-z_:0-9]+|up)(?![a-z_:0-9{])", outside)
        assert bare == [], expr
