"""Predicted against simulated says when the benchmark's load itself fell short of what it asked,
which lowers the simulated throughput whatever the graph could do (sizing.predictions)."""

from __future__ import annotations

from sizing.predictions import load_shortfall


def test_a_load_that_held_its_concurrency_has_no_caveat():
    # 8 in flight: 20 requests/s x 400 ms
    assert load_shortfall({"concurrency": 8, "request_throughput": 20.0, "request_latency": {"avg": 400.0},
                           "completed": 200, "errors": 0}) == []


def test_a_load_that_fell_short_or_failed_says_by_how_much():
    caveats = load_shortfall({"concurrency": 8, "request_throughput": 10.0, "request_latency": {"avg": 400.0},
                              "completed": 96, "errors": 4})
    assert caveats == ["4 of 100 requests failed",
                       "the load fell short: 4.0 requests were in flight on average (request rate times mean latency), "
                       "of the 8 asked"]
    assert load_shortfall({"concurrency": 8}) == []  # nothing measured: nothing said
