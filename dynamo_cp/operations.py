"""dynamo-cp operations list|show|wait: applies, scales and deletes, as the audit trail."""

from __future__ import annotations

from . import exits, wait
from .client import Client
from .output import emit, table


def add_parsers(sub, common) -> None:
    ops = sub.add_parser("operations", help="applies, scales and deletes", parents=[common])
    verbs = ops.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser("list", help="recent operations, newest first", parents=[common])
    p.add_argument("--graph", help="only this graph's")
    p.add_argument("--state", choices=["pending", "running", "succeeded", "failed"])
    p.add_argument("--limit", type=int, default=50)
    p = verbs.add_parser("show", help="one operation", parents=[common])
    p.add_argument("id", type=int)
    p = verbs.add_parser("wait", help="wait for an operation to finish (exit 0 succeeded, 1 failed, 7 timeout)",
                         parents=[common])
    p.add_argument("id", type=int)
    p.add_argument("--timeout", type=wait.seconds, default=300, help="seconds to wait (default 300)")


def _table(ops: list[dict]) -> str:
    return table(["ID", "GRAPH", "KIND", "STATE", "BY", "VIA", "CREATED", "RESULT"],
                 [[o["id"], o["graph"], o["kind"], o["state"], o.get("requested_by"), o.get("via"),
                   (o.get("created_at") or "")[:19], (o.get("result") or "")[:60]] for o in ops])


def run(args, client: Client) -> int:
    if args.verb == "list":
        rows = client.pages("/api/operations/", {"graph": args.graph, "state": args.state}, limit=args.limit)
        emit(rows[: args.limit], args.output, _table)
        return exits.OK
    fetch = lambda: client.get(f"/api/operations/{args.id}/")  # noqa: E731
    if args.verb == "show":
        op = fetch()
        emit(op, args.output, lambda o: _table([o]))
        return exits.OK
    op, code = wait.follow(fetch, describe=wait.describe_operation, done=wait.OPERATION_DONE, timeout=args.timeout,
                           progress=args.progress, hint=f"wait again with `dynamo-cp operations wait {args.id}`")
    emit(op, args.output, lambda o: _table([o]))
    return code
