"""Sizing, what it takes and what it says: predicted against simulated says when the benchmark's
load itself fell short of what it asked (sizing.predictions); a performance database AIConfigurator
does not have is refused at the input (sizing.aic.check_inputs)."""

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


def test_a_backend_version_aiconfigurator_has_no_database_for_is_refused_before_any_worker_runs(api_for, db):
    from sizing import aic
    from sizing.models import Estimate

    have = aic.database_versions("h200_sxm", "vllm")
    assert have  # AIConfigurator's own list, not ours
    body = {"model": "Qwen/Qwen3-32B", "system": "h200_sxm", "gpus": 8, "isl": 4000, "osl": 500, "ttft": 600,
            "itl": 20, "backend": "vllm", "backend_version": "9.9.9"}
    refused = api_for("operator").post("/api/sizing/estimates/", body, format="json")
    assert refused.status_code == 422
    assert refused.json()["detail"] == (f"backend_version: AIConfigurator has no vllm '9.9.9' database for h200_sxm "
                                        f"(it has {', '.join(have)}; empty: the latest)")
    assert not Estimate.objects.exists()
