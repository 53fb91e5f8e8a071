"""Real Git remotes for the repository tests: a bare repository written by a separate clone
(someone else's pushes), reachable as file:// and through ``git daemon`` on a loopback port.
Every command here is Debian's git; nothing is faked."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from core.specio import dump_yaml, load_yaml

EXAMPLE = Path(__file__).resolve().parent.parent / "graphs" / "examples" / "vllm-agg.yaml"


def manifest(name: str, replicas: int = 1, api_version: str = "nvidia.com/v1beta1", **extra) -> str:
    """A valid DGD (Dynamo's aggregated vLLM example) named ``name`` with ``replicas`` workers."""
    obj = load_yaml(EXAMPLE.read_text(), max_bytes=1 << 20)
    obj["metadata"]["name"] = name
    obj["spec"]["components"][1]["replicas"] = replicas
    obj["spec"]["components"][1]["sharedMemorySize"] = "16Gi"
    obj.update(extra)
    if api_version != obj["apiVersion"]:
        raise ValueError("only v1beta1 fixtures")
    return dump_yaml(obj)


def git(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    full = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    done = subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stderr}")
    return done.stdout


class Remote:
    """A bare repository ``origin.git`` and a working clone that commits and pushes to it."""

    def __init__(self, root: Path, branch: str = "main"):
        self.root = root
        self.bare = root / "origin.git"
        self.work = root / "work"
        self.branch = branch
        git("init", "--bare", "-q", "-b", branch, str(self.bare))
        git("init", "-q", "-b", branch, str(self.work))
        git("remote", "add", "origin", str(self.bare), cwd=self.work)
        for key, value in (("user.name", "Alice Git"), ("user.email", "alice@example.test"),
                           ("commit.gpgsign", "false")):
            git("config", key, value, cwd=self.work)

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def write(self, path: str, text: str) -> None:
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        git("add", path, cwd=self.work)

    def remove(self, path: str) -> None:
        git("rm", "-q", path, cwd=self.work)

    def commit(self, message: str, author: str = "Alice Git <alice@example.test>") -> str:
        git("commit", "-q", "--allow-empty", "-m", message, f"--author={author}", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work).strip()

    def push(self, branch: str | None = None) -> None:
        git("push", "-q", "origin", f"HEAD:refs/heads/{branch or self.branch}", cwd=self.work)

    def pull(self) -> None:
        git("pull", "-q", "--rebase", "origin", self.branch, cwd=self.work)

    def show(self, ref: str, path: str) -> str:
        return git("--git-dir", str(self.bare), "show", f"{ref}:{path}")

    def log(self, ref: str | None = None, fmt: str = "%H %an <%ae> %s") -> list[str]:
        return git("--git-dir", str(self.bare), "log", f"--format={fmt}", ref or self.branch).splitlines()

    def branches(self) -> list[str]:
        out = git("--git-dir", str(self.bare), "for-each-ref", "--format=%(refname:short)", "refs/heads/")
        return out.split()


@pytest.fixture
def remote(tmp_path) -> Remote:
    return Remote(tmp_path / "remote")


def _free_port() -> int:
    low = int(os.environ.get("LOCAL_RUNTIME_PORT_MIN", "21500"))
    high = int(os.environ.get("LOCAL_RUNTIME_PORT_MAX", "21999"))
    for port in range(high, low, -1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


@pytest.fixture
def git_daemon(remote):
    """``git daemon`` serving the remote's folder over git:// on a loopback port, pushes allowed.
    Yields the git:// URL of origin.git."""
    port = _free_port()
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={port}",
                             f"--base-path={remote.root}", "--export-all", "--enable=receive-pack",
                             "--informative-errors", str(remote.root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    try:
        yield f"git://127.0.0.1:{port}/origin.git"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
