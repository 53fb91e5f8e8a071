"""The product as deploy/ runs it, on this host, for bench/faults.py: a PostgreSQL cluster and a
Redis of its own (never the machine's shared ones), var/ on a small tmpfs (so that the disk can
be filled), 2 web processes, 2 Celery workers and beat, the local operator and Prometheus, and
the Kubernetes API emulator in this process; an OpenID provider (tests/oidc_provider, single
sign-on on) and a Git host (Debian's git http-backend, tests/git_http_server.py) for the
product to wait on. A supervisor restarts what dies, as the kubelet
does; a fault may hold a process down. Everything listens on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from tests.oidc_fixtures import CLIENT_SECRET

ROOT = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PY = sys.executable
GIT_LOGIN = ("bench", "bench-git-password")  # the Git host's Basic user and password


def _wait_port(port: int, timeout: float, what: str) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} did not listen on {port} within {timeout:.0f}s")


class Process:
    def __init__(self, name: str, argv: list[str], env: dict, log: Path):
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.proc: subprocess.Popen | None = None
        self.held = False  # a fault keeps it down: the supervisor leaves it
        self.restarts = 0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """The whole process group, as a container's death takes every process in it."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the whole process group and return at once (SIGSTOP, SIGCONT)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def children(self) -> list[psutil.Process]:
        if not self.alive():
            return []
        with contextlib.suppress(psutil.Error):
            return psutil.Process(self.proc.pid).children()
        return []


class Stack:
    """Ports: PostgreSQL ``base``, Redis ``base+1``, web ``base+2``, Prometheus ``base+3``, the OpenID
    provider ``base+4``, the Git host ``base+5``; graphs get
    ``graph_ports`` (the local runtime's range)."""

    def __init__(self, *, base_port: int = 22990, graph_ports: tuple[int, int] = (22500, 22899),
                 var_size: str = "384m"):
        self.root = Path(tempfile.mkdtemp(prefix="cp-faults-"))
        self.var = self.root / "var"
        self.pgdata = self.root / "pg"
        self.pg_port, self.redis_port, self.web_port, self.prom_port, self.idp_port, self.git_port = (
            base_port + i for i in range(6))
        self.graph_ports = graph_ports
        self.var_size = var_size
        self.processes: dict[str, Process] = {}
        self.redis: Process | None = None
        self.idp: Process | None = None
        self.git: Process | None = None
        self.kube = None
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None

    # --- PostgreSQL, Redis, var/ ---------------------------------------------------------------

    def _pg(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(self.pgdata),
                               "-l", str(self.root / "pg.log"), *args], capture_output=True, text=True, check=check)

    def pg_start(self) -> None:
        self._pg("start", "-w", "-o", f"-p {self.pg_port} -k {self.root} -c listen_addresses=127.0.0.1 "
                                      "-c max_connections=300")

    def pg_stop(self) -> None:
        self._pg("stop", "-m", "fast", "-w", check=False)

    def pg_processes(self) -> list[psutil.Process]:
        """The postmaster and every backend and helper it started."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        return [postmaster, *postmaster.children(recursive=True)]

    def pg_signal(self, sig: int) -> None:
        for proc in self.pg_processes():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    def psql(self, sql: str, db: str = "cp") -> str:
        out = subprocess.run([str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "postgres",
                              "-d", db, "-At", "-c", sql], capture_output=True, text=True, timeout=30)
        if out.returncode:
            raise RuntimeError(out.stderr.strip())
        return out.stdout.strip()

    def redis_start(self) -> None:
        # No persistence: a restart loses the queue, which is the fault to survive.
        self.redis = Process("redis", ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no"], dict(os.environ), self.root / "redis.log")
        self.redis.start()
        _wait_port(self.redis_port, 15, "redis")

    def idp_start(self) -> None:
        """panva's oidc-provider (tests/oidc_provider, its people and groups), the product's callback registered."""
        from tests.oidc_fixtures import PROVIDER_DIR, ensure_installed

        ensure_installed()
        env = dict(os.environ, PORT=str(self.idp_port), CLIENT_SECRET=CLIENT_SECRET,
                   REDIRECT_URIS=f"http://127.0.0.1:{self.web_port}/auth/oidc/callback/",
                   POST_LOGOUT_REDIRECT_URIS=f"http://127.0.0.1:{self.web_port}/login/")
        self.idp = Process("idp", [shutil.which("node") or "node", str(PROVIDER_DIR / "provider.mjs")], env,
                           self.root / "idp.log")
        self.idp.start()
        _wait_port(self.idp_port, 30, "the OpenID provider")

    def git_start(self) -> None:
        """A bare repository with one commit, served over smart HTTP with Basic authentication."""
        bare, work = self.root / "git" / "graphs.git", self.root / "git-work"
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.test"]
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
        subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
        (work / "README.md").write_text("graphs the fault bench syncs\n")
        subprocess.run([*git, "-C", str(work), "add", "README.md"], check=True)
        subprocess.run([*git, "-C", str(work), "commit", "-qm", "first"], check=True)
        subprocess.run(["git", "-C", str(work), "push", "-q", str(bare), "main"], check=True)
        self.git = Process("git", [PY, str(ROOT / "tests" / "git_http_server.py"), str(self.git_port),
                                   str(bare.parent), *GIT_LOGIN], dict(os.environ),
                           self.root / "git.log")
        self.git.start()
        _wait_port(self.git_port, 15, "the Git host")

    @property
    def git_url(self) -> str:
        return f"http://127.0.0.1:{self.git_port}/cgi-bin/git/graphs.git"

    def setup(self) -> None:
        # Prometheus as `make up` provisions it (idempotent: nothing to do once installed).
        subprocess.run(["scripts/services.sh", "prometheus"], cwd=ROOT, capture_output=True, check=False)
        self.var.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.var_size}", "tmpfs", str(self.var)], check=True)
        self.pgdata.mkdir()
        shutil.chown(self.pgdata, "postgres")
        shutil.chown(self.root, "postgres")
        subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(self.pgdata), "-U",
                        "postgres", "--auth=trust", "-E", "UTF8"], capture_output=True, check=True)
        self.pg_start()
        self.psql("CREATE DATABASE cp", db="postgres")
        self.redis_start()
        self.idp_start()
        self.git_start()
        from tests.k8s_emulator import KubeEmulator

        self.kube = KubeEmulator(simulate_operator=True).start()
        self.kube.add_namespace("llm")
        self.kubeconfig = self.kube.write_kubeconfig(self.root / "kubeconfig", context="emulator")

    @property
    def env(self) -> dict:
        lo, hi = self.graph_ports
        return dict(
            os.environ, DATABASE_URL=f"postgres://postgres@127.0.0.1:{self.pg_port}/cp",
            CELERY_BROKER_URL=f"redis://127.0.0.1:{self.redis_port}/0", CONTROLPLANE_VAR_DIR=str(self.var),
            CACHE_URL=f"file://{self.var / 'cache'}", LOCAL_RUNTIME_PORT_MIN=str(lo), LOCAL_RUNTIME_PORT_MAX=str(hi),
            PROMETHEUS_LOCAL_PORT=str(self.prom_port), PROMETHEUS_URL=f"http://127.0.0.1:{self.prom_port}",
            KUBERNETES_READ_TIMEOUT="5", KUBERNETES_CONNECT_TIMEOUT="2", CELERY_TASK_ALWAYS_EAGER="0",
            PLAYGROUND_RATE_PER_MINUTE="100000", WEB_WORKERS="2", LOG_LEVEL="WARNING",
            BENCHMARK_AIPERF_WORKERS="1", PYTHONPATH=str(ROOT / "bench" / "isolate"),
            OIDC_ISSUER_URL=f"http://127.0.0.1:{self.idp_port}", OIDC_CLIENT_ID="cp",
            OIDC_CLIENT_SECRET=CLIENT_SECRET, OIDC_ADMIN_GROUPS="cp-admins",
            OIDC_OPERATOR_GROUPS="cp-operators", OIDC_VIEWER_GROUPS="cp-viewers", OIDC_TIMEOUT_SECONDS="5")

    def manage(self, *args: str, timeout: float = 300) -> str:
        out = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True,
                             timeout=timeout)
        if out.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)}: {out.stderr[-2000:]}")
        return out.stdout

    # --- the product's processes ---------------------------------------------------------------

    def start_product(self) -> None:
        env, logs = self.env, self.var.parent / "logs"
        logs.mkdir(exist_ok=True)
        celery = [PY, "-m", "celery", "-A", "controlplane"]
        commands = {
            # as deploy/ runs it: nginx in front of 2 uvicorn processes (controlplane/webserver.py)
            "web": [PY, "manage.py", "web", "--host", "127.0.0.1", "--port", str(self.web_port), "--workers", "2",
                    "--timeout-graceful-shutdown", "20"],
            "worker-1": [*celery, "worker", "--concurrency", "2", "-n", "w1@%h", "--loglevel", "WARNING"],
            "worker-2": [*celery, "worker", "--concurrency", "2", "-n", "w2@%h", "--loglevel", "WARNING"],
            "beat": [*celery, "beat", "--loglevel", "WARNING", "--schedule", str(self.root / "celerybeat-schedule")],
            "operator": [PY, "manage.py", "runoperator"],
            "prometheus": [PY, "manage.py", "runprometheus"],
        }
        for name, argv in commands.items():
            self.processes[name] = Process(name, argv, env, logs / f"{name}.log")
            self.processes[name].start()
        _wait_port(self.web_port, 90, "web")
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            for process in [*self.processes.values(), self.redis, self.idp, self.git]:
                if process is not None and not process.held and not process.alive():
                    time.sleep(1.0)  # a restart delay, as the kubelet's first back-off
                    if self._stop.is_set() or process.held:
                        continue
                    process.restarts += 1
                    process.start()

    def stop(self, keep_logs: Path | None = None) -> None:
        self._stop.set()
        for process in self.processes.values():
            process.held = True
            process.kill(signal.SIGTERM)
        # The operator's graph processes live in sessions of their own: stop what is left of them.
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):  # gone meanwhile
                proc.info = proc.as_dict(["cmdline", "cwd"])
                if str(self.root) in " ".join([*(proc.info["cmdline"] or []), proc.info["cwd"] or ""]):
                    proc.kill()
        for server in (self.redis, self.idp, self.git):
            if server:
                server.held = True
                server.kill()
        if self.kube:
            self.kube.stop()
        self.pg_stop()
        if keep_logs is not None:
            shutil.copytree(self.root / "logs", keep_logs, dirs_exist_ok=True)
        subprocess.run(["umount", "-l", str(self.var)], check=False)
        shutil.rmtree(self.root, ignore_errors=True)
