"""Sizing with AIConfigurator, end to end, on this machine:

1. an estimate cold (the first in a fresh process: AIConfigurator imported, its database
   loaded) and cached (the same inputs again through the API: a stored answer);
2. per case (model, system): a graph made from the chosen configuration, applied on the local
   runtime until its frontend answers (mocker workers timed by AIConfigurator's profile data);
3. an aiperf benchmark of that graph at the estimate's concurrency, ISL and OSL, set beside the
   estimate: predicted against simulated TTFT, ITL and output throughput.

    BENCH_DATABASE_URL=postgres://... python bench/sizing.py     # writes bench/results/sizing.json"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [
    {"model": "Qwen/Qwen3-32B", "system": "h200_sxm", "total_gpus": 8, "isl": 4000, "osl": 500, "ttft": 600,
     "tpot": 20, "backend": "vllm"},
    {"model": "Qwen/Qwen3-8B", "system": "h100_sxm", "total_gpus": 4, "isl": 2000, "osl": 300, "ttft": 300,
     "tpot": 12, "backend": "vllm"},
]
CACHED_REPEATS = 20


def _cached_ms(client, body: dict) -> list[float]:
    out = []
    for _ in range(CACHED_REPEATS):
        start = time.perf_counter()
        response = client.post("/api/sizing/estimates/", body, format="json")
        out.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200 and response.json()["cached"], response.content
    return out


def _serve(operator, graph, model: str) -> float:
    from graphs import operations
    from graphs.models import Deployment
    from graphs.runtimes.processes import wait_until

    start = time.perf_counter()
    operations.graph_apply(graph=graph, via="cli")

    def serving():
        operator.reconcile_once()
        dep = Deployment.objects.get(graph=graph)
        if not dep.endpoint or dep.state != "ready":  # every worker up, not only the frontend
            return False
        try:
            r = httpx.post(f"{dep.endpoint}/v1/chat/completions", timeout=5,
                           json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    wait_until(serving, timeout=180, interval=0.2, what="the sized graph to serve")
    return time.perf_counter() - start


def main() -> dict:
    from bench.run import setup_django

    setup_django()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from rest_framework.test import APIClient

    from accounts.tokens import token_create
    from bench import record
    from benchmarks import reports
    from benchmarks import services as bench_services
    from controlplane.celery import app
    from graphs.models import Graph
    from graphs.runtimes.local.operator import LocalOperator
    from sizing import aic, configurations, services

    app.conf.task_always_eager = True
    root = Path(tempfile.mkdtemp(prefix="cp-bench-sizing-"))
    settings.LOCAL_RUNTIME_DIR, settings.SIZING_DIR, settings.BENCHMARK_DIR = root / "rt", root / "sz", root / "bm"
    user = get_user_model().objects.create_user(username=f"bench-{time.time_ns()}", password="x")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user, name='bench', via='system')[1]}")
    operator = LocalOperator(runtime_dir=root / "rt", port_min=27000, port_max=27999)
    stop = threading.Event()

    def loop():  # the operator's own loop while aiperf runs
        while not stop.is_set():
            operator.reconcile_once()
            time.sleep(0.3)

    cases = []
    try:
        for i, case in enumerate(CASES):
            inputs = aic.Inputs(**case)
            start = time.perf_counter()
            estimate, _ = services.estimate_request(inputs=inputs, via="cli", fresh=True)
            wall = time.perf_counter() - start
            estimate.refresh_from_db()
            assert estimate.state == "succeeded", estimate.error
            body = {"model": case["model"], "system": case["system"], "gpus": case["total_gpus"], "isl": case["isl"],
                    "osl": case["osl"], "ttft": case["ttft"], "itl": case["tpot"], "backend": case["backend"]}
            cached_ms = _cached_ms(client, body)
            mode = estimate.result["chosen"]
            start = time.perf_counter()
            made = configurations.graph_from_estimate(estimate=estimate, name=f"sized-{i}", mode=mode, rank=1)
            make_s = time.perf_counter() - start
            graph = Graph.objects.get(name=made.graph)
            model = graph.head.graph_spec.model or graph.name
            serve_s = _serve(operator, graph, model)
            best = estimate.configuration(mode, 1)
            concurrency = int(best["cluster_concurrency"])
            stop.clear()
            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
            runs = {}
            # Closed loop at the estimate's concurrency (every request sent at once, then one per
            # completion), and open loop at its request rate capped at that concurrency (arrivals
            # spread out, the steady state AIConfigurator models).
            rate = round(float(best["cluster_request_rate"]), 3)
            loads = {"closed": {"concurrency": concurrency}, "open": {"concurrency": concurrency, "request_rate": rate}}
            for label, load in loads.items():
                run = bench_services.benchmark_request(graph=graph, profile="custom", via="cli", label=label, params={
                    "input_tokens_mean": case["isl"], "output_tokens_mean": case["osl"], **load,
                    "request_count": 3 * concurrency, "warmup_requests": concurrency, "max_seconds": 900})
                run.refresh_from_db()
                runs[label] = run
            stop.set()
            thread.join()
            compared = {label: (reports.predicted([run]) or [None])[0] for label, run in runs.items()}
            cases.append({
                "inputs": case, "estimate": estimate.pk, "chosen": mode, "best": {
                    k: best[k] for k in best if not k.startswith("_")},
                "estimate_cold_wall_s": round(wall, 3), "estimate_aiconfigurator_s": estimate.elapsed_s,
                "first_in_process": i == 0, "perf_db_version": estimate.perf_db_version,
                "cached_api_ms": {"median": round(statistics.median(cached_ms), 2), "max": round(max(cached_ms), 2),
                                  "repeats": CACHED_REPEATS},
                "graph": made.as_dict(), "make_graph_s": round(make_s, 2), "apply_to_serving_s": round(serve_s, 2),
                "benchmarks": {label: {"run": run.pk, "state": run.state, "error": run.error[:2000],
                                       "params": run.params,
                                       "headline": run.run_results.headline.model_dump(mode="json")
                                       if run.run_results.headline else None} for label, run in runs.items()},
                "predicted_vs_simulated": compared,
            })
            operator.shutdown()
            operator = LocalOperator(runtime_dir=root / "rt", port_min=27000, port_max=27999)
    finally:
        stop.set()
        operator.shutdown()
    result = {"cases": cases, "aiconfigurator": aic.version(), "note": (
        "cold: the first estimate of a fresh process (AIConfigurator imported, its database loaded) or a new "
        "system's first; cached: POST /api/sizing/estimates/ with the same inputs, through DRF; the mocker "
        "workers timed by AIConfigurator's static estimates (sizing/timing.py); 2 shared cores")}
    path = record.write("sizing", result)
    print(path.read_text())
    return result


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
