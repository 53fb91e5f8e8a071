"""The rolling rules of the local runtime (graphs/runtimes/local/rollout.py) one pass at a time,
and the supervisor's drain: SIGTERM and return, forget on exit, SIGKILL past the budget."""

from __future__ import annotations

import os
import sys
import time

import pytest

from graphs.runtimes.local import rollout
from graphs.runtimes.local.rollout import Member, step
from graphs.runtimes.local.supervisor import TERMINATING, Supervisor
from graphs.runtimes.processes import group_members, wait_until

NEW, OLD = "t-new", "t-old"


def m(name, template=NEW, *, routable=True, ready=True, inflight=0.0, draining=False):
    return Member(name, template, int(name.rsplit("-", 1)[1]), ready=ready, routable=routable, inflight=inflight,
                  draining=draining)


def test_a_changed_pool_surges_one_new_worker_before_any_old_one_goes():
    d = step(pool="decode", desired=2, template=NEW, members=[m("d-0", OLD), m("d-1", OLD)])
    assert (d.start, d.drain, d.rolling) == (1, [], True)
    assert d.note == "decode: 0/2 new routable, 2 old serving"


def test_an_old_worker_drains_only_once_the_new_one_is_routable():
    started = [m("d-0", OLD), m("d-1", OLD), m("d-2", routable=False)]
    assert step(pool="decode", desired=2, template=NEW, members=started).drain == []
    routed = [m("d-0", OLD, inflight=3), m("d-1", OLD, inflight=1), m("d-2")]
    d = step(pool="decode", desired=2, template=NEW, members=routed)
    # the least busy old worker first, and only one: two routable workers stay; its successor
    # starts in the same pass (a draining worker takes no new request, and no surge room)
    assert d.drain == ["d-1"] and d.start == 1
    after = [m("d-0", OLD), m("d-1", OLD, draining=True, routable=None), m("d-2")]
    d = step(pool="decode", desired=2, template=NEW, members=after)
    assert (d.start, d.drain) == (1, []) and "1 draining" in d.note


def test_nothing_drains_on_a_pass_the_frontend_did_not_answer():
    unknown = [m("d-0", OLD, routable=None), m("d-1", OLD, routable=None), m("d-2", routable=None)]
    assert step(pool="decode", desired=2, template=NEW, members=unknown).drain == []
    excess = [m("d-0", routable=None), m("d-1", routable=None), m("d-2", routable=None)]
    assert step(pool="decode", desired=2, template=NEW, members=excess).drain == []


def test_an_old_worker_the_frontend_does_not_route_to_goes_at_once():
    d = step(pool="prefill", desired=1, template=NEW,
             members=[m("p-0", OLD, routable=False, ready=False), m("p-1", OLD)])
    assert d.drain == ["p-0"] and d.start == 1


def test_a_scale_down_drains_the_least_busy_and_a_scale_up_starts_at_once():
    pool = [m("d-0", inflight=4), m("d-1", inflight=0), m("d-2", inflight=2)]
    d = step(pool="decode", desired=1, template=NEW, members=pool)
    assert d.drain == ["d-1", "d-2"] and d.start == 0 and not d.rolling
    assert step(pool="decode", desired=4, template=NEW, members=pool).start == 1
    assert step(pool="decode", desired=0, template=NEW, members=pool).drain == ["d-1", "d-2", "d-0"]


def test_a_change_that_also_shrinks_the_pool_never_deadlocks():
    d = step(pool="decode", desired=1, template=NEW, members=[m("d-0", OLD), m("d-1", OLD)])
    assert d.drain == ["d-1"] and d.start == 1  # d-0 alone serves while the new one starts
    d = step(pool="decode", desired=1, template=NEW, members=[m("d-0", OLD), m("d-1", OLD, draining=True)])
    assert d.start == 1 and d.drain == []


def test_a_revert_in_the_middle_of_a_rollout_keeps_the_generation_that_serves():
    # revision B was rolling out over A; A is asked for again: A's workers are "new" again and
    # B's half-started worker goes, A's serving workers never do.
    mid = [m("d-0", "A"), m("d-1", "A"), m("d-2", "B", routable=False, ready=False)]
    d = step(pool="decode", desired=2, template="A", members=mid)
    assert d.drain == ["d-2"] and d.start == 0


def test_the_template_key_ignores_what_is_the_pods_own():
    one = rollout.template_key(["--port", "18001", "--x", "1"], {"DYN_SYSTEM_PORT": "18001"},
                               {"18001": "<port>", "g-d-0": "<pod>"})
    two = rollout.template_key(["--port", "18007", "--x", "1"], {"DYN_SYSTEM_PORT": "18007"},
                               {"18007": "<port>", "g-d-3": "<pod>"})
    other = rollout.template_key(["--port", "18007", "--x", "2"], {"DYN_SYSTEM_PORT": "18007"},
                                 {"18007": "<port>"})
    assert one == two != other
    # a port number inside a longer number is not the port
    assert "<port>" not in rollout.template_key(["180012"], {}, {"18001": "<port>"})


def test_the_frontends_view_is_read_from_its_health_and_metrics():
    health = b'{"instances": [{"instance_id": 7, "component": "backend"}, {"instance_id": 9}]}'
    metrics = (b'dynamo_frontend_inflight_requests{model="m"} 2\n'
               b'dynamo_frontend_worker_last_time_to_first_token_seconds{dp_rank="none",worker_id="7"} 0.1\n')
    view = rollout.frontend_view(health, metrics)
    assert view.instances == {"7", "9"} and view.served == {"7"} and not view.idle
    assert rollout.routable(view, ["7"]) is True and rollout.routable(view, ["9"]) is False
    assert rollout.routable(view, ["3"]) is False and rollout.routable(view, []) is None
    assert rollout.routable(None, ["7"]) is None and rollout.frontend_view(b"<html>", metrics) is None
    idle = rollout.frontend_view(health, b'dynamo_frontend_inflight_requests{model="m"} 0\n')
    assert rollout.routable(idle, ["9"]) is True  # nothing to send: in discovery is enough
    assert rollout.worker_inflight(b'dynamo_component_inflight_requests{worker_id="a"} 3\n') == 3.0
    assert rollout.worker_inflight(None) is None


def test_a_worker_that_counts_requests_of_its_own_is_served_before_the_frontend_writes_its_series():
    # vLLM on CPU, 8 streams: the frontend had no dynamo_frontend_worker_* series for the serving
    # worker for 15 s (they are written at a request's first token or end), and the old worker
    # was drained the pass its replacement started.
    health = b'{"instances": [{"instance_id": 7}]}'
    view = rollout.frontend_view(health, b'dynamo_frontend_inflight_requests{model="m"} 8\n')
    worker = (b'dynamo_component_requests_total{dynamo_endpoint="clear_kv_blocks",worker_id="a"} 4\n'
              b'dynamo_component_requests_total{dynamo_component="backend",dynamo_endpoint="generate",'
              b'worker_id="a"} 8\n')
    assert rollout.worker_taken(worker) is True
    assert rollout.routable(view, ["7"]) is False
    assert rollout.routable(view, ["7"], taken=rollout.worker_taken(worker)) is True
    # other endpoints' requests, an unread worker, or a worker out of discovery do not count
    assert rollout.worker_taken(worker.split(b"\n")[0]) is False and rollout.worker_taken(None) is False
    assert rollout.routable(view, ["9"], taken=True) is False
    old = rollout.Member("g-worker-0", "old", 0, ready=True, routable=rollout.routable(view, ["7"], taken=True))
    assert rollout.step(pool="worker", desired=1, template="new", members=[old]).drain == []


@pytest.mark.parametrize("env, budget", [({}, 35.0), ({"DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT": "120"}, 125.0),
                                         ({"DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT": "soon"}, 35.0)])
def test_the_drain_budget_is_the_workers_own_plus_a_margin(env, budget):
    assert rollout.drain_budget(env) == budget
    assert rollout.drain_budget(env, ["python", "-m", "dynamo.mocker"]) == budget


@pytest.mark.parametrize("env, budget", [({}, 40.0), ({"DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS": "12"}, 47.0),
                                         ({"DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS": "x"}, 40.0)])
def test_a_vllm_worker_s_drain_budget_adds_its_grace_period_before_it_stops_its_endpoints(env, budget):
    assert rollout.drain_budget(env, ["/venv/bin/python", "-m", "dynamo.vllm", "--model", "m"]) == budget


def _start(sup, tmp_path, name, code):
    sup.ensure(name, [sys.executable, "-c", code], {"PATH": os.environ.get("PATH", "")}, tmp_path,
               tmp_path / f"{name}.log")
    wait_until(lambda: "\nup" in sup.tail_log(name), timeout=10)
    return sup.status(name).pid


def test_a_drain_returns_at_once_and_the_process_finishes_on_its_own(tmp_path):
    sup = Supervisor(tmp_path / "run")
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), print('finished', flush=True), sys.exit(0)))\n"
            "print('up', flush=True)\ntime.sleep(60)")
    _start(sup, tmp_path, "graceful", code)
    start = time.monotonic()
    events = sup.drain("graceful", budget=30, why="scaled down")
    assert time.monotonic() - start < 0.3 and [e.reason for e in events] == ["Draining"]
    assert sup.status("graceful").phase == TERMINATING and sup.draining("graceful")
    assert "scaled down" in sup.status("graceful").message
    assert sup.drain("graceful", budget=30) == []  # idempotent
    gone = wait_until(lambda: [e for e in sup.poll() if e.reason == "Killing"], timeout=10)
    assert "drained in" in gone[0].message and "graceful" not in sup.names()
    assert "finished" in (tmp_path / "graceful.log").read_text()


def test_a_drain_kills_what_outlives_its_budget(tmp_path):
    sup = Supervisor(tmp_path / "run")
    pid = _start(sup, tmp_path, "stuck", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                         "print('up', flush=True); time.sleep(60)")
    sup.drain("stuck", budget=0.3)
    reasons = []
    wait_until(lambda: reasons.extend(e.reason for e in sup.poll()) or "Killing" in reasons, timeout=10)
    assert reasons[:2] == ["DrainTimeout", "Killing"] and group_members(pid) == []


def test_a_scale_up_is_progressing_while_its_new_pod_starts_and_degraded_once_one_fails():
    import datetime as dt

    from django.utils import timezone

    from graphs.runtimes.base import PodStatus
    from graphs.runtimes.local.state import graph_state

    now = timezone.now()

    def pod(name, role, ready, restarts=0, age=1.0):
        return PodStatus(name=name, service=role, role=role, phase="Running", ready=ready, restarts=restarts,
                         started_at=now - dt.timedelta(seconds=age))

    serving = [pod("g-frontend-0", "frontend", True), pod("g-decode-0", "decode", True)]
    state, message = graph_state(active=True, replicas=True, pods=[*serving, pod("g-decode-1", "decode", False)],
                                 problem="", ready_within={})
    assert state == "progressing" and message == "2/3 pods ready; g-decode-1 starting"
    state, _ = graph_state(active=True, replicas=True, pods=[*serving, pod("g-decode-1", "decode", False, 2)],
                           problem="", ready_within={})
    assert state == "degraded"
    state, _ = graph_state(active=True, replicas=True, pods=[*serving, pod("g-decode-1", "decode", False, 0, 300)],
                           problem="", ready_within={})
    assert state == "degraded"


def test_a_crash_loop_names_the_signal_that_killed_it_not_a_flag_it_never_got():
    from types import SimpleNamespace

    from graphs.diagnosis import diagnose
    from graphs.runtimes.base import PodStatus

    pod = PodStatus(name="g-decode-0", service="decode", role="decode", phase="CrashLoopBackOff", ready=False,
                    restarts=4, message="killed by SIGKILL; restarting in 8s ignored on the local runtime: "
                                        "--enforce-eager", last_log="")
    deployment = SimpleNamespace(state="degraded", message="", revision=None)
    [found] = [d for d in diagnose(deployment, [pod]) if "crash" in d.title]
    assert found.title == "g-decode-0 is crash-looping"
    assert "killed by SIGKILL, not an exit of its own" in found.detail and "out-of-memory" in found.detail
    assert "Not the cause: --enforce-eager was never passed to it" in found.detail
    assert found.fix.startswith("Its log has no lines yet.") and "dmesg" in found.fix
    pod.message, pod.last_log = "exit code 1; restarting in 8s", "ValueError: bad flag\n"
    [found] = [d for d in diagnose(deployment, [pod]) if "crash" in d.title]
    assert "SIG" not in found.detail and found.fix.startswith("Read its last log lines below.")
    assert found.log == "ValueError: bad flag\n"


def test_the_routable_timeline_keeps_change_points_and_draws_the_seconds_at_zero():
    from graphs.status_view import timeline_paths

    points = rollout.timeline_add([], 1000.0, {"decode": 2, "prefill": 1})
    points = rollout.timeline_add(points, 1001.0, {"decode": 2, "prefill": 1})  # no change: no point
    points = rollout.timeline_add(points, 1010.0, {"decode": 0, "prefill": 1})
    points = rollout.timeline_add(points, 1013.5, {"decode": 2, "prefill": 1})
    assert [t for t, _ in points] == [1000.0, 1010.0, 1013.5]
    # points older than the window go, but the last of them stays: it gives the chart's first value
    later = rollout.timeline_add(points, 1000.0 + rollout.TIMELINE_SECONDS + 20, {"decode": 1, "prefill": 1})
    assert [t for t, _ in later] == [1013.5, 1000.0 + rollout.TIMELINE_SECONDS + 20]
    charts = {c["pool"]: c for c in timeline_paths(points, 1020.0)}
    assert charts["decode"]["zero_seconds"] == 3.5 and charts["decode"]["now"] == 2 and charts["decode"]["max"] == 2
    assert charts["prefill"]["zero_seconds"] == 0 and charts["decode"]["path"].startswith("M")
    assert timeline_paths([], 1020.0) == []


def test_a_drain_signals_the_worker_not_its_children_as_the_kubelet_signals_pid_1(tmp_path):
    # vLLM's EngineCore is a child of the worker: a SIGTERM to the whole group killed it at once
    # and cut every stream the worker was still serving.
    sup = Supervisor(tmp_path / "run")
    mark = tmp_path / "child-got-term"
    child = (f"import signal, time, pathlib\n"
             f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(mark)!r}).write_text('x'), exit(0)))\n"
             f"print('child-up', flush=True)\n"
             f"time.sleep(60)")
    code = ("import signal, subprocess, sys, time, pathlib\n"
            f"child = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
            "def term(*a):\n"
            "    time.sleep(0.5)\n"
            f"    print('child-termed' if pathlib.Path({str(mark)!r}).exists() else 'child-alive', flush=True)\n"
            "    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "print('up', flush=True)\ntime.sleep(60)")
    pid = _start(sup, tmp_path, "worker", code)
    wait_until(lambda: "child-up" in sup.tail_log("worker"), timeout=10)  # its handler is installed
    sup.drain("worker", budget=30)
    wait_until(lambda: [e for e in sup.poll() if e.reason == "Killing"], timeout=15)
    lines = (tmp_path / "worker.log").read_text().splitlines()  # the header line holds the code itself
    assert "child-alive" in lines and "child-termed" not in lines
    assert group_members(pid) == []  # and nothing of the group outlives the drain
