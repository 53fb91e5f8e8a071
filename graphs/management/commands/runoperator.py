"""Run the local operator: reconciles local-runtime graphs into Dynamo processes."""

from django.core.management.base import BaseCommand

from graphs.runtimes.localoperator import LocalOperator


class Command(BaseCommand):
    help = "Run the local runtime's operator (Ctrl-C stops it and every process it started)."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=1.0)

    def handle(self, *args, interval, **opts):
        operator = LocalOperator()
        self.stdout.write(f"local operator running (gpu engine: {'yes' if operator.use_gpu else 'no, mocker'})")
        operator.run_forever(interval=interval)
