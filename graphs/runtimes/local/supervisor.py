"""The process layer of the local runtime: Dynamo graphs as supervised processes on this host.

Django-free. It probes readiness (probes.py) and supervises processes (argv and env from argv.py)
like a tiny kubelet: restart with exponential back-off, CrashLoopBackOff, pidfiles so that a
crashed operator's processes are found and killed on the next start (processes.stop_groups)."""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import EventRecord, PodStatus
from ..processes import group_members, proc_stat, signal_group, stop_groups, wait_until
from .liveness import PROBES, Liveness, alive, cpu_ticks
from .probes import http_get, probe_frontend, probe_worker

PENDING, RUNNING, CRASH_LOOP, TERMINATING = "Pending", "Running", "CrashLoopBackOff", "Terminating"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


@dataclass
class ProcStatus:
    name: str
    phase: str  # Pending (backing off), Running, CrashLoopBackOff, Terminating
    pid: int | None
    restarts: int
    started_at: dt.datetime | None
    last_exit_code: int | None  # negative: killed by that signal
    port: int | None
    backoff: float | None  # the delay before the pending restart, when one is pending
    message: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)


@dataclass
class _Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    meta: dict[str, Any]
    popen: subprocess.Popen | None = None
    phase: str = PENDING
    restarts: int = 0
    started_at: dt.datetime | None = None
    started_mono: float = 0.0
    last_exit_code: int | None = None
    delay: float = 0.0  # next back-off delay
    backoff: float | None = None
    next_start: float = 0.0
    message: str = ""
    restart_times: deque[float] = field(default_factory=deque)
    drain_deadline: float | None = None  # draining: SIGTERM sent, SIGKILL at this monotonic time
    drain_started: float = 0.0
    live: Liveness = field(default_factory=Liveness)  # liveness.py; a new one with every start


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def tail_file(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a (possibly large) log file; "" when it does not exist."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 2000 * max(lines, 1)))
            data = fh.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


class Supervisor:
    """Named processes, each in its own session (so one killpg stops it and its children),
    restarted with exponential back-off like a kubelet with restartPolicy Always. Thread-safe."""

    def __init__(self, runtime_dir: Path, *, backoff_base: float = 1.0, backoff_cap: float = 60.0,
                 stable_after: float = 60.0, crashloop_restarts: int = 3, crashloop_window: float = 300.0):
        self.runtime_dir = Path(runtime_dir)
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.backoff_base, self.backoff_cap, self.stable_after = backoff_base, backoff_cap, stable_after
        self.crashloop_restarts, self.crashloop_window = crashloop_restarts, crashloop_window
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.RLock()
        self._me = (os.getpid(), (proc_stat(os.getpid()) or ("", 0, 0))[2])

    # public API ------------------------------------------------------------------------------

    def ensure(self, name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_path: Path,
               meta: Mapping[str, Any] | None = None) -> list[EventRecord]:
        """Start ``name`` unless it already runs (or backs off) with this argv/env; a changed
        argv/env replaces the process."""
        if not NAME_RE.match(name):
            raise ValueError(f"process name {name!r} is invalid (letters, digits, '.', '_', '-')")
        events: list[EventRecord] = []
        with self._lock:
            old = self._procs.get(name)
            if old and old.argv == list(argv) and old.env == dict(env) and old.phase != TERMINATING:
                old.meta.update(meta or {})
                return events
        if old:
            events += self.stop(name)
        proc = _Proc(name, list(argv), dict(env), Path(cwd), Path(log_path), dict(meta or {}),
                     delay=self.backoff_base)
        with self._lock:
            self._procs[name] = proc
            events += self._spawn(proc)
        return events

    def poll(self) -> list[EventRecord]:
        """Reap exited processes and start those whose back-off has elapsed."""
        events: list[EventRecord] = []
        with self._lock:
            now = time.monotonic()
            for p in list(self._procs.values()):
                if p.phase == TERMINATING:
                    if p.drain_deadline is not None:
                        events += self._drained(p, now)
                    continue
                if p.popen is not None and (code := p.popen.poll()) is not None:
                    events += self._exited(p, code, now)
                elif p.popen is None and now >= p.next_start:
                    p.restarts += 1
                    p.restart_times.append(now)
                    events += self._spawn(p)
            due = [(p, PROBES[p.meta["probe"]]) for p in self._procs.values()
                   if p.phase == RUNNING and p.popen is not None and p.meta.get("probe") in PROBES
                   and p.meta.get("port") and p.live.due(PROBES[p.meta["probe"]], now)]
        # Probed outside the lock: a hung process keeps a probe waiting its timeout.
        outcomes = [(p, probe, alive(http_get, p.meta["port"], probe), cpu_ticks(p.popen.pid)) for p, probe in due]
        with self._lock:
            for p, probe, answered, cpu in outcomes:
                why = p.live.record(probe, time.monotonic(), answered, cpu)
                if why and p.phase == RUNNING and p.popen is not None:
                    # SIGKILL reaches a stopped process too; the next poll restarts it (back-off).
                    signal_group(p.popen.pid, signal.SIGKILL)
                    p.message = why
                    events.append(self._event("Warning", "Unhealthy", p.name, why))
        return events

    def stop(self, name: str, grace: float = 5.0) -> list[EventRecord]:
        """SIGTERM the process group, SIGKILL after ``grace``; forget the process. Idempotent."""
        return self._stop([name], grace)

    def drain(self, name: str, budget: float, why: str = "") -> list[EventRecord]:
        """SIGTERM the process (not its group) and return at once: it leaves routing and finishes
        what it serves on its own (Dynamo's graceful shutdown, rollout.py); ``poll`` forgets it
        once it exits, killing what is left of its group, and SIGKILLs the group ``budget``
        seconds from now. A process that is not running (backing off) is simply forgotten.
        Idempotent."""
        with self._lock:
            p = self._procs.get(name)
            if p is None or p.drain_deadline is not None:
                return []
            if p.popen is None:
                del self._procs[name]
                self._pidfile(name).unlink(missing_ok=True)
                return [self._event("Normal", "Killing", name, f"stopped {name} (it was not running)")]
            p.phase, p.drain_started = TERMINATING, time.monotonic()
            p.drain_deadline = p.drain_started + budget
            p.message = (f"draining{': ' + why if why else ''}: out of routing, finishing its in-flight "
                         f"requests (SIGKILL after {budget:g} s)")
            # The process itself, as the kubelet signals a container's PID 1: not its group. The
            # worker shuts its own children down once it has drained; a group SIGTERM reached
            # vLLM's EngineCore child at once and cut every stream the worker served.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.popen.pid, signal.SIGTERM)
        return [self._event("Normal", "Draining", name, p.message)]

    def draining(self, name: str) -> bool:
        with self._lock:
            p = self._procs.get(name)
            return bool(p and p.drain_deadline is not None)

    def stop_all(self, grace: float = 5.0) -> list[EventRecord]:
        with self._lock:
            names = list(self._procs)
        return self._stop(names, grace)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._procs)

    def status(self, name: str) -> ProcStatus:
        with self._lock:
            p = self._procs[name]
            pid = p.popen.pid if p.popen else None
            return ProcStatus(p.name, p.phase, pid, p.restarts, p.started_at, p.last_exit_code,
                              p.meta.get("port"), p.backoff if pid is None else None, p.message, dict(p.meta),
                              list(p.argv))

    def tail_log(self, name: str, lines: int = 20) -> str:
        with self._lock:
            path = self._procs[name].log_path
        return tail_file(path, lines)

    def probe(self, name: str) -> bool:
        """Readiness from meta: ``probe`` is "frontend" (needs ``port`` and ``model``) or "worker"
        (needs ``port``, the system port). Without a probe, running means ready."""
        st = self.status(name)
        if st.phase != RUNNING:
            return False
        kind, port = st.meta.get("probe"), st.meta.get("port")
        if kind == "frontend":
            return probe_frontend(port, st.meta["model"])
        if kind == "worker":
            return probe_worker(port)
        return True

    def wait_ready(self, names: Sequence[str], *, timeout: float) -> float:
        """Poll and probe until all ``names`` are ready; seconds taken. Fails fast (RuntimeError
        with the log tail) when one of them exits meanwhile."""
        start = time.monotonic()

        def ready() -> bool:
            for event in self.poll():
                if event.reason == "Exited" and event.object in names:
                    raise RuntimeError(f"{event.object} exited while starting: {event.message}\n"
                                       f"{self.tail_log(event.object, 30)}")
            return all(self.probe(n) for n in names)

        wait_until(ready, timeout=timeout, interval=0.25, what=f"{', '.join(names)} to be ready")
        return time.monotonic() - start

    def pod_status(self, name: str, *, ready: bool | None = None) -> PodStatus:
        """The process seen as a pod (meta ``service`` and ``role`` name its pool)."""
        st = self.status(name)
        is_ready = self.probe(name) if ready is None else ready
        crashed = st.phase in (PENDING, CRASH_LOOP) and st.last_exit_code is not None
        return PodStatus(
            name=name, service=st.meta.get("service", ""), role=st.meta.get("role", ""), phase=st.phase,
            ready=is_ready and st.phase == RUNNING, restarts=st.restarts, started_at=st.started_at,
            node="localhost", port=st.port,
            reason=st.phase if st.phase == CRASH_LOOP else ("Error" if crashed else ""),
            message=st.message, last_log=self.tail_log(name, 20) if crashed else "",
            command=st.argv[:3], args=st.argv[3:])

    def install_exit_handlers(self, grace: float = 5.0) -> None:
        """Stop everything when the operator exits normally or on SIGTERM/SIGINT (then the
        previous handler runs). Signal handlers can only be set from the main thread."""
        atexit.register(self.stop_all, grace)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)

            def handler(signum: int, frame: Any, previous: Any = previous) -> None:
                self.stop_all(grace)
                if callable(previous):
                    previous(signum, frame)
                elif previous != signal.SIG_IGN:
                    signal.signal(signum, signal.SIG_DFL)
                    os.kill(os.getpid(), signum)

            signal.signal(sig, handler)

    @staticmethod
    def reap_orphans(folder: Path, grace: float = 5.0) -> list[int]:
        """Kill the process groups a previous (crashed) operator left behind, from its pidfiles;
        returns their pids. A pidfile whose operator is still alive is left alone, and a pid
        whose start time differs from the pidfile's was reused by another process: not killed."""
        killed, groups = [], []
        for pidfile in sorted(Path(folder).glob("*.pid")):
            try:
                rec = json.loads(pidfile.read_text())
                pid, pgid, start = int(rec["pid"]), int(rec["pgid"]), int(rec["start_time"])
                owner, owner_start = int(rec["supervisor_pid"]), int(rec["supervisor_start"])
            except (OSError, ValueError, KeyError, TypeError):
                pidfile.unlink(missing_ok=True)
                continue
            if (st := proc_stat(owner)) and st[2] == owner_start and st[0] != "Z":
                continue  # its operator still runs and owns it
            leader = proc_stat(pid)
            if leader and leader[2] == start and leader[0] != "Z":
                groups.append(pgid)
                killed.append(pid)
            elif leader is None or leader[0] == "Z":
                # The leader died but its children may still run in its group.
                for member in group_members(pgid, started_since=start):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(member, signal.SIGKILL)
                    killed.append(member)
            pidfile.unlink(missing_ok=True)
        stop_groups(groups, grace)
        return killed

    # internals ---------------------------------------------------------------------------

    def _event(self, type_: str, reason: str, name: str, message: str) -> EventRecord:
        return EventRecord(at=_now(), type=type_, reason=reason, object=name, message=message)

    def _pidfile(self, name: str) -> Path:
        return self.runtime_dir / f"{name}.pid"

    def _spawn(self, p: _Proc) -> list[EventRecord]:
        p.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(p.log_path, "ab") as log:
            log.write(f"--- {_now():%Y-%m-%dT%H:%M:%SZ} supervisor: starting {p.name} "
                      f"(restarts={p.restarts}): {shlex.join(p.argv)}\n".encode())
            log.flush()
            try:
                p.popen = subprocess.Popen(p.argv, env=p.env, cwd=p.cwd, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
            except OSError as exc:  # missing interpreter or cwd: treat as a crash, back off
                p.message = f"failed to start: {exc}"
                log.write(f"--- supervisor: {p.message}\n".encode())
                failed = self._event("Warning", "Failed", p.name, p.message)
                return [failed, *self._exited(p, None, time.monotonic())]
        p.phase, p.started_at, p.started_mono = RUNNING, _now(), time.monotonic()
        p.backoff, p.message, p.live = None, "", Liveness()
        pid = p.popen.pid
        record = {"pid": pid, "pgid": pid, "start_time": (proc_stat(pid) or ("", 0, 0))[2], "name": p.name,
                  "supervisor_pid": self._me[0], "supervisor_start": self._me[1]}
        tmp = self._pidfile(p.name).with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self._pidfile(p.name))
        return [self._event("Normal", "Started", p.name, f"started pid {pid} (restarts={p.restarts})")]

    def _exited(self, p: _Proc, code: int | None, now: float) -> list[EventRecord]:
        if p.popen is not None:
            stop_groups([p.popen.pid], 0.0)  # children of a dead leader die with it
            self._pidfile(p.name).unlink(missing_ok=True)
        uptime = now - p.started_mono if p.popen is not None else 0.0
        p.popen, p.last_exit_code, p.started_at = None, code, None
        if uptime >= self.stable_after:  # it ran long enough: forget earlier crashes
            p.delay = self.backoff_base
            p.restart_times.clear()
        while p.restart_times and now - p.restart_times[0] > self.crashloop_window:
            p.restart_times.popleft()
        p.backoff, p.next_start = p.delay, now + p.delay
        p.delay = min(p.delay * 2, self.backoff_cap)
        looping = len(p.restart_times) >= self.crashloop_restarts
        p.phase = CRASH_LOOP if looping else PENDING
        how = "failed to start" if code is None else (
            f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}")
        p.message = f"{how}; restarting in {p.backoff:g}s"
        events = [self._event("Warning", "Exited", p.name, how)]
        if looping:
            message = f"Back-off {p.backoff:g}s restarting failed process ({p.restarts} restarts)"
            events.append(self._event("Warning", "BackOff", p.name, message))
        return events

    def _drained(self, p: _Proc, now: float) -> list[EventRecord]:
        """A draining process: forgotten once it (and its group) exited, SIGKILLed past its budget."""
        code = p.popen.poll()
        if code is None and now < p.drain_deadline:
            return []
        took = now - p.drain_started
        events = []
        if code is None:
            events.append(self._event("Warning", "DrainTimeout", p.name,
                                      f"still running {took:.0f} s after SIGTERM: killed"))
        stop_groups([p.popen.pid], 0.0, lambda: p.popen.poll())
        del self._procs[p.name]
        self._pidfile(p.name).unlink(missing_ok=True)
        events.append(self._event("Normal", "Killing", p.name, f"stopped {p.name}: drained in {took:.1f} s"))
        return events

    def _stop(self, names: Sequence[str], grace: float) -> list[EventRecord]:
        with self._lock:
            procs = [self._procs[n] for n in names if n in self._procs]
            for p in procs:
                p.phase = TERMINATING
        running = [p for p in procs if p.popen is not None]

        def reap() -> None:
            for p in running:
                p.popen.poll()  # a zombie leader keeps its pid: reap it

        # Outside the lock, so other threads see Terminating meanwhile.
        stop_groups([p.popen.pid for p in running], grace, reap)
        for p in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=1.0)  # the leader may have died after the last reap()
        events = []
        with self._lock:
            for p in procs:
                if self._procs.get(p.name) is p:
                    del self._procs[p.name]
                self._pidfile(p.name).unlink(missing_ok=True)
                events.append(self._event("Normal", "Killing", p.name, f"stopped {p.name}"))
        return events
