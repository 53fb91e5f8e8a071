"""Run the control plane's Prometheus server for local graphs.

Writes prometheus.yml and the targets file (metrics/localprom.py), starts the prometheus
binary on 127.0.0.1:PROMETHEUS_LOCAL_PORT with its data in PROMETHEUS_DIR/data, and keeps
the targets in line with the local graphs' pods every two seconds (the local operator also
does it on every loop). With --exec it replaces itself with Prometheus instead, and targets
are then kept only by the operator."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from metrics import localprom

SYNC_SECONDS = 2.0


class Command(BaseCommand):
    help = "Run Prometheus for local graphs (file-based service discovery of their pods)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=settings.PROMETHEUS_LOCAL_PORT)
        parser.add_argument("--dir", default=str(settings.PROMETHEUS_DIR), help="config and data folder")
        parser.add_argument("--scrape-interval", type=int, default=settings.PROMETHEUS_SCRAPE_INTERVAL)
        parser.add_argument("--retention", default=settings.PROMETHEUS_RETENTION)
        parser.add_argument("--exec", action="store_true", dest="exec_", help="exec prometheus; do not sync targets")

    def handle(self, *args, port, dir, scrape_interval, retention, exec_, **opts):
        binary = localprom.find_binary()
        if binary is None:
            raise CommandError(
                f"No Prometheus binary ({settings.PROMETHEUS_BINARY!r} is not on PATH). Install it "
                "(Debian/Ubuntu: apt-get install prometheus) or set PROMETHEUS_BINARY to its path. "
                "Without it the graph pages show no latency charts; everything else works.")
        config = localprom.write_config(dir, scrape_interval=scrape_interval)
        self._sync(dir)
        storage = localprom.prometheus_dir(dir) / "data"
        storage.mkdir(parents=True, exist_ok=True)
        argv = localprom.server_argv(binary, config=config, port=port, storage=storage, retention=retention)
        self.stdout.write(f"Prometheus for local graphs on http://127.0.0.1:{port} (config {config})")
        sys.stdout.flush()
        if exec_:
            os.execv(binary, argv)  # noqa: S606 - the binary found above, argv of our own
        proc = subprocess.Popen(argv)
        stop = {"signal": None}

        def forward(signum, _frame):
            stop["signal"] = signum
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        while proc.poll() is None:
            if stop["signal"] is None:
                self._sync(dir)
            deadline = time.monotonic() + SYNC_SECONDS
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        if stop["signal"] is None and proc.returncode:
            raise CommandError(f"prometheus exited with status {proc.returncode}")

    def _sync(self, directory: str) -> None:
        try:
            close_old_connections()
            localprom.sync_targets(directory)
        except Exception as exc:  # a locked or unmigrated database must not stop the scraping
            self.stderr.write(f"could not refresh the scrape targets: {exc}")
