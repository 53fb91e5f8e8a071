"""The benchmark CLI for scripts: python manage.py benchmarks run|list|show|cancel.

`run` records a run and (with --wait) follows it to the end, printing its results; exit
status 0 when it succeeded, non-zero with the reason otherwise."""

from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError

from accounts.cli import acting_user
from accounts.roles import Role
from benchmarks import services
from benchmarks.errors import BenchmarkRefused
from benchmarks.models import BenchmarkRun
from benchmarks.profiles import PROFILES, ProfileError
from graphs.models import Graph

PARAMS = {"concurrency": int, "request_count": int, "input_tokens_mean": int, "output_tokens_mean": int,
          "request_rate": float, "duration_s": float, "max_seconds": int}


# The role each verb needs with --user, as in the UI and the API.
VERB_ROLES = {"list": Role.VIEWER, "show": Role.VIEWER, "run": Role.OPERATOR, "cancel": Role.OPERATOR}


class Command(BaseCommand):
    help = "Run aiperf benchmarks against a graph's frontend, list and show their results, cancel them."

    def add_arguments(self, parser):
        parser.add_argument("--user", help="act as this user, with that user's role (default: as the server "
                                           "administrator, recorded so in the audit log)")
        sub = parser.add_subparsers(dest="verb", required=True)
        p = sub.add_parser("run", help="benchmark a running graph")
        p.add_argument("graph")
        p.add_argument("--profile", default="short", choices=list(PROFILES))
        for name, kind in PARAMS.items():
            p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind)
        p.add_argument("--sweep", help="concurrencies, e.g. 1,2,4")
        p.add_argument("--wait", type=float, default=0, help="seconds to follow the run")
        p = sub.add_parser("list", help="recent runs")
        p.add_argument("--graph")
        p = sub.add_parser("show", help="one run's results")
        p.add_argument("id", type=int)
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("cancel", help="stop a run")
        p.add_argument("id", type=int)

    def handle(self, *args, verb, **opts):
        self.user = acting_user(opts.get("user"), needs=VERB_ROLES[verb], action=f"benchmarks {verb}")
        try:
            getattr(self, f"do_{verb}")(**opts)
        except ProfileError as exc:
            for field, messages in exc.errors.items():
                self.stderr.write(f"{field}: {' '.join(messages)}")
            raise CommandError("invalid benchmark parameters") from None
        except BenchmarkRefused as exc:
            raise CommandError(str(exc)) from None

    def _run(self, pk: int) -> BenchmarkRun:
        run = BenchmarkRun.objects.select_related("graph").filter(pk=pk).first()
        if run is None:
            raise CommandError(f"no benchmark run #{pk}")
        return run

    def do_run(self, graph, profile, wait=0, sweep=None, **opts):
        target = Graph.objects.filter(name=graph).first()
        if target is None:
            raise CommandError(f"no graph named {graph!r}")
        params = {k: opts[k] for k in PARAMS if opts.get(k) is not None}
        if sweep:
            try:
                params["sweep"] = [int(x) for x in sweep.replace(" ", ",").split(",") if x]
            except ValueError:
                raise CommandError("--sweep takes whole numbers separated by commas, like 1,2,4") from None
        run = services.benchmark_request(graph=target, profile=profile, params=params, user=self.user, via="cli")
        self.stdout.write(f"benchmark run #{run.pk} of {graph}: {run.state}")
        if not wait:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            run.refresh_from_db()
            if not run.is_active:
                break
            time.sleep(1)
        self.do_show(run.pk)
        if run.is_active:
            raise CommandError(f"run #{run.pk} still {run.state} after {wait:g}s")
        if run.state != "succeeded":
            raise CommandError(run.error or f"run #{run.pk} {run.state}")

    def do_list(self, graph=None, **opts):
        runs = BenchmarkRun.objects.select_related("graph").order_by("-created_at")
        if graph:
            runs = runs.filter(graph__name=graph)
        header = f"{'ID':>5} {'GRAPH':<24} {'PROFILE':<8} {'STATE':<10} {'TTFT p90 ms':>12} {'ITL p90 ms':>11}"
        self.stdout.write(header)
        for run in runs[:50]:
            steps = run.run_results.steps
            last = steps[-1] if steps else None
            ttft = f"{last.ttft.p90:.1f}" if last and last.ttft.p90 is not None else "-"
            itl = f"{last.itl.p90:.2f}" if last and last.itl.p90 is not None else "-"
            self.stdout.write(f"{run.pk:>5} {run.graph.name:<24} {run.profile:<8} {run.state:<10} {ttft:>12} {itl:>11}")

    def do_show(self, id, json_out=False, **opts):
        run = self._run(id)
        results = run.run_results
        if opts.get("json"):
            self.stdout.write(json.dumps({"id": run.pk, "graph": run.graph.name, "state": run.state,
                                         "error": run.error, "results": run.results}, indent=2))
            return
        self.stdout.write(f"run #{run.pk} of {run.graph.name} ({run.profile}): {run.state}")
        if run.error:
            self.stdout.write(f"  {run.error}")
        for step in results.steps:
            load = f"concurrency {step.concurrency}" if step.concurrency else f"rate {step.request_rate}/s"
            self.stdout.write(
                f"  {load}: TTFT p50/p90/p99 {step.ttft.p50:.1f}/{step.ttft.p90:.1f}/{step.ttft.p99:.1f} ms, "
                f"ITL p50/p90/p99 {step.itl.p50:.2f}/{step.itl.p90:.2f}/{step.itl.p99:.2f} ms, "
                f"{step.output_token_throughput or 0:.0f} output tokens/s, {step.completed} requests"
                if step.ttft.p50 is not None and step.itl.p50 is not None else f"  {load}: no results")
        if results.token_counts:
            counts = results.token_counts
            self.stdout.write(f"  tokens counted by the {counts.source} ({counts.tokenizer})")

    def do_cancel(self, id, **opts):
        run = services.benchmark_cancel(run=self._run(id), user=self.user, via="cli")
        self.stdout.write(f"run #{run.pk}: {run.state}")
