"""dynamo-cp studies run|show|list|cancel and dynamo-cp recommendations create|show|list|apply:
A/B studies of a graph's shapes, and replica recommendations from its runs."""

from __future__ import annotations

from . import exits, wait
from .client import Client
from .output import emit, table

STUDY_DONE = {"succeeded": exits.OK, "failed": exits.FAILED, "cancelled": exits.FAILED}
RECOMMENDATION_DONE = {"applied": exits.OK, "failed": exits.FAILED}


def add_parsers(sub, common) -> None:
    studies = sub.add_parser("studies", help="A/B studies: several shapes of one graph, one profile, one report",
                             parents=[common])
    verbs = studies.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser("run", help="start a study of a graph's shapes", parents=[common])
    p.add_argument("graph")
    p.add_argument("--arms", default="", help="shapes, comma-separated (p1d1,p2d1,agg2); default: every shape "
                                              "with the graph's current GPUs")
    p.add_argument("--profile", default="custom", help="the benchmark profile each arm runs (default custom)")
    p.add_argument("--keep-variants", action="store_true", help="keep the variant graphs once the study ends")
    p.add_argument("--wait", action="store_true", help="wait for the study to finish, showing its progress")
    p.add_argument("--timeout", type=wait.seconds, default=7200, help="seconds --wait waits (default 7200)")
    p = verbs.add_parser("show", help="one study: state, message and its runs", parents=[common])
    p.add_argument("id", type=int)
    p = verbs.add_parser("cancel", help="stop a study (its variants are torn down)", parents=[common])
    p.add_argument("id", type=int)
    p = verbs.add_parser("list", help="recent studies, newest first", parents=[common])
    p.add_argument("--limit", type=int, default=50)

    recs = sub.add_parser("recommendations", help="replica recommendations from a graph's benchmark runs",
                          parents=[common])
    verbs = recs.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser("create", help="recommend replicas for a graph (targets: given, else its objectives)",
                         parents=[common])
    p.add_argument("graph")
    p.add_argument("--ttft-ms", type=float, help="TTFT p90 target")
    p.add_argument("--itl-ms", type=float, help="ITL p90 target")
    p.add_argument("--runs", default="", help="run ids as evidence, comma-separated; default: every run under the "
                                              "load of the graph's latest run")
    p = verbs.add_parser("show", help="one recommendation", parents=[common])
    p.add_argument("id", type=int)
    p = verbs.add_parser("apply", help="apply it: one scale operation per pool that changes", parents=[common])
    p.add_argument("id", type=int)
    p.add_argument("--wait", action="store_true", help="wait until every scale is done")
    p.add_argument("--timeout", type=wait.seconds, default=600, help="seconds --wait waits (default 600)")
    p = verbs.add_parser("list", help="recent recommendations, newest first", parents=[common])
    p.add_argument("--graph")
    p.add_argument("--limit", type=int, default=50)


def describe_study(study: dict, elapsed: float) -> str:
    message = f": {study['message']}" if study.get("message") else ""
    return f"study #{study['id']} of {study.get('graph')}: {study.get('state')}{message} ({elapsed:.0f}s)"


def describe_recommendation(rec: dict, elapsed: float) -> str:
    result = f": {rec['result']}" if rec.get("result") else ""
    return f"recommendation #{rec['id']} for {rec.get('graph')}: {rec.get('state')}{result} ({elapsed:.0f}s)"


def _arms(study: dict) -> list[str]:
    """Each arm's shape, and how far it got ("p2d1 (run)")."""
    return [a if isinstance(a, str) else f"{a.get('shape')} ({a.get('phase')})" for a in study.get("arms") or []]


def _study_table(study: dict) -> str:
    lines = [describe_study(study, 0).replace(" (0s)", "")]
    runs = sorted(study.get("runs") or [])
    lines.append(f"arms: {', '.join(_arms(study)) or 'every shape'}; profile {study.get('profile')}; "
                 f"runs: {', '.join(f'#{r}' for r in runs) or 'none yet'}")
    if study.get("error"):
        lines.append(f"error: {study['error']}")
    if runs:
        lines.append(f"compare them: dynamo-cp benchmarks compare {' '.join(str(r) for r in runs)}")
    return "\n".join(lines)


def _rec_table(rec: dict) -> str:
    lines = [describe_recommendation(rec, 0).replace(" (0s)", "")]
    targets = ", ".join(f"{k} ≤ {rec[k]:g} ms" for k in ("ttft_ms", "itl_ms") if rec.get(k) is not None)
    lines.append(f"targets ({rec.get('targets_from')}): {targets or 'none'}; met: {rec.get('met')}")
    current, wanted = rec.get("current") or {}, rec.get("recommended") or {}
    lines.append(table(["POOL", "NOW", "RECOMMENDED"],
                       [[pool, current.get(pool, "—"), wanted.get(pool, "—")] for pool in sorted(set(current) |
                                                                                               set(wanted))]).rstrip())
    lines += [f"- {reason}" for reason in rec.get("reasons") or []]
    return "\n".join(lines)


def run_studies(args, client: Client) -> int:
    if args.verb == "list":
        rows = client.pages("/api/benchmarks/studies/", limit=args.limit)[: args.limit]
        emit(rows, args.output, lambda rs: table(
            ["ID", "GRAPH", "STATE", "ARMS", "RUNS", "CREATED"],
            [[s["id"], s["graph"], s["state"], ",".join(a.split(" ")[0] for a in _arms(s)) or "all",
              len(s.get("runs") or []), (s.get("created_at") or "")[:19]] for s in rs]))
        return exits.OK
    if args.verb == "show":
        emit(client.get(f"/api/benchmarks/studies/{args.id}/"), args.output, _study_table)
        return exits.OK
    if args.verb == "cancel":
        emit(client.post(f"/api/benchmarks/studies/{args.id}/cancel/", json={}), args.output, _study_table)
        return exits.OK
    body = {"graph": args.graph, "profile": args.profile, "keep_variants": args.keep_variants}
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if arms:
        body["arms"] = arms
    study, code = client.post("/api/benchmarks/studies/", json=body), exits.OK
    if args.wait:
        study, code = wait.follow(lambda: client.get(f"/api/benchmarks/studies/{study['id']}/"),
                                  describe=describe_study, done=STUDY_DONE, timeout=args.timeout,
                                  progress=args.progress, interval=3.0,
                                  hint=f"follow it with `dynamo-cp studies show {study['id']}`")
    emit(study, args.output, _study_table)
    return code


def run_recommendations(args, client: Client) -> int:
    if args.verb == "list":
        rows = client.pages("/api/benchmarks/recommendations/", {"graph": args.graph}, limit=args.limit)
        emit(rows[: args.limit], args.output, lambda rs: table(
            ["ID", "GRAPH", "STATE", "RECOMMENDED", "MET", "CREATED"],
            [[r["id"], r["graph"], r["state"], " ".join(f"{k}={v}" for k, v in (r.get("recommended") or {}).items()),
              r.get("met"), (r.get("created_at") or "")[:19]] for r in rs]))
        return exits.OK
    if args.verb == "show":
        emit(client.get(f"/api/benchmarks/recommendations/{args.id}/"), args.output, _rec_table)
        return exits.OK
    if args.verb == "apply":
        rec, code = client.post(f"/api/benchmarks/recommendations/{args.id}/apply/", json={}), exits.OK
        if args.wait:
            rec, code = wait.follow(lambda: client.get(f"/api/benchmarks/recommendations/{args.id}/"),
                                    describe=describe_recommendation, done=RECOMMENDATION_DONE,
                                    timeout=args.timeout, progress=args.progress,
                                    hint=f"follow it with `dynamo-cp recommendations show {args.id}`")
        emit(rec, args.output, _rec_table)
        return code
    body: dict = {"graph": args.graph}
    for key in ("ttft_ms", "itl_ms"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    try:
        runs = [int(r) for r in args.runs.split(",") if r.strip()]
    except ValueError:
        from .exits import CliError

        raise CliError(exits.USAGE, f"--runs: run ids separated by commas, not {args.runs!r}") from None
    if runs:
        body["runs"] = runs
    emit(client.post("/api/benchmarks/recommendations/", json=body), args.output, _rec_table)
    return exits.OK
