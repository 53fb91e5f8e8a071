"""Start the whole product on this machine: web (ASGI), Celery worker with beat, the local
operator and, where installed, Prometheus for local graphs. Applies the example graph and
waits until it serves. Ctrl-C stops everything, Dynamo processes included."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from graphs.errors import OperationRefused
from graphs.models import Deployment, Graph
from metrics.localprom import find_binary


class Command(BaseCommand):
    help = "Set up the database and start web, worker and operator; apply the example graph."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--no-example", action="store_true", help="do not apply the example graph")
        parser.add_argument("--password", default=os.environ.get("CONTROLPLANE_ADMIN_PASSWORD", "admin"))

    def handle(self, *args, port, host, no_example, password, **opts):
        call_command("migrate", verbosity=0)
        call_command("bootstrap", admin_password=password, demo_users=True)
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # The processes' metric files (/metrics) start empty with every start of the product.
        shutil.rmtree(settings.METRICS_MULTIPROC_DIR, ignore_errors=True)
        Path(settings.METRICS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
        py = sys.executable
        commands = {
            # One web process per core: a Django page is CPU-bound Python, one process serves one at a time.
            "web": [py, "-m", "uvicorn", "controlplane.asgi:application", "--host", host, "--port", str(port),
                    "--no-access-log", "--workers", str(settings.WEB_WORKERS)],
            "worker": [py, "-m", "celery", "-A", "controlplane", "worker", "-B", "--concurrency", "2",
                       "--loglevel", "INFO", "--schedule", str(Path(settings.VAR_DIR) / "celerybeat-schedule")],
            "operator": [py, "manage.py", "runoperator"],
        }
        # Prometheus scrapes local graphs for the latency charts. It is optional: without the
        # binary everything else works and the charts say that Prometheus is unreachable.
        optional = {"prometheus"}
        if find_binary():
            commands["prometheus"] = [py, "manage.py", "runprometheus"]
        else:
            self.stderr.write(
                f"Prometheus is not installed ({settings.PROMETHEUS_BINARY!r} is not on PATH), so local graphs get "
                "no latency charts. Install it (Debian/Ubuntu: apt-get install prometheus) or set PROMETHEUS_BINARY; "
                f"or point PROMETHEUS_URL at a server that scrapes them (now {settings.PROMETHEUS_URL}).")
        env = dict(os.environ)
        if settings.WEB_WORKERS > 1 and not settings.CACHE_URL:
            # Several web processes share rate limits and cached Prometheus answers through files.
            env["CACHE_URL"] = f"file://{Path(settings.VAR_DIR) / 'cache'}"
        self.procs: dict[str, subprocess.Popen] = {}
        for name, argv in commands.items():
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True, cwd=settings.BASE_DIR, env=env)
            self.procs[name] = proc
            threading.Thread(target=self._pump, args=(name, proc, logs / f"{name}.log"), daemon=True).start()
        signal.signal(signal.SIGTERM, lambda *_: self._stop(0))
        try:
            self._wait_http(f"http://{host}:{port}/healthz", 60)
            url = f"http://{host}:{port}/"
            banner = f"\nDynamo Control Plane is up: {url}  (log in as admin / {password})"
            self.stdout.write(self.style.SUCCESS(banner))
            if not no_example:
                self._apply_example()
            while all(p.poll() is None for n, p in self.procs.items() if n not in optional):
                for name in [n for n in optional if n in self.procs and self.procs[n].poll() is not None]:
                    self.stderr.write(f"{name} stopped (status {self.procs.pop(name).returncode}); the rest keeps "
                                      f"running without it: see {logs / (name + '.log')}")
                time.sleep(1)
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            self.stderr.write(f"{', '.join(dead)} stopped; stopping the rest (logs in {logs})")
            self._stop(1)
        except KeyboardInterrupt:
            self._stop(0)

    def _pump(self, name: str, proc: subprocess.Popen, path: Path) -> None:
        with open(path, "a") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if name != "worker" or "ERROR" in line or "succeeded" in line:
                    sys.stdout.write(f"{name:>8} | {line}")

    def _wait_http(self, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 - our own loopback URL
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"{url} did not answer within {timeout:g}s; see var/logs/web.log")

    def _apply_example(self) -> None:
        from graphs import operations

        graph = Graph.objects.filter(name="demo").first()
        if graph is None:
            return
        deployment = Deployment.objects.filter(graph=graph, active=True).first()
        if deployment is None:
            try:
                operations.request_apply(graph=graph, via="cli", runtime="local")
            except OperationRefused as exc:
                self.stderr.write(f"example graph not applied: {exc}")
                return
            self.stdout.write("applying the example graph 'demo' (frontend + mocker prefill and decode workers)")
        start = time.monotonic()
        while time.monotonic() - start < 180:
            deployment = Deployment.objects.filter(graph=graph).first()
            if deployment and deployment.state == "ready":
                self.stdout.write(self.style.SUCCESS(
                    f"example graph 'demo' is serving at {deployment.endpoint} after {time.monotonic() - start:.0f}s"))
                return
            time.sleep(1)
        self.stderr.write("example graph 'demo' is not ready after 180s: see its page")

    def _stop(self, code: int) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        sys.exit(code)
