"""Run once after restoring the database from a backup, before starting the workers.

A backup taken while the control plane ran may hold operations and benchmark runs that were
pending or running. Their workers are gone, and the cluster (or this host) may have moved on
since the dump: re-running an apply recorded then would push an old revision over whatever
runs now. So they end failed, saying why, and nothing is re-applied. The graphs themselves
need nothing: the status cache is re-observed (the cluster watchers list every DGD again, the
local operator reports its processes), and the deployment rows keep the desired state the
product recorded, which is what the next apply or scale starts from."""

from django.core.management.base import BaseCommand

from audit.services import audit_record
from benchmarks.models import BenchmarkRun
from graphs.models import Operation

WHY = ("interrupted: the control plane was restored from a backup taken while this ran; "
       "ask for it again if it is still wanted")


class Command(BaseCommand):
    help = "After a restore: end the operations and benchmark runs the backup caught unfinished (never re-run them)."

    def handle(self, *args, **opts):
        ops = Operation.end_unfinished("failed", result=WHY)
        runs = BenchmarkRun.end_unfinished("failed", error=WHY, pgid=None, progress_text="failed")
        audit_record(via="system", action="controlplane.restore", target_type="controlplane", target="database",
                     after={"operations_ended": ops, "benchmark_runs_ended": runs}, message=WHY)
        self.stdout.write(f"ended {len(ops)} unfinished operation(s) and {len(runs)} benchmark run(s); "
                          "nothing was re-applied")
