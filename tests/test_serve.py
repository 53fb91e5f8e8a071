"""controlplane.serve, the web server every way of starting the product runs: workers with a
listening socket each share the connections, a worker that dies is replaced, SIGTERM stops
them all, and a port it cannot take is a clear error, not a hang."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from controlplane import serve
from tests.playground_fixtures import free_port

REPO = Path(__file__).resolve().parents[1]


def start(port: int, *extra: str, env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "controlplane.serve", "--host", "127.0.0.1", "--port", str(port),
                             "--no-access-log", "--log-level", "warning", *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def healthy(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", headers={"Host": "localhost"})
            with urllib.request.urlopen(request, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing answered on port {port} within {timeout:g} s")


def children_of(proc: subprocess.Popen) -> dict[int, str]:
    """pid -> command line of each process ``proc`` started."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True).stdout
    found = {}
    for pid in map(int, out.split()):
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except FileNotFoundError:  # gone since
            continue
    return found


def workers_of(proc: subprocess.Popen) -> set[int]:
    """The page workers (each listening on the port)."""
    return {pid for pid, args in children_of(proc).items() if not args.endswith("--streams")}


def stream_worker_of(proc: subprocess.Popen) -> int | None:
    return next((pid for pid, args in children_of(proc).items() if args.endswith("--streams")), None)


def running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@contextlib.contextmanager
def serving(*extra: str, env: dict | None = None):
    """controlplane.serve --workers 2 on a free port, its page workers and stream worker up:
    (port, the supervisor's process, with ``began``: when the workers started)."""
    port = free_port()
    proc = start(port, "--workers", "2", *extra, env=env)
    proc.began = time.monotonic()  # the workers start after this
    try:
        healthy(port)
        deadline = time.monotonic() + 30
        while (len(workers_of(proc)) < 2 or stream_worker_of(proc) is None) and time.monotonic() < deadline:
            time.sleep(0.2)
        yield port, proc
    finally:
        stop(proc)


@pytest.fixture
def two_workers():
    with serving() as served:
        yield served


def test_every_worker_listens_and_takes_a_share_of_the_connections(two_workers):
    port, proc = two_workers
    workers = workers_of(proc)
    assert len(workers) == 2
    listening = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    listeners = {int(pid) for pid in re.findall(r"pid=(\d+)", listening)}
    assert listeners == workers  # a socket of its own each
    streams = stream_worker_of(proc)
    assert streams is not None and streams not in listeners  # the stream worker listens on nothing
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(32)]
    try:
        time.sleep(0.5)
        held = subprocess.run(["ss", "-Htnp", "state", "established", f"sport = :{port}"], capture_output=True,
                              text=True).stdout
        by_worker = {pid: held.count(f"pid={pid},") for pid in workers}
    finally:
        for client in clients:
            client.close()
    assert sum(by_worker.values()) == 32
    assert all(count > 0 for count in by_worker.values()), by_worker


def test_a_worker_that_dies_is_replaced_and_sigterm_stops_them_all(two_workers):
    port, proc = two_workers
    time.sleep(max(0.0, proc.began + serve.EARLY_EXIT_SECONDS + 1 - time.monotonic()))  # past the start-up window
    first = workers_of(proc)
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = workers_of(proc)
        if len(now) == 2 and victim not in now:
            break
        time.sleep(0.2)
    now = workers_of(proc)
    assert len(now) == 2 and victim not in now and now & first  # one replaced, the other kept
    healthy(port)
    streams = stream_worker_of(proc)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(30) == 0
    assert not any(running(pid) for pid in now | {streams})


def test_a_port_taken_by_another_program_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start(port, "--workers", "2")
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            stop(proc)
    assert proc.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in out


@pytest.mark.parametrize("argv, message", [(["--workers", "0"], "--workers 0: at least 1"),
                                           (["--port", "70000"], "--port 70000: a TCP port is 1-65535"),
                                           (["--workers", "two"], "invalid int value")])
def test_bad_options_are_refused_with_what_is_wrong(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        serve.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_workers_stop_when_their_supervisor_is_killed(two_workers):
    _port, proc = two_workers
    workers = workers_of(proc) | {stream_worker_of(proc)}
    assert len(workers) == 3
    os.kill(proc.pid, signal.SIGKILL)  # no chance to stop them itself
    proc.wait(10)
    deadline = time.monotonic() + 30
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = {pid for pid in workers if running(pid)}
    assert not alive, f"workers {alive} serve on without their supervisor"
