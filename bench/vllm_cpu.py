"""The mocker and real vLLM on this host's CPU side by side, on the same graphs, through the
local runtime: start-up (apply to the first reply), TTFT, ITL and tokens/s of streamed replies.

    make engine-vllm-cpu && python bench/vllm_cpu.py    # writes bench/results/vllm-cpu-vs-mocker.json

Graphs: "Aggregated vLLM" (one worker) and graphs/examples/vllm-cpu-disagg.yaml (a prefill and a
decode worker, KV router, NIXL). Each runs once with ``LOCAL_RUNTIME_ENGINE=mocker`` and once
with ``vllm-cpu`` (a tiny random-weight Qwen3: 9.6 M parameters). Requests: sequential streamed
chats of a ~600-token prompt, 64 output tokens (ignore_eos), against the graph's frontend.
The machine is shared and has 2 cores: read the figures as an order of magnitude."""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REQUESTS = 8
MAX_TOKENS = 64
PROMPT = " ".join(f"word{i % 300}" for i in range(600))
MODEL = "Qwen/Qwen3-0.6B"


def stream_once(endpoint: str) -> dict:
    """One streamed chat: TTFT (first content), ITL (mean gap after it), tokens/s over the reply."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
            "stream": True, "ignore_eos": True}
    start = time.perf_counter()
    arrivals = []
    with httpx.stream("POST", f"{endpoint}/v1/chat/completions", json=body, timeout=120) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if any((c.get("delta") or {}).get("content") for c in chunk.get("choices", [])):
                arrivals.append(time.perf_counter())
    end = time.perf_counter()
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return {"ttft_ms": (arrivals[0] - start) * 1000, "itl_ms": statistics.mean(gaps) * 1000 if gaps else None,
            "tokens_per_s": len(arrivals) / (end - start), "chunks": len(arrivals)}


def summary(samples: list[dict]) -> dict:
    def pick(key):
        values = sorted(s[key] for s in samples if s[key] is not None)
        return {"p50": round(statistics.median(values), 2), "min": round(values[0], 2),
                "max": round(values[-1], 2)} if values else None

    return {key: pick(key) for key in ("ttft_ms", "itl_ms", "tokens_per_s")}


def run_graph(make_graph, engine: str, root: Path) -> dict:
    from django.conf import settings

    from graphs import operations
    from graphs.models import Deployment
    from graphs.runtimes.local.operator import LocalOperator
    from graphs.runtimes.processes import wait_until

    settings.LOCAL_RUNTIME_ENGINE = engine
    operator = LocalOperator(runtime_dir=root / engine, port_min=27000, port_max=27999)
    graph = make_graph(f"{engine}-{int(time.time())}")
    try:
        start = time.perf_counter()
        operations.graph_apply(graph=graph, via="cli")

        def serving():
            operator.reconcile_once()
            dep = Deployment.objects.get(graph=graph)
            if dep.state != "ready":
                return False
            try:
                return httpx.post(f"{dep.endpoint}/v1/chat/completions", timeout=30, json={
                    "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).is_success
            except httpx.HTTPError:
                return False

        wait_until(serving, timeout=400, interval=0.5, what=f"{graph.name} to serve")
        startup = time.perf_counter() - start
        endpoint = Deployment.objects.get(graph=graph).endpoint
        stream_once(endpoint)  # warm-up, not counted
        samples = [stream_once(endpoint) for _ in range(REQUESTS)]
        operations.graph_undeploy(graph=graph, via="cli")
        wait_until(lambda: operator.reconcile_once() or not operator.supervisor.names(), timeout=60, interval=0.5,
                   what="the graph to stop")
    finally:
        operator.shutdown()
    return {"engine": engine, "startup_s": round(startup, 1), **summary(samples), "samples": samples}


def main() -> dict:
    from bench.run import setup_django

    setup_django()
    from bench import record
    from controlplane.celery import app
    from core.catalog import build_spec
    from core.specio import load_yaml
    from graphs import services
    from graphs.runtimes.local.engine_env import engine_python

    if engine_python("vllm-cpu") is None:
        sys.exit("the vLLM-on-CPU engine environment is not built: run `make engine-vllm-cpu` first")
    app.conf.task_always_eager = True
    root = Path(tempfile.mkdtemp(prefix="cp-bench-vllm-cpu-"))
    example = (ROOT / "graphs" / "examples" / "vllm-cpu-disagg.yaml").read_text()

    def aggregated(name):
        return services.graph_create(spec=build_spec(template="vllm-agg", name=f"agg-{name}", model=MODEL))

    def disaggregated(name):
        obj = load_yaml(example, max_bytes=1 << 20)
        obj["metadata"]["name"] = f"disagg-{name}"
        return services.graph_import(obj=obj, text="", message="bench")[0]

    graphs = {}
    for label, make in (("aggregated, 1 worker", aggregated),
                        ("disaggregated, 1 prefill + 1 decode, KV router, NIXL", disaggregated)):
        graphs[label] = [run_graph(make, engine, root) for engine in ("mocker", "vllm-cpu")]
        for row in graphs[label]:
            print(f"{label:55} {row['engine']:9} start-up {row['startup_s']:6.1f}s  "
                  f"TTFT p50 {row['ttft_ms']['p50']:8.1f} ms  ITL p50 {row['itl_ms']['p50']:7.2f} ms  "
                  f"{row['tokens_per_s']['p50']:7.1f} tok/s")
    data = {"requests": REQUESTS, "max_tokens": MAX_TOKENS, "prompt_words": 600, "model": MODEL,
            "vllm_cpu_model": "tiny random-weight Qwen3 (9.6 M parameters), --enforce-eager, one core per worker",
            "graphs": graphs}
    print(record.write("vllm-cpu-vs-mocker", data))
    return data


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
