"""dynamo-cp benchmarks run|show|list|cancel|compare: aiperf runs against a graph's frontend."""

from __future__ import annotations

import json
import sys

from . import exits, wait
from .client import Client
from .exits import CliError
from .output import emit, table

# Flag -> API field; every other parameter goes through --set NAME=VALUE.
FLAGS = {"concurrency": "concurrency", "request_count": "request_count", "input_tokens": "input_tokens_mean",
         "output_tokens": "output_tokens_mean", "duration": "duration_s", "request_rate": "request_rate",
         "max_seconds": "max_seconds"}


def add_parsers(sub, common) -> None:
    bench = sub.add_parser("benchmarks", help="aiperf benchmark runs", parents=[common])
    verbs = bench.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser("run", help="start a benchmark run of a graph", parents=[common])
    p.add_argument("graph")
    p.add_argument("--profile", default="custom",
                   help="streaming-chat (chat completions, streaming, concurrency 50), long, short or custom "
                        "(default); flags below override the profile's values")
    p.add_argument("--concurrency", type=int)
    p.add_argument("--request-count", type=int)
    p.add_argument("--input-tokens", type=int, help="mean input tokens")
    p.add_argument("--output-tokens", type=int, help="mean output tokens")
    p.add_argument("--duration", type=float, help="seconds of load (instead of a request count)")
    p.add_argument("--request-rate", type=float, help="requests per second")
    p.add_argument("--max-seconds", type=int, help="the run's wall-clock bound")
    p.add_argument("--sweep", help="concurrencies, comma-separated: one aiperf invocation each (1,4,16)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="any other parameter, the value in JSON (streaming=false, seed=7)")
    p.add_argument("--wait", action="store_true", help="wait for the run to finish, showing its progress")
    p.add_argument("--timeout", type=wait.seconds, default=1800, help="seconds --wait waits (default 1800)")
    p = verbs.add_parser("show", help="one run: state, progress and results", parents=[common])
    p.add_argument("id", type=int)
    p = verbs.add_parser("cancel", help="stop a pending or running run (its partial artifacts are kept)",
                         parents=[common])
    p.add_argument("id", type=int)
    p = verbs.add_parser("list", help="recent runs, newest first", parents=[common])
    p.add_argument("--graph")
    p.add_argument("--limit", type=int, default=50)
    p = verbs.add_parser("compare", help="several runs side by side, one row per load point (--report: the CSV or "
                                         "self-contained HTML report on stdout)", parents=[common])
    p.add_argument("ids", type=int, nargs="+", metavar="ID")
    p.add_argument("--report", choices=["csv", "html"])


def _body(args) -> dict:
    body: dict = {"graph": args.graph, "profile": args.profile}
    for flag, field in FLAGS.items():
        if getattr(args, flag) is not None:
            body[field] = getattr(args, flag)
    if args.sweep:
        try:
            body["sweep"] = [int(v) for v in args.sweep.split(",") if v.strip()]
        except ValueError:
            raise CliError(exits.USAGE, f"--sweep: whole numbers separated by commas, not {args.sweep!r}") from None
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(exits.USAGE, f"--set {item!r}: expected NAME=VALUE")
        try:
            body[name.strip()] = json.loads(value)
        except ValueError:
            body[name.strip()] = value
    return body


def _headline(run: dict) -> dict:
    steps = (run.get("results") or {}).get("steps") or []
    return steps[-1] if steps else {}


def _num(value, digits=1):
    return None if value is None else f"{value:.{digits}f}"


def _list_table(runs: list[dict]) -> str:
    rows = []
    for r in runs:
        h = _headline(r)
        rows.append([r["id"], r["graph"], r["profile"], r["state"], f"{r.get('progress', 0)}%",
                     _num((h.get("ttft") or {}).get("p90")), _num((h.get("itl") or {}).get("p90"), 2),
                     _num(h.get("output_token_throughput")), (r.get("created_at") or "")[:19],
                     "simulated" if (r.get("config") or {}).get("simulated") else ""])
    return table(["ID", "GRAPH", "PROFILE", "STATE", "PROGRESS", "TTFT P90 MS", "ITL P90 MS", "TOKENS/S",
                  "CREATED", "ENGINE"], rows)


def _show_table(run: dict) -> str:
    lines = [wait.describe_run(run, 0).replace(" (0s)", "")]
    if (run.get("config") or {}).get("simulated"):  # as the JSON says it
        lines.append(run["config"]["simulated"])
    if run.get("error"):
        lines.append(f"error: {run['error']}")
    steps = (run.get("results") or {}).get("steps") or []
    if steps:
        lines.append(table(
            ["STEP", "CONCURRENCY", "TTFT P50", "TTFT P90", "ITL P50", "ITL P90", "REQ/S", "TOKENS/S", "DONE",
             "ERRORS"],
            [[s.get("index"), s.get("concurrency"), _num(s["ttft"].get("p50")), _num(s["ttft"].get("p90")),
              _num(s["itl"].get("p50"), 2), _num(s["itl"].get("p90"), 2), _num(s.get("request_throughput"), 2),
              _num(s.get("output_token_throughput")), s.get("completed"), s.get("errors")] for s in steps]).rstrip())
        lines.append("(latencies in ms)")
    return "\n".join(lines)


def _compare_table(data: dict) -> str:
    rows = [[r.get("run"), r.get("label") or r.get("graph"), r.get("concurrency"), _num(r.get("ttft_p90")),
             _num(r.get("itl_p90"), 2), _num(r.get("output_token_throughput")), _num(r.get("tokens_per_gpu"))]
            for r in data.get("rows") or []]
    out = table(["RUN", "LABEL", "CONCURRENCY", "TTFT P90 MS", "ITL P90 MS", "TOKENS/S", "TOKENS/S/GPU"], rows)
    for p in data.get("predicted") or []:
        out += f"\n{p.get('label')}" + "".join(f"; not like for like: {c}" for c in p.get("caveats") or [])
    return out


def run(args, client: Client) -> int:
    if args.verb == "list":
        rows = client.pages("/api/benchmarks/runs/", {"graph": args.graph}, limit=args.limit)
        emit(rows[: args.limit], args.output, _list_table)
        return exits.OK
    if args.verb == "show":
        emit(client.get(f"/api/benchmarks/runs/{args.id}/"), args.output, _show_table)
        return exits.OK
    if args.verb == "cancel":
        emit(client.post(f"/api/benchmarks/runs/{args.id}/cancel/", json={}), args.output, _show_table)
        return exits.OK
    if args.verb == "compare":
        runs = ",".join(str(i) for i in args.ids)
        if args.report:
            reply = client.request("GET", "/api/benchmarks/compare/report/", params={"runs": runs, "type": args.report},
                                   accept="*/*")
            sys.stdout.write(reply.text)
            return exits.OK
        emit(client.get("/api/benchmarks/compare/", params={"runs": runs}), args.output, _compare_table)
        return exits.OK
    created = client.post("/api/benchmarks/runs/", json=_body(args))
    code = exits.OK
    if args.wait:
        created, code = wait.follow(lambda: client.get(f"/api/benchmarks/runs/{created['id']}/"),
                                    describe=wait.describe_run, done=wait.RUN_DONE, timeout=args.timeout,
                                    progress=args.progress, interval=2.0,
                                    hint=f"follow it with `dynamo-cp benchmarks show {created['id']}`")
    emit(created, args.output, _show_table)
    return code
