"""Debian's nginx (unpacked by scripts/services.sh nginx into var/tools) run unprivileged on
loopback with deploy/gateway/nginx.conf: in front of a graph's frontend, asking the control
plane about every request. Used by tests/endpoint/test_gateway_nginx.py and bench/proxy.py."""

from __future__ import annotations

import os
import shutil
import socket
import string
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "deploy" / "gateway" / "nginx.conf"


def nginx_binary() -> str | None:
    tools = Path(os.environ.get("CONTROLPLANE_TOOLS_DIR", ROOT / "var" / "tools"))
    for candidate in (shutil.which("nginx"), tools / "usr" / "sbin" / "nginx", "/usr/sbin/nginx"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(**values: str) -> str:
    """deploy/gateway/nginx.conf with its ${placeholders} filled in (nginx's own $variables kept)."""
    text = string.Template(TEMPLATE.read_text()).safe_substitute(values)
    missing = [name for name in ("listen", "frontend", "controlplane", "controlplane_host", "graph", "prefix")
               if "${" + name + "}" in text]
    if missing:
        raise ValueError(f"deploy/gateway/nginx.conf: no value for {', '.join(missing)}")
    return text


class NginxGateway:
    """nginx on a free loopback port before ``frontend`` (host:port), authorizing with the control
    plane at ``controlplane`` (host:port) for graph ``graph``."""

    def __init__(self, *, frontend: str, controlplane: str, graph: str) -> None:
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("no nginx: run scripts/services.sh nginx (Debian's package into var/tools)")
        self.binary = binary
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.prefix = Path(tempfile.mkdtemp(prefix="gateway-nginx-"))
        self.config = self.prefix / "nginx.conf"
        self.config.write_text(render(listen=f"127.0.0.1:{self.port}", frontend=frontend, controlplane=controlplane,
                                      controlplane_host="127.0.0.1", graph=graph, prefix=str(self.prefix)))
        self.proc: subprocess.Popen | None = None

    def start(self) -> NginxGateway:
        argv = [self.binary, "-p", str(self.prefix), "-c", str(self.config), "-e", "stderr", "-g", "daemon off;"]
        check = subprocess.run([*argv[:-2], "-t"], capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise RuntimeError(f"nginx -t refused {self.config}:\n{check.stderr}")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not start: {self.proc.stderr.read()}") from None
                time.sleep(0.02)

    def pids(self) -> list[int]:
        """The master and its worker (for CPU accounting)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        deadline = time.monotonic() + 5
        while not children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.02)
        return [self.proc.pid, *(int(p) for p in children.read_text().split())]

    def version(self) -> str:
        return subprocess.run([self.binary, "-v"], capture_output=True, text=True, check=False).stderr.strip()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.prefix, ignore_errors=True)
