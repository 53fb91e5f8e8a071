"""dynamo-cp sizing estimate|show|create: AIConfigurator estimates and graphs made from them."""

from __future__ import annotations

from . import exits, wait
from .client import Client
from .output import emit, table

ESTIMATE_DONE = {"succeeded": exits.OK, "failed": exits.FAILED}


def add_parsers(sub, common) -> None:
    sizing = sub.add_parser("sizing", help="AIConfigurator estimates for real GPUs", parents=[common])
    verbs = sizing.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser("estimate", help="estimate agg against disagg for a model on a GPU system "
                                          "(waits for the answer)", parents=[common])
    p.add_argument("--model", required=True, help="a model in AIConfigurator's support matrix (Qwen/Qwen3-32B)")
    p.add_argument("--system", required=True, help="a GPU system (h200_sxm, b200_sxm, ...)")
    p.add_argument("--gpus", type=int, required=True, help="the GPU budget")
    p.add_argument("--isl", type=int, required=True, help="input tokens per request")
    p.add_argument("--osl", type=int, required=True, help="output tokens per request")
    p.add_argument("--ttft", type=float, required=True, help="time-to-first-token target, ms")
    p.add_argument("--itl", type=float, required=True, help="inter-token latency target, ms (AIConfigurator's TPOT)")
    p.add_argument("--backend", default="vllm", help="vllm (default), sglang or trtllm")
    p.add_argument("--fresh", action="store_true", help="estimate again even when the inputs are cached")
    p.add_argument("--timeout", type=wait.seconds, default=300, help="seconds to wait (default 300)")
    p = verbs.add_parser("show", help="one estimate", parents=[common])
    p.add_argument("id", type=int)
    p = verbs.add_parser("create", help="make a graph from a ranked configuration of an estimate", parents=[common])
    p.add_argument("name")
    p.add_argument("--estimate", type=int, required=True)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--mode", choices=["agg", "disagg"], help="the experiment (default: the one chosen)")
    p.add_argument("--dynamo-version", help="the Dynamo release (default: the latest known)")
    p = verbs.add_parser("dgdr", help="an estimate's inputs as a DynamoGraphDeploymentRequest (YAML)",
                         parents=[common])
    p.add_argument("id", type=int)
    p.add_argument("name")
    p.add_argument("--namespace")
    p.add_argument("--dynamo-version")
    p.add_argument("--auto-apply", action="store_true",
                   help="let the operator create the DGD (default: off, as an apply from the control plane)")


def _num(value, digits=2):
    return "—" if value is None else f"{value:.{digits}f}"


def _configurations(name: str, rows: list[dict]) -> str:
    if name == "disagg":
        pools = lambda c: f"{c['(p)workers']}x prefill TP{c['(p)tp']} bs{c['(p)bs']} + {c['(d)workers']}x decode TP{c['(d)tp']} bs{c['(d)bs']}"  # noqa: E501, E731
    else:
        pools = lambda c: f"TP{c['tp']} PP{c['pp']} bs{c['bs']}"  # noqa: E731
    # PARALLEL is AIConfigurator's own string (tp, pp, dp, etp, ep) as the estimate page shows it:
    # without DP and EP a 16-GPU replica would read like TP2's 2 GPUs.
    parallel = (lambda c: f"{c.get('(p)parallel', '')} / {c.get('(d)parallel', '')}") if name == "disagg" else (
        lambda c: str(c.get("parallel", "")))
    return table(["RANK", "TOKENS/S/GPU", "TOKENS/S/USER", "TTFT MS", "TPOT MS", "REQ LATENCY MS", "CONCURRENCY",
                  "GPUS", "REPLICAS", "GPUS/REPLICA", "POOLS", "PARALLEL"],
                 [[c["rank"], _num(c["tokens/s/gpu"]), _num(c["tokens/s/user"]), _num(c["ttft"]), _num(c["tpot"]),
                   _num(c["request_latency"]), c["cluster_concurrency"], c["total_gpus_used"], c["replicas"],
                   c.get("num_total_gpus", "—"), pools(c), parallel(c)]
                  for c in rows]).rstrip()


def _show(e: dict) -> str:
    lines = [f"estimate #{e['id']}: {e['state']} {e.get('progress_text', '')}".rstrip()]
    if e.get("error"):
        lines.append(f"error: {e['error']}")
    r = e.get("result") or {}
    if r:
        best = r["best_throughputs"].get(r["chosen"])
        lines.append(f"chosen: {r['chosen']} at {_num(best)} tokens/s/gpu ({r.get('comparison', '')})")
        lines.append(f"perf database {r['perf_db_version']}, AIConfigurator {r['aiconfigurator']}, "
                     f"{_num(r['elapsed_s'])} s{' (cached)' if e.get('cached') else ''}")
        for name, exp in r["experiments"].items():
            lines.append(f"\n{name} (Pareto front: {len(exp['pareto'])} points)")
            lines.append(_configurations(name, exp["configurations"]) if exp["configurations"]
                         else "  no configuration meets the targets")
    return "\n".join(lines)


def run(args, client: Client) -> int:
    if args.verb == "show":
        emit(client.get(f"/api/sizing/estimates/{args.id}/"), args.output, _show)
        return exits.OK
    if args.verb == "dgdr":
        query = {"name": args.name, "namespace": args.namespace, "dynamo_version": args.dynamo_version,
                 "auto_apply": "true" if args.auto_apply else ""}
        answer = client.get(f"/api/sizing/estimates/{args.id}/dgdr/", params={k: v for k, v in query.items() if v})
        emit(answer["manifest"], args.output if args.output != "table" else "yaml", str)
        return exits.OK
    if args.verb == "create":
        body = {"name": args.name, "rank": args.rank}
        for key in ("mode", "dynamo_version"):
            if getattr(args, key):
                body[key] = getattr(args, key)
        made = client.post(f"/api/sizing/estimates/{args.estimate}/graph/", json=body)
        emit(made, args.output, lambda m: (
            f"graph {m['graph']} revision {m['revision']} from estimate #{m['estimate']}, {m['mode']} rank {m['rank']}"
            f" (Dynamo {m['dynamo_version']}; mocker timed by {m['timing']})"
            + "".join(f"\n  {f['severity']}: {f['path']}: {f['message']}" for f in m["findings"])))
        return exits.OK
    body = {k: getattr(args, k) for k in ("model", "system", "gpus", "isl", "osl", "ttft", "itl", "backend", "fresh")}
    created = client.post("/api/sizing/estimates/", json=body)
    cached = created.get("cached", False)
    created, code = wait.follow(lambda: client.get(f"/api/sizing/estimates/{created['id']}/"),
                                describe=lambda e, s: f"estimate #{e['id']}: {e['state']} {e.get('progress_text', '')}",
                                done=ESTIMATE_DONE, timeout=args.timeout, progress=args.progress, interval=0.5,
                                hint=f"follow it with `dynamo-cp sizing show {created['id']}`")
    created["cached"] = cached
    emit(created, args.output, _show)
    return code
