"""Liveness in the local runtime (graphs/runtimes/local/liveness.py): a process that stops
answering /live (paused with SIGSTOP, as a hung engine is) is killed and started again, as the
kubelet restarts a pod whose liveness probe fails; one still starting, or answering late once,
is left alone."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import pytest

from graphs.runtimes.local import liveness, probes, supervisor
from graphs.runtimes.local.liveness import Liveness, Probe
from graphs.runtimes.local.supervisor import RUNNING, Supervisor
from graphs.runtimes.processes import wait_until
from tests.playground_fixtures import free_port

FAST = Probe("/live", 0.2, 1.0, 3)

SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/live" else 404); self.end_headers()
    def log_message(self, *a): pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("up", flush=True)
server.serve_forever()
"""


def test_a_probe_restarts_only_after_it_answered_once_and_then_failed_in_a_row():
    state, probe = Liveness(), Probe("/live", 5.0, 1.0, 3)
    assert [state.record(probe, t, False) for t in (0, 5, 10, 15)] == ["", "", "", ""]  # still starting
    assert state.record(probe, 20, True) == "" and state.answered
    assert state.record(probe, 25, False) == "" and state.record(probe, 30, False) == ""
    assert state.record(probe, 35, True) == "" and state.failures == 0  # one late answer is forgiven
    assert state.record(probe, 40, False) == "" and state.record(probe, 45, False) == ""
    why = state.record(probe, 50, False)
    assert why.startswith("Liveness probe failed: GET /live") and "3 times 5 s apart" in why
    assert not state.due(probe, 54.9) and state.due(probe, 55)


def test_a_process_that_works_while_it_answers_late_is_not_killed():
    """A vLLM-on-CPU worker in a long prefill answers /live late but uses its CPU: not hung."""
    state, probe = Liveness(), Probe("/live", 5.0, 2.0, 3)
    assert state.record(probe, 0, True, cpu=100) == ""
    assert [state.record(probe, t, False, cpu=100 + t) for t in (5, 10, 15, 20, 25)] == [""] * 5
    # no CPU used from one probe to the next: paused or blocked, and now it counts
    assert [state.record(probe, t, False, cpu=125) for t in (30, 35)] == ["", ""]
    assert state.record(probe, 40, False, cpu=125).startswith("Liveness probe failed")


def test_a_paused_process_uses_no_cpu_and_a_running_one_does():
    import subprocess

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        first = liveness.cpu_ticks(busy.pid)
        time.sleep(0.5)
        assert liveness.cpu_ticks(busy.pid) > first
        os.kill(busy.pid, signal.SIGSTOP)
        time.sleep(0.1)
        stopped = liveness.cpu_ticks(busy.pid)
        time.sleep(0.5)
        assert liveness.cpu_ticks(busy.pid) == stopped
    finally:
        busy.kill()
        busy.wait(10)
    assert liveness.cpu_ticks(busy.pid) is None  # gone


def test_the_local_probes_follow_the_operator_s_paths_and_periods():
    # component_worker.go:43-52 and component_frontend.go:43-53 at 2a6da14c
    assert liveness.PROBES["worker"].path == liveness.PROBES["frontend"].path == "/live"
    assert (liveness.PROBES["worker"].period, liveness.PROBES["frontend"].period) == (5.0, 10.0)


def _live(port: int) -> bool:
    answer = probes.http_get(port, "/live", timeout=2)
    return bool(answer and answer[0] == 200)


@pytest.fixture
def fast_probes(monkeypatch):
    monkeypatch.setitem(supervisor.PROBES, "worker", FAST)


def test_a_paused_worker_is_killed_and_started_again(tmp_path, fast_probes):
    sup = Supervisor(tmp_path / "run", backoff_base=0.1)
    port = free_port()
    sup.ensure("w", [sys.executable, "-c", SERVER, str(port)], {"PATH": os.environ.get("PATH", "")}, tmp_path,
               tmp_path / "w.log", meta={"probe": "worker", "port": port})
    wait_until(lambda: _live(port), timeout=10)
    first = sup.status("w").pid
    wait_until(lambda: (sup.poll(), sup._procs["w"].live.answered)[1], timeout=10)
    os.kill(first, signal.SIGSTOP)
    try:
        events = []
        wait_until(lambda: events.extend(sup.poll()) or sup.status("w").pid not in (None, first), timeout=20,
                   interval=0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(first, signal.SIGCONT)
    unhealthy = [e for e in events if e.reason == "Unhealthy"]
    assert len(unhealthy) == 1 and unhealthy[0].type == "Warning" and "Liveness probe failed" in unhealthy[0].message
    assert sup.status("w").restarts == 1 and sup.status("w").phase == RUNNING
    wait_until(lambda: _live(port), timeout=20)  # serving again, as the new process
    assert sup.status("w").pid != first
    sup.stop_all(grace=2)


def test_a_process_that_never_answers_is_left_to_start(tmp_path, fast_probes):
    """No answer yet is a process still starting (the operator's startup probe waits 2 h)."""
    sup = Supervisor(tmp_path / "run")
    sup.ensure("slow", [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
               {"PATH": os.environ.get("PATH", "")}, tmp_path, tmp_path / "slow.log",
               meta={"probe": "worker", "port": free_port()})
    pid = sup.status("slow").pid
    events = []
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        events += sup.poll()
    assert not [e for e in events if e.reason == "Unhealthy"] and sup.status("slow").pid == pid
    sup.stop_all(grace=2)
