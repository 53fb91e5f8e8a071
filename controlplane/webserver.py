"""The web server, as every way of starting the product runs it (``manage.py web``: ``make up``,
the Dockerfile, deploy/kustomize).

One process per core, each a single-worker uvicorn on a loopback port, behind Debian's nginx,
which hands each *request* to the least busy one (``least_conn``). ``uvicorn --workers N``
hands out *connections* instead: each worker accepts what it can, and one often takes most of
a burst of keep-alive connections while the other idles. Measured with 8 clients on 2 cores
at 5,000 graphs, the same page's throughput then went from round to round between two levels
(bench/pages_http.py; README's table has the figures this server gets).

* One core, or nginx nowhere to be found: uvicorn alone (``--workers N``), as before, and it
  says why.
* A process that stops is started again (nginx sends requests to the others meanwhile); one
  that stops within ``CRASH_S`` of its start ``CRASH_LIMIT`` times in a row stops the server.
* The client's address (login throttling, the audit log): nginx sends its TCP peer as
  X-Forwarded-For, and the processes believe X-Forwarded-For only from nginx. With proxies in
  FORWARDED_ALLOW_IPS, nginx appends the peer to the chain they sent and the processes walk it
  back past those proxies (uvicorn's own rule), as uvicorn alone did.
* SIGTERM or SIGINT: nginx stops taking connections and finishes the requests it has (up to
  20 s), the processes finish theirs (``--timeout-graceful-shutdown``)."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from string import Template

from django.conf import settings

# Keep-alive outlives the client's idle timeout (browsers, ingress-nginx's 60 s upstream
# keep-alive), so the client closes an idle connection first: with uvicorn's 5 s, a request
# sent as the server closes is reset, and a form POST is not retried. On a busy host a worker
# can miss uvicorn's 5 s healthcheck (uvicorn alone, --workers); its supervisor then kills it
# mid-request (SIGKILL).
WEB_TIMEOUTS = ("--timeout-keep-alive", "75", "--timeout-worker-healthcheck", "30")
TEMPLATE = Path(__file__).with_name("web-nginx.conf")
CRASH_S, CRASH_LIMIT = 10.0, 3


def nginx_binary() -> str | None:
    """NGINX_BINARY, else nginx on PATH, else Debian's package unpacked in TOOLS_DIR
    (``scripts/services.sh nginx``), else /usr/sbin/nginx; None when there is none."""
    configured = os.environ.get("NGINX_BINARY", "")
    candidates = [configured] if configured else [
        shutil.which("nginx"), str(Path(settings.TOOLS_DIR) / "usr" / "sbin" / "nginx"), "/usr/sbin/nginx"]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def uvicorn_command(host: str, port: int, *, workers: int = 1, trusted: str = "",
                    graceful_s: int | None = None) -> list[str]:
    """uvicorn as it ships (uvloop and httptools, which it picks itself). It believes
    X-Forwarded-For only from ``trusted`` (FORWARDED_ALLOW_IPS for uvicorn alone: none by
    default, where uvicorn would trust any client on 127.0.0.1)."""
    argv = [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", host, "--port", str(port),
            "--no-access-log", *WEB_TIMEOUTS]
    if workers > 1:
        argv += ["--workers", str(workers)]
    if graceful_s is not None:
        argv += ["--timeout-graceful-shutdown", str(graceful_s)]
    trusted = trusted.strip()
    return argv + (["--proxy-headers", "--forwarded-allow-ips", trusted] if trusted else ["--no-proxy-headers"])


def body_limit() -> int:
    """What nginx lets through: more than every body the product reads, which then says itself
    what is too large and where (a form, a manifest, a chat request)."""
    return max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.PLAYGROUND_MAX_PROMPT_BYTES) + 1024 * 1024


def nginx_conf(listen_host: str, port: int, backends: list[int], prefix: Path, proxies: str) -> str:
    listen = f"[{listen_host}]:{port}" if ":" in listen_host else f"{listen_host}:{port}"
    conf = Template(TEMPLATE.read_text()).safe_substitute(  # nginx's own $variables stay
        listen=listen, prefix=str(prefix), body_limit=str(body_limit()),
        servers=" ".join(f"server 127.0.0.1:{p} max_fails=0;" for p in backends),
        # No proxy is believed: the client is nginx's peer, whatever X-Forwarded-For it sent.
        forwarded_for="$proxy_add_x_forwarded_for" if proxies.strip() else "$remote_addr",
        # Started by root, nginx would serve as nobody, who cannot write its own temporary files:
        # it serves as the user the product's processes run as.
        user=f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};" if os.geteuid() == 0
        else "")
    if "${" in conf:
        raise ValueError(f"{TEMPLATE} has a placeholder nobody fills: {conf[conf.index('${'):][:40]}")
    return conf


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


class Server:
    """nginx in front of ``workers`` uvicorn processes, supervised until a signal stops it."""

    def __init__(self, host: str, port: int, workers: int, nginx: str, graceful_s: int | None = None,
                 log=print) -> None:
        self.host, self.port, self.workers, self.nginx, self.graceful_s = host, port, workers, nginx, graceful_s
        self.log = log
        self.proxies = settings.FORWARDED_ALLOW_IPS
        self.trusted = ",".join(filter(None, ["127.0.0.1", self.proxies.strip()]))
        self.ports = free_ports(workers)
        self.backends: list[subprocess.Popen | None] = [None] * workers
        self.started = [0.0] * workers
        self.crashes = [0] * workers
        self.front: subprocess.Popen | None = None
        self.stopping = False

    def _start_backend(self, i: int) -> subprocess.Popen:
        argv = uvicorn_command("127.0.0.1", self.ports[i], trusted=self.trusted, graceful_s=self.graceful_s)
        self.backends[i] = proc = subprocess.Popen(argv, cwd=settings.BASE_DIR)
        self.started[i] = time.monotonic()
        return proc

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        try:
            return self._serve()
        finally:
            self.stop(1)  # after anything that went wrong; nothing left to stop otherwise

    def _serve(self) -> int:
        for i in range(self.workers):
            self._start_backend(i)
        for i, proc in enumerate(self.backends):
            if not _wait_listening(self.ports[i], proc, 120):
                self.log(f"web: process {i + 1} did not start (status {proc.poll()}); stopping")
                return self.stop(1)
        prefix = Path(tempfile.mkdtemp(prefix="web-nginx-", dir=settings.VAR_DIR))
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_conf(self.host, self.port, self.ports, prefix, self.proxies))
        self.front = subprocess.Popen([self.nginx, "-e", "stderr", "-p", str(prefix), "-c", str(conf),
                                       "-g", "daemon off;"])
        self.log(f"web: nginx on {self.host}:{self.port} in front of {self.workers} uvicorn processes "
                 f"(127.0.0.1:{', '.join(map(str, self.ports))}), each request to the least busy")
        while not self.stopping:
            if self.front.poll() is not None:
                self.log(f"web: nginx stopped (status {self.front.returncode}); stopping")
                return self.stop(1)
            for i, proc in enumerate(self.backends):
                if proc.poll() is None:
                    continue
                quick = time.monotonic() - self.started[i] < CRASH_S
                self.crashes[i] = self.crashes[i] + 1 if quick else 1
                if self.crashes[i] >= CRASH_LIMIT:
                    self.log(f"web: process {i + 1} stopped {CRASH_LIMIT} times within {CRASH_S:g} s of its "
                             f"start (status {proc.returncode}); stopping")
                    return self.stop(1)
                self.log(f"web: process {i + 1} stopped (status {proc.returncode}); starting it again")
                self._start_backend(i)
            time.sleep(0.5)
        return self.stop(0)

    def _on_signal(self, *_):
        self.stopping = True

    def stop(self, code: int) -> int:
        self.stopping = True
        if self.front is not None and self.front.poll() is None:
            self.front.send_signal(signal.SIGQUIT)  # nginx's graceful stop
        for proc in self.backends:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + (self.graceful_s or 20) + 5
        for proc in [self.front, *self.backends]:
            if proc is None:
                continue
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return code
