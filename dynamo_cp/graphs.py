"""dynamo-cp graphs list|import|export|validate|apply|rollback|scale|delete|status."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from . import exits, wait
from .client import Client, finding_line
from .exits import CliError
from .output import emit, say, table

MAX_FILE_BYTES = 4 * 1024 * 1024  # the server refuses more (MAX_MANIFEST_BYTES is 1 MiB by default)


def add_parsers(sub, common) -> None:
    graphs = sub.add_parser("graphs", help="graph definitions and what runs them", parents=[common])
    verbs = graphs.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser("list", help="list graphs with their revision and state", parents=[common])
    p.add_argument("--search", help="text in the graph's name, description or model (any case)")
    p.add_argument("--namespace", help="only graphs deployed in this Kubernetes namespace")
    p.add_argument("--cluster", help="only graphs deployed on this registered cluster")
    p.add_argument("--runtime", choices=["local", "kubernetes"], help="only graphs running on this runtime")
    p.add_argument("--state", help="only graphs in this state (ready, progressing, degraded, failed, deleting, "
                                   "unknown, not_deployed)")
    p.add_argument("-l", "--label", help="only graphs whose DynamoGraphDeployment labels meet this selector, as "
                                         "kubectl get -l reads it (team=ml,tier!=dev, 'tier in (a,b)', !canary)")
    p.add_argument("--archived", action="store_true", help="the archived graphs (A/B study variants) instead")
    p.add_argument("--limit", type=int, default=10_000, help="at most this many rows (default 10000)")
    p = verbs.add_parser("import", help="create a graph from a manifest, or add a revision to it", parents=[common])
    p.add_argument("file", help="a YAML file (a DynamoGraphDeployment, either API version, and the objects beside "
                                "it), a kustomize directory (built with kubectl kustomize), or - for stdin")
    p.add_argument("--dynamo-version", help="the Dynamo release to validate against (default: the manifest's)")
    p = verbs.add_parser("export", help="print a revision's manifest as YAML", parents=[common])
    p.add_argument("name")
    p.add_argument("--api-version", default="",
                   help="nvidia.com/v1beta1 or v1alpha1 (default: the one the graph was imported in, else the one "
                        "its Dynamo release serves)")
    p.add_argument("--revision", type=int, help="default: the latest")
    p.add_argument("--dynamo-version")
    p = verbs.add_parser("validate", help="validate a manifest; stores nothing", parents=[common])
    p.add_argument("file", help="a YAML file, a kustomize directory, or - for stdin")
    p.add_argument("--dynamo-version")
    p.add_argument("--strict", action="store_true", help="warnings fail too")
    p = verbs.add_parser("apply", help="apply a graph's latest (or given) revision to a runtime", parents=[common])
    p.add_argument("name")
    p.add_argument("--runtime", default="local", choices=["local", "kubernetes"])
    p.add_argument("--cluster", default="", help="kubernetes runtime: a registered cluster")
    p.add_argument("--namespace", default="", help="kubernetes runtime: a namespace the cluster allows")
    p.add_argument("--revision", type=int)
    p.add_argument("--api-version", default="", help="default: the one the graph was imported in, else the one its "
                                                     "Dynamo release serves")
    p.add_argument("--dry-run", action="store_true", help="preview: a server-side dry run and its diff")
    p.add_argument("--force", action="store_true",
                   help="kubernetes: take the fields another field manager owns (the result names them)")
    p.add_argument("--recreate", metavar="NAME",
                   help="kubernetes: delete and recreate the DGD when its components changed (the operator refuses "
                        "that update); give the graph's name to confirm the downtime")
    _wait_args(p)
    p = verbs.add_parser("rollback", help="run an earlier revision again in one step: it becomes the new head and "
                                          "is applied where the graph runs, with the runtime's rolling rules",
                         parents=[common])
    p.add_argument("name")
    p.add_argument("revision", type=int, help="the revision to run again")
    p.add_argument("--dry-run", action="store_true", help="show the diff against what runs; write nothing")
    p.add_argument("--force", action="store_true",
                   help="kubernetes: even in the middle of a rollout (the operator deletes the generation that serves)")
    _wait_args(p)
    p = verbs.add_parser("scale", help="set one pool's replicas (the other pools are not touched)", parents=[common])
    p.add_argument("name")
    p.add_argument("service", help="the pool, e.g. decode")
    p.add_argument("replicas", type=int)
    p.add_argument("--force", action="store_true", help="scale even a pool that Dynamo's Planner manages")
    _wait_args(p)
    p = verbs.add_parser("delete", help="stop everything the graph runs; --definition also deletes the graph",
                         parents=[common])
    p.add_argument("name")
    p.add_argument("--definition", action="store_true",
                   help="then delete the stored definition and its revisions too (implies --wait)")
    _wait_args(p)
    p = verbs.add_parser("status", help="state, message, pods and recent events", parents=[common])
    p.add_argument("name")
    p.add_argument("--wait-ready", action="store_true", help="wait until the graph is ready (exit 1 if it fails)")
    p.add_argument("--timeout", type=wait.seconds, default=300, help="seconds --wait-ready waits (default 300)")


def _wait_args(p) -> None:
    p.add_argument("--wait", action="store_true", help="wait for the operation to finish, showing its progress")
    p.add_argument("--timeout", type=wait.seconds, default=300, help="seconds --wait waits (default 300)")


def run(args, client: Client) -> int:
    return globals()[f"do_{args.verb}"](args, client)


def _read(name: str) -> bytes:
    """The manifest file ``name`` names: ``-`` is stdin, a pipe (``<(...)``, /dev/fd/N) is read as a
    file is, and a kustomize directory is built here with kubectl kustomize (as ``kubectl apply -k``)."""
    if name == "-":
        return _bounded(sys.stdin.buffer, "stdin")
    path = Path(name)
    if path.is_dir():
        return _kustomize(path)
    try:
        with open(path, "rb") as handle:  # a regular file, or a pipe from process substitution
            return _bounded(handle, name)
    except FileNotFoundError:
        raise CliError(exits.USAGE, f"{name}: no such file or directory") from None
    except OSError as exc:
        raise CliError(exits.USAGE, f"{name}: {exc.strerror or exc}") from None


def _bounded(handle, name: str) -> bytes:
    data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise CliError(exits.USAGE, f"{name}: more than {MAX_FILE_BYTES:,} bytes is more than a manifest can be")
    return data


KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
KUSTOMIZE_TIMEOUT = 60


def _kustomize(path: Path) -> bytes:
    """``kubectl kustomize DIR`` here, with the user's own kubectl (remote bases are theirs to
    allow, as with ``kubectl apply -k``); the server judges what it prints like any manifest."""
    if not any((path / name).is_file() for name in KUSTOMIZATION_FILES):
        raise CliError(exits.USAGE, f"{path}: a directory without kustomization.yaml; give a manifest file, or a "
                                    "kustomize directory")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise CliError(exits.USAGE, f"{path} is a kustomize directory and kubectl is not on PATH: install kubectl, "
                                    "or build it yourself (kubectl kustomize DIR | dynamo-cp graphs import -)")
    try:
        done = subprocess.run([kubectl, "kustomize", "--", str(path.resolve())], capture_output=True,
                              timeout=KUSTOMIZE_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise CliError(exits.FAILED, f"kubectl kustomize {path}: no result in {KUSTOMIZE_TIMEOUT} s") from None
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()[-4:]
        raise CliError(exits.INVALID, f"kubectl kustomize {path} failed: " + " ".join(lines))
    if len(done.stdout) > MAX_FILE_BYTES:
        raise CliError(exits.USAGE, f"kubectl kustomize {path}: more than {MAX_FILE_BYTES:,} bytes")
    return done.stdout


def do_list(args, client: Client) -> int:
    if args.limit < 1:
        raise CliError(exits.USAGE, "--limit must be 1 or more")
    params = {name: getattr(args, name) for name in ("search", "namespace", "cluster", "runtime", "state", "label")
              if getattr(args, name)}
    if args.archived:
        params["archived"] = "true"
    rows = client.pages("/api/graphs/", params=params, limit=args.limit)[:args.limit]
    emit(rows, args.output, lambda rs: table(
        ["NAME", "REV", "BACKEND", "DYNAMO", "STATE", "MODEL"],
        [[g["name"], g.get("revision"), g.get("backend"), g.get("dynamo_version"), g.get("state"), g.get("model")]
         for g in rs]))
    return exits.OK


def do_import(args, client: Client) -> int:
    graph = client.post("/api/graphs/import/", content=_read(args.file), content_type="application/yaml",
                        params={"dynamoVersion": args.dynamo_version})
    emit(graph, args.output,
         lambda g: f"{g['name']}: revision {g['revision']}{' (unchanged)' if g.get('unchanged') else ''}")
    return exits.OK


def do_export(args, client: Client) -> int:
    params = {"apiVersion": args.api_version, "revision": args.revision, "dynamoVersion": args.dynamo_version}
    if args.output == "json":
        emit(client.get(f"/api/graphs/{args.name}/render/", params=params)["manifest"], "json")
    else:
        # YAML, or JSON when it is an error (DRF answers 406 to an Accept it cannot meet).
        accept = "application/yaml, application/json;q=0.9, */*;q=0.1"
        text = client.request("GET", f"/api/graphs/{args.name}/export/", params=params, accept=accept).text
        sys.stdout.write(text)
    return exits.OK


def do_validate(args, client: Client) -> int:
    report = client.post("/api/validate/", content=_read(args.file), content_type="application/yaml",
                         params={"dynamoVersion": args.dynamo_version})
    counts = report.get("counts", {})
    failed = not report.get("valid") or (args.strict and counts.get("warning"))
    if args.output == "table":
        for finding in report.get("findings", []):
            say(finding_line(finding))
        summary = (f"{counts.get('error', 0)} error(s), {counts.get('warning', 0)} warning(s), "
                   f"{counts.get('info', 0)} note(s)")
        emit(report, "table", lambda _r: ("invalid: " if failed else "valid: ") + summary)
    else:
        emit(report, args.output)
    return exits.INVALID if failed else exits.OK


def _operation(args, client: Client, op: dict) -> int:
    """Print the operation (or, with --wait, follow it to its end) and return the exit status."""
    code = exits.OK
    if args.wait:
        op, code = wait.follow(lambda: client.get(f"/api/operations/{op['id']}/"), describe=wait.describe_operation,
                               done=wait.OPERATION_DONE, timeout=args.timeout, progress=args.progress,
                               hint=f"follow it with `dynamo-cp operations wait {op['id']}`")
    emit(op, args.output, lambda o: wait.describe_operation(o, 0).replace(" (0s)", "")
         + (f"\n{o['diff']}" if o.get("diff") else ""))
    return code


def do_apply(args, client: Client) -> int:
    body = {"runtime": args.runtime, "cluster": args.cluster, "namespace": args.namespace,
            "dry_run": args.dry_run, "force": args.force,
            **({"apiVersion": args.api_version} if args.api_version else {})}
    if args.recreate is not None:
        body.update(recreate=True, confirm=args.recreate)
    if args.revision is not None:
        body["revision"] = args.revision
    return _operation(args, client, client.post(f"/api/graphs/{args.name}/apply/", json=body))


def do_rollback(args, client: Client) -> int:
    body = {"revision": args.revision, "dry_run": args.dry_run, "force": args.force}
    return _operation(args, client, client.post(f"/api/graphs/{args.name}/rollback/", json=body))


def do_scale(args, client: Client) -> int:
    body = {"service": args.service, "replicas": args.replicas, "force": args.force}
    return _operation(args, client, client.post(f"/api/graphs/{args.name}/scale/", json=body))


def do_delete(args, client: Client) -> int:
    status = client.get(f"/api/graphs/{args.name}/status/")
    if status.get("deployed"):
        if args.definition:
            args.wait = True
        code = _operation(args, client, client.post(f"/api/graphs/{args.name}/undeploy/"))
        if code != exits.OK:
            return code
    elif not args.definition:
        say(f"{args.name} is not deployed: nothing to stop (--definition deletes the graph itself)")
        return exits.OK
    if args.definition:
        client.delete(f"/api/graphs/{args.name}/")
        say(f"{args.name}: definition and revisions deleted")
    return exits.OK


def _status_table(snap: dict) -> str:
    age = f", seen {snap['age_seconds']:.0f}s ago" if snap.get("age_seconds") is not None else ""
    lines = [f"{snap['graph']}: {snap['state']}{age}" + (f"  {snap['message']}" if snap.get("message") else "")]
    if snap.get("endpoint"):
        lines.append(f"frontend: {snap['endpoint']}")
    if snap.get("router_mode"):
        lines.append(f"router: {snap['router_mode']}")
    if snap.get("simulation"):  # as the JSON says it: which workers are Dynamo's mocker, and why
        sim = snap["simulation"]
        lines.append(f"{sim['label']} ({', '.join(sim['services'])}): {sim['reason']}")
    if snap.get("pods"):
        simulated = set((snap.get("simulation") or {}).get("services") or [])
        lines.append(table(["NAME", "READY", "STATUS", "RESTARTS", "POOL", "ENGINE"],
                           [[p["name"], "1/1" if p["ready"] else "0/1", p["phase"], p["restarts"], p["service"],
                             "mocker (simulated)" if p["service"] in simulated else ""]
                            for p in snap["pods"]]).rstrip())
    return "\n".join(lines)


def do_status(args, client: Client) -> int:
    fetch = lambda: client.get(f"/api/graphs/{args.name}/status/")  # noqa: E731
    if not args.wait_ready:
        emit(fetch(), args.output, _status_table)
        return exits.OK

    def describe(snap, elapsed):
        ready = sum(1 for p in snap.get("pods", []) if p.get("ready"))
        return (f"{snap['graph']}: {snap['state']}, {ready}/{len(snap.get('pods', []))} pods ready ({elapsed:.0f}s)"
                + (f"  {snap['message']}" if snap.get("message") else ""))

    snap, code = wait.follow(fetch, describe=describe, done={"ready": exits.OK, "failed": exits.FAILED},
                             timeout=args.timeout, progress=args.progress,
                             hint=f"see why with `dynamo-cp graphs status {args.name}`")
    emit(snap, args.output, _status_table)
    return code
