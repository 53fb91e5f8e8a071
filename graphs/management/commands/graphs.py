"""The CLI for scripts: python manage.py graphs list|import|export|validate|apply|scale|delete|status.

Exit status 0 on success; non-zero with every finding on stderr otherwise."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from accounts.cli import acting_user
from accounts.roles import Role
from graphs import operations, services
from graphs.dgd.render import normalise_api_version
from graphs.dgd.versions import DynamoVersion
from graphs.errors import ManifestError, OperationRefused
from graphs.findings import Severity
from graphs.models import Graph, Operation
from graphs.specio import dump_yaml, load_yaml
from graphs.validation import validate_manifest

# The role each verb needs with --user, as in the UI and the API: reads for viewers, the rest
# for operators.
VERB_ROLES = {"list": Role.VIEWER, "export": Role.VIEWER, "validate": Role.VIEWER, "status": Role.VIEWER,
              "import": Role.OPERATOR, "apply": Role.OPERATOR, "scale": Role.OPERATOR, "delete": Role.OPERATOR}


class Command(BaseCommand):
    help = "Manage graphs: list, import, export, validate, apply, scale, delete, status."

    def add_arguments(self, parser):
        parser.add_argument("--user", help="act as this user, with that user's role (default: as the server "
                                           "administrator, recorded so in the audit log)")
        sub = parser.add_subparsers(dest="verb", required=True)
        sub.add_parser("list", help="list graphs")
        p = sub.add_parser("import", help="create a graph from a manifest, or add a revision")
        p.add_argument("file", help="a YAML file, or - for stdin")
        p.add_argument("--dynamo-version")
        p.add_argument("--message", default="")
        p = sub.add_parser("export", help="print a revision's manifest as YAML")
        p.add_argument("name")
        p.add_argument("--api-version", default="", help="default: the revision's own")
        p.add_argument("--revision", type=int)
        p.add_argument("--dynamo-version")
        p = sub.add_parser("validate", help="validate a manifest without storing it")
        p.add_argument("file")
        p.add_argument("--dynamo-version")
        p.add_argument("--strict", action="store_true", help="fail on warnings too")
        p = sub.add_parser("apply", help="apply a graph's latest (or given) revision")
        p.add_argument("name")
        p.add_argument("--runtime", default="local")
        p.add_argument("--cluster", default="", help="kubernetes runtime: a registered cluster")
        p.add_argument("--namespace", default="", help="kubernetes runtime: a namespace the cluster allows")
        p.add_argument("--revision", type=int)
        p.add_argument("--api-version", default="", help="default: the revision's own")
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--force", action="store_true",
                       help="kubernetes: take the fields other field managers own (the result names each)")
        p.add_argument("--recreate", metavar="GRAPH_NAME", default="",
                       help="kubernetes: delete and recreate the DGD when the revision adds or removes components "
                            "(stops the whole graph); give the graph's name to confirm")
        p.add_argument("--wait", type=float, default=0, help="seconds to wait for the operation to finish")
        p = sub.add_parser("scale", help="set one pool's replicas")
        p.add_argument("name")
        p.add_argument("service")
        p.add_argument("replicas")
        p.add_argument("--force", action="store_true", help="scale even a pool Dynamo's Planner manages")
        p.add_argument("--wait", type=float, default=0)
        p = sub.add_parser("delete", help="stop everything the graph runs (the definition stays)")
        p.add_argument("name")
        p.add_argument("--wait", type=float, default=0)
        p = sub.add_parser("status", help="state, pods and events from the status cache")
        p.add_argument("name")
        p.add_argument("--json", action="store_true")

    def handle(self, *args, verb, **opts):
        self.user = acting_user(opts.get("user"), needs=VERB_ROLES[verb], action=f"graphs {verb}")
        try:
            getattr(self, f"do_{verb}")(**opts)
        except ManifestError as exc:
            self._findings(exc.findings)
            raise CommandError(f"{len(exc.findings)} problem(s); nothing was stored") from None
        except (OperationRefused, services.GraphConflict) as exc:
            raise CommandError(str(exc)) from None

    def _graph(self, name: str) -> Graph:
        graph = Graph.objects.select_related("head").filter(name=name).first()
        if graph is None:
            raise CommandError(f"no graph named {name!r}")
        return graph

    def _read(self, file: str) -> tuple[object, str]:
        limit = settings.MAX_MANIFEST_BYTES
        if file == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            path = Path(file)
            if not path.is_file():
                raise CommandError(f"{file}: no such file")
            if path.stat().st_size > limit:
                raise CommandError(f"{file}: {path.stat().st_size:,} bytes; the limit is {limit:,}")
            data = path.read_bytes()
        obj = load_yaml(data, max_bytes=limit)
        return obj, data.decode("utf-8", errors="replace")

    def _version(self, value):
        if not value:
            return None
        try:
            return str(DynamoVersion.parse(value))
        except ValueError as exc:
            raise CommandError(str(exc)) from None

    def _findings(self, findings):
        for f in findings:
            line = f"{f.severity.value}: {f.path or '(manifest)'}: {f.message}"
            if f.fix:
                line += f" (fix: {f.fix})"
            self.stderr.write(line)

    def do_list(self, **opts):
        rows = Graph.objects.select_related("head", "deployment").order_by("name")
        self.stdout.write(f"{'NAME':<32} {'REV':>4} {'BACKEND':<8} {'DYNAMO':<8} STATE")
        for g in rows:
            spec = g.head.spec if g.head else {}
            state = getattr(g, "deployment", None).state if hasattr(g, "deployment") else "not_deployed"
            self.stdout.write(f"{g.name:<32} {g.head.number if g.head else '-':>4} {spec.get('backend', ''):<8} "
                              f"{spec.get('dynamo_version', ''):<8} {state}")

    def do_import(self, file, dynamo_version=None, message="", **opts):
        obj, text = self._read(file)
        graph, revision, report = services.graph_import(obj=obj, user=self.user, text=text, via="cli",
                                                        dynamo_version=self._version(dynamo_version),
                                                        message=message)
        self._findings([f for f in report.findings if f.severity != Severity.INFO])
        self.stdout.write(f"{graph.name}: revision {revision.number}")

    def do_export(self, name, api_version, revision=None, dynamo_version=None, **opts):
        graph = self._graph(name)
        rev = graph.head if revision is None else graph.revisions.filter(number=revision).first()
        if rev is None:
            raise CommandError(f"{name} has no revision {revision}")
        try:
            api_version = normalise_api_version(api_version) if api_version else rev.api_version
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(dump_yaml(services.revision_manifest(rev, api_version, self._version(dynamo_version))),
                          ending="")

    def do_validate(self, file, dynamo_version=None, strict=False, **opts):
        obj, _text = self._read(file)
        report = validate_manifest(obj, dynamo_version=self._version(dynamo_version))
        self._findings(report.findings)
        c = report.counts()
        failed = not report.ok or (strict and c["warning"])
        summary = f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s)"
        if failed:
            raise CommandError(f"invalid: {summary}")
        self.stdout.write(f"valid: {summary}")

    def _wait(self, op: Operation, seconds: float) -> None:
        self.stdout.write(f"operation #{op.pk}: {op.kind} {op.state}")
        if not seconds:
            return
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            op.refresh_from_db()
            if not op.is_active:
                break
            time.sleep(0.5)
        self.stdout.write(f"operation #{op.pk}: {op.state}{': ' + op.result if op.result else ''}")
        if op.state == "failed":
            raise CommandError(op.result or "operation failed")
        if op.is_active:
            raise CommandError(f"operation #{op.pk} still {op.state} after {seconds:g}s")

    def do_apply(self, name, runtime, revision=None, api_version="", dry_run=False, wait=0,
                 cluster="", namespace="", force=False, recreate="", **opts):
        op = operations.graph_apply(graph=self._graph(name), user=self.user, via="cli", runtime=runtime,
                                      revision_number=revision, api_version=api_version or None, dry_run=dry_run,
                                      cluster=cluster, namespace=namespace, force=force, recreate=bool(recreate),
                                      confirm=recreate)
        self._wait(op, wait)
        if dry_run and wait:
            op.refresh_from_db()
            self.stdout.write(op.diff or "(no difference)")

    def do_scale(self, name, service, replicas, wait=0, force=False, **opts):
        try:
            count = int(replicas)
        except ValueError:
            raise CommandError(f"replicas must be a whole number, not {replicas!r}") from None
        op = operations.graph_scale(graph=self._graph(name), user=self.user, via="cli", service=service,
                                      replicas=count, force=force)
        self._wait(op, wait)

    def do_delete(self, name, wait=0, **opts):
        op = operations.graph_undeploy(graph=self._graph(name), user=self.user, via="cli")
        self._wait(op, wait)

    def do_status(self, name, json_out=False, **opts):
        snap = operations.status_snapshot(self._graph(name))
        if opts.get("json"):
            self.stdout.write(json.dumps(snap, indent=2))
            return
        age = f", seen {snap['age_seconds']}s ago" if snap["age_seconds"] is not None else ""
        self.stdout.write(f"{snap['graph']}: {snap['state']}{age}  {snap['message']}")
        if snap["endpoint"]:
            self.stdout.write(f"frontend: {snap['endpoint']}")
        if snap["router_mode"]:
            self.stdout.write(f"router: {snap['router_mode']}")
        self.stdout.write(f"{'NAME':<40} {'READY':<6} {'STATUS':<18} {'RESTARTS':>8}  POOL")
        for p in snap["pods"]:
            self.stdout.write(f"{p['name']:<40} {'1/1' if p['ready'] else '0/1':<6} {p['phase']:<18} "
                              f"{p['restarts']:>8}  {p['service']}")
