"""Run the local operator: reconciles local-runtime graphs into Dynamo processes. Beside it,
in threads, the cluster watchers feed the status cache of Kubernetes graphs."""

from django.core.management.base import BaseCommand

from graphs.runtimes.kubernetes.watch import start_cluster_watchers
from graphs.runtimes.local.operator import LocalOperator
from metrics.localprom import sync_targets


class Command(BaseCommand):
    help = "Run the local runtime's operator (Ctrl-C stops it and every process it started)."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument("--no-cluster-watchers", action="store_true",
                            help="do not watch the registered Kubernetes clusters")

    def handle(self, *args, interval, no_cluster_watchers=False, **opts):
        operator = LocalOperator()
        if not no_cluster_watchers:
            start_cluster_watchers()
            self.stdout.write("cluster watchers running")
        self.stdout.write(f"local operator running (vLLM graphs run: {operator.host.vllm_engine()})")
        operator.run_forever(interval=interval, after_pass=sync_targets)  # scrape targets of local graphs
