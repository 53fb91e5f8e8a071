"""The first command on a fresh machine: `manage.py up` (what `make up` runs) provisions
Prometheus the way the tests get it (scripts/services.sh, into an empty prefix, with a PATH
that has no prometheus), says what it does, and ends with the example graph serving and its
charts holding data; when the example graph cannot start, it says why and what to do."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.playground_fixtures import free_port  # an OS-assigned port: no race with other runs

pytestmark = [pytest.mark.dynamo]
ROOT = Path(__file__).resolve().parents[2]
HIDDEN = {"prometheus", "promtool"}


def path_without_prometheus(shim: Path) -> str:
    """A PATH with every command of this one except prometheus and promtool."""
    shim.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = shim / name
            if name not in HIDDEN and not target.exists() and not target.is_symlink():
                target.symlink_to(Path(folder) / name)
    return str(shim)


class Up:
    """`manage.py up` as a process, its output collected line by line."""

    def __init__(self, tmp: Path, extra_env: dict, *args: str):
        self.port = free_port()
        # Not this process's metrics folder: `manage.py up` empties the one it uses at its start.
        env = {k: v for k, v in os.environ.items() if k not in (
            "DATABASE_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR")}
        env.update(CONTROLPLANE_VAR_DIR=str(tmp / "var"), DJANGO_DEBUG="1", **extra_env)
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "manage.py", "up", "--port", str(self.port),
                                      "--password", "pw-first-1", *args], cwd=ROOT, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.port}"

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text())
            if found:
                return found
            assert self.proc.poll() is None, f"up exited ({self.proc.returncode}):\n{self.text()[-4000:]}"
            time.sleep(0.5)
        interesting = [line for line in self.lines if "worker |" not in line]
        raise AssertionError(f"no {pattern!r} after {timeout}s:\n" + "\n".join(interesting)[-6000:])

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture
def up_factory(tmp_path):
    started = []

    def start(extra_env: dict, *args: str) -> Up:
        up = Up(tmp_path, extra_env, *args)
        started.append(up)
        return up

    yield start
    for up in started:
        up.stop()


def login(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=10)
    client.get("/login/")
    response = client.post("/login/", data={"username": "admin", "password": "pw-first-1",
                                            "csrfmiddlewaretoken": client.cookies["csrftoken"]},
                           headers={"Referer": base + "/login/"})
    assert response.status_code == 302, response.text[:500]
    return client


def test_up_provisions_prometheus_into_an_empty_prefix_and_ends_with_charts_that_have_data(up_factory, tmp_path):
    tools = tmp_path / "tools"
    prom_port = free_port()
    # Local graphs' ports: a random window below 32767 (Dynamo's limit), so that parallel runs rarely meet.
    lo = random.randrange(20000, 31000, 100)
    up = up_factory({"PATH": path_without_prometheus(tmp_path / "bin"), "CONTROLPLANE_TOOLS_DIR": str(tools),
                     "LOCAL_RUNTIME_PORT_MIN": str(lo), "LOCAL_RUNTIME_PORT_MAX": str(lo + 199),
                     "PROMETHEUS_LOCAL_PORT": str(prom_port), "PROMETHEUS_URL": f"http://127.0.0.1:{prom_port}",
                     "PROMETHEUS_SCRAPE_INTERVAL": "1"})
    up.wait_for(r"provisioning it with .*services\.sh prometheus", 60)
    up.wait_for(r"installed prometheus, version", 120)
    assert (tools / "usr" / "bin" / "prometheus").is_file()
    up.wait_for(r"starting web, worker, operator, prometheus", 30)
    endpoint = up.wait_for(r"example graph 'demo' is serving at (http://127\.0\.0\.1:\d+)", 180).group(1)
    for line in ("setting up the database", "creating the role groups", "applying the example graph 'demo'"):
        assert line in up.text()
    # Static files are not collected in a checkout: they come from the finders, without a warning
    # from every web worker that STATIC_ROOT is missing.
    assert "No directory at" not in up.text()
    assert httpx.get(up.base + "/static/js/playground.js", timeout=10).status_code == 200

    # Traffic for the charts: real chat completions through the example graph's frontend, kept
    # up while Prometheus starts scraping (a rate needs samples before and after the requests).
    def chat(i: int) -> None:
        reply = httpx.post(f"{endpoint}/v1/chat/completions", timeout=30, json={
            "model": "demo-model", "messages": [{"role": "user", "content": f"hello {i}"}], "max_tokens": 16,
            "stream": True})
        assert reply.status_code == 200, reply.text[:300]

    client = login(up.base)
    deadline, chart, sent = time.monotonic() + 120, {}, 0
    while time.monotonic() < deadline:
        for _ in range(4):
            chat(sent)
            sent += 1
        chart = client.get("/api/metrics/graphs/demo/chart/", params={"window": "15m"}).json()
        series = chart.get("series", {})
        # Each series needs two scrapes of its own metric: wait for all that are checked below.
        if chart.get("state") == "ok" and all(any(v is not None and v > 0 for v in series.get(name, []))
                                              for name in ("ttft_p50", "request_rate")):
            break
        time.sleep(1)
    assert chart.get("state") == "ok", chart
    assert any(v is not None and v > 0 for v in chart["series"]["ttft_p50"]), chart["series"]
    assert any(v is not None and v > 0 for v in chart["series"]["request_rate"]), chart["series"]


def test_up_says_why_the_example_graph_is_not_serving_and_what_to_do(up_factory, tmp_path):
    # Occupy the whole range local graphs may use: one port (at most 32767, Dynamo's limit), held here.
    holder = socket.socket()
    for port in random.sample(range(20000, 32000), 200):
        try:
            holder.bind(("127.0.0.1", port))
            break
        except OSError:
            continue
    holder.listen()
    ports = [holder.getsockname()[1]] * 2
    try:
        up = up_factory({"LOCAL_RUNTIME_PORT_MIN": str(ports[0]), "LOCAL_RUNTIME_PORT_MAX": str(ports[1]),
                         "PROMETHEUS_BINARY": "/nonexistent/prometheus"}, "--no-provision")
        up.wait_for(r"example graph 'demo' is not serving", 90)
        up.wait_for(r"then apply it again from", 10)
        text = up.text()
        assert re.search(r"state: +Failed", text), text
        assert f"message: need 1 free ports on 127.0.0.1 in {ports[0]}-{ports[1]}" in text, text
        assert f"now {ports[0]}-{ports[1]}, and none is free" in text
        assert "dynamo-cp graphs status demo" in text
        assert "Prometheus is not installed" in text  # --no-provision: said, not hidden
        assert up.proc.poll() is None  # the rest keeps running: the user can fix it and apply again
        # The worker's broker connection names its host: no kombu "No hostname was supplied" warning.
        worker_log = (tmp_path / "var" / "logs" / "worker.log").read_text()
        assert "ready." in worker_log and "No hostname was supplied" not in worker_log
    finally:
        holder.close()
