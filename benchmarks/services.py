"""Benchmark runs as jobs: request, execute (in a Celery worker), cancel.

State machine (RunState): pending → running → succeeded | failed | cancelled.

* ``benchmark_request`` checks the graph serves, validates the profile, records a pending
  row (one active run per graph: a partial unique index; at most BENCHMARK_MAX_RUNNING on the
  host) and enqueues ``benchmark_execute`` after commit.
* ``benchmark_execute`` claims the row with a conditional UPDATE, runs aiperf once per load
  point against the graph's own frontend (Deployment.endpoint, nothing else), heart-beats
  the row every second (progress, lease) and reads cancellation requests from it, and
  finishes the row. Every run is bounded by its ``max_seconds``.
* ``benchmark_cancel`` cancels a pending run at once, and asks a running one to stop (its
  worker SIGTERMs aiperf's process group within a second).
* the sweep of every job kind (jobs/registry.py) fails runs whose worker stopped heart-beating,
  after killing their aiperf process group (``BenchmarkRunner.lost``), and sends again pending
  runs nobody picked up."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from audit.services import audit_record
from graphs.models import ACTIVE_STATES, Deployment, Graph, GraphState, Operation
from graphs.runtimes.local.tinymodel import ensure_model_dir
from graphs.runtimes.registry import on_this_host
from jobs.dispatch import enqueue
from jobs.runner import JobFailed, JobRunner

from . import aiperf
from .errors import BenchmarkRefused, RunCancelled, RunFailed
from .invocation import Invocation, ProcessRef, hostname, log_tail, stop_group
from .models import ACTIVE_RUN_STATES, BenchmarkRun, RunState
from .profiles import RunParams, resolve
from .schema import RunConfig, RunResults, TokenCounts
from .shapes import gpu_count, shape_of
from .targets import slo_targets

if TYPE_CHECKING:
    from accounts.roles import Actor

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
STALE_PENDING = dt.timedelta(seconds=30)
GIVE_UP_PENDING = dt.timedelta(minutes=10)
EXECUTE_TASK = "benchmarks.tasks.benchmark_execute"
SERVING_STATES = (GraphState.READY, GraphState.DEGRADED)
STAND_IN_TOKENIZER = "benchmark-stand-in"


def run_dir(run_id: int) -> Path:
    return Path(settings.BENCHMARK_DIR) / "runs" / str(run_id)


def serving_deployment(graph: Graph) -> Deployment:
    """The graph's deployment if its frontend serves, else BenchmarkRefused saying why."""
    dep = Deployment.objects.filter(graph=graph).select_related("revision").first()
    if dep is None or not dep.active or dep.revision is None:
        raise BenchmarkRefused(f"{graph.name} is not deployed: apply it, wait until it is ready, then benchmark it")
    if dep.state not in SERVING_STATES:
        raise BenchmarkRefused(f"{graph.name} is not serving (state: {dep.get_state_display().lower()}); "
                               "benchmark it once it is ready")
    if not dep.endpoint:
        raise BenchmarkRefused(f"{graph.name} has no frontend endpoint yet")
    try:
        aiperf.frontend_url(dep.endpoint)
    except aiperf.BadTarget as exc:
        raise BenchmarkRefused(str(exc)) from None
    return dep


def _enqueue(run: BenchmarkRun) -> None:
    enqueue(EXECUTE_TASK, run.pk)


@transaction.atomic
def benchmark_request(*, graph: Graph, profile: str, params: dict | RunParams | None = None, user: Actor = None,
                      via: str = "ui", study=None, label: str = "") -> BenchmarkRun:
    """Record a pending run of ``profile`` (with ``params`` overriding its defaults).
    Raises ProfileError (bad parameters, by field) or BenchmarkRefused."""
    run_params = params if isinstance(params, RunParams) else resolve(profile, params)
    dep = serving_deployment(graph)
    op = Operation.objects.filter(graph=graph, state__in=ACTIVE_STATES).first()
    if op is not None:
        raise BenchmarkRefused(f"{graph.name} is changing ({op.kind} operation #{op.pk} is {op.state}); "
                               "benchmark it once the change is done")
    active = list(BenchmarkRun.objects.filter(state__in=ACTIVE_RUN_STATES).select_related("graph")[:50])
    mine = next((r for r in active if r.graph_id == graph.pk), None)
    if mine is not None:
        raise BenchmarkRefused(f"{graph.name} is already being benchmarked (run #{mine.pk}); wait for it or cancel it")
    if len(active) >= settings.BENCHMARK_MAX_RUNNING:
        raise BenchmarkRefused(f"another benchmark is active on this host (run #{active[0].pk} of "
                               f"{active[0].graph.name}); runs go one at a time (BENCHMARK_MAX_RUNNING="
                               f"{settings.BENCHMARK_MAX_RUNNING}) so that they do not measure each other")
    try:
        with transaction.atomic():
            run = BenchmarkRun.objects.create(
                graph=graph, revision=dep.revision, study=study, label=label[:100], profile=profile,
                params=run_params.model_dump(mode="json"), via=via,
                requested_by=user if user is not None and user.pk else None,
                progress_text="waiting for a worker")
    except IntegrityError:
        raise BenchmarkRefused(f"{graph.name} is already being benchmarked; wait for it or cancel it") from None
    _enqueue(run)
    audit_record(actor=user, via=via, action="benchmark.run", target_type="graph", target=graph.name,
                 after={"run": run.pk, "profile": profile, "params": run.params})
    return run


# --- execution -----------------------------------------------------------------------------------

def _finish(run_id: int, state: str, *, error: str = "", results: RunResults | None = None) -> bool:
    """End a run from outside its worker (the sweep, a cancel of an orphan)."""
    fields = _ending(state, {"error": error[:20000]} if results is None else
                     {"error": error[:20000], "results": results.model_dump(mode="json")})
    done = BenchmarkRun.finish(run_id, state, **fields)
    if done:
        _advance_study(run_id)
    return bool(done)


def _ending(state: str, fields: dict) -> dict:
    fields = {"pgid": None, **fields}
    if state == RunState.SUCCEEDED:
        fields.update(progress=100, progress_text="done")
    else:
        fields["progress_text"] = {RunState.CANCELLED: "cancelled"}.get(state, "failed")
    return fields


def _advance_study(run_id: int) -> None:
    study_id = BenchmarkRun.objects.filter(pk=run_id).values_list("study_id", flat=True).first()
    if study_id:
        enqueue("benchmarks.tasks.study_advance", study_id)


def resolve_tokenizer(dep: Deployment, model: str) -> aiperf.Tokenizer:
    """The graph's own tokenizer where the control plane can reach it (the local runtime's
    model directory; a Kubernetes graph's model in this host's Hugging Face cache); else a
    stand-in that only shapes the prompts, with the server's usage counts in the report."""
    if on_this_host(dep):
        path = ensure_model_dir(Path(settings.LOCAL_RUNTIME_DIR) / "models", model)
        return aiperf.Tokenizer(str(path), "client", "the graph's own model directory on the local runtime")
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = isinstance(try_to_load_from_cache(model, "tokenizer.json"), str)
    except Exception:  # an id the hub library refuses is simply not cached
        cached = False
    if cached:
        return aiperf.Tokenizer(model, "client", "the model's tokenizer from this host's Hugging Face cache")
    stand_in = ensure_model_dir(Path(settings.BENCHMARK_DIR) / "tokenizers", STAND_IN_TOKENIZER)
    return aiperf.Tokenizer(str(stand_in), "server",
                            f"the tokenizer of {model} is not reachable from the control plane: token counts "
                            "are the server's usage counts, and prompt lengths were shaped with a stand-in "
                            "tokenizer, so in the model's tokens they differ from the requested means")


def _snapshot(dep: Deployment) -> tuple[RunConfig, str]:
    from graphs.engines import graph_simulation

    spec = dep.revision.graph_spec
    replicas = dep.desired_replicas(spec)
    shape = shape_of(spec, replicas)
    model = spec.model or spec.name
    simulation = graph_simulation(spec, dep.runtime)
    config = RunConfig(runtime=dep.runtime, endpoint=dep.endpoint, model=model, revision=dep.revision.number,
                       replicas=replicas, prefill=shape.prefill, decode=shape.decode, worker=shape.workers,
                       gpus=gpu_count(spec, replicas), shape=str(shape),
                       gpu_free=not any(s.gpus for s in spec.services if s.is_worker),
                       simulated=f"{simulation.label}: {simulation.reason}" if simulation else "")
    return config, model


def _heartbeat(runner: JobRunner, progress: int, text: str) -> tuple[bool, str]:
    """Renew the lease, publish progress: (keep going, why not). A database blip does not stop aiperf."""
    try:
        if not runner.renew(progress=progress, progress_text=text[:200]):
            return False, "the run was finished elsewhere (swept or cancelled)"
        row = BenchmarkRun.objects.filter(pk=runner.pk).values("cancel_requested_at",
                                                               "cancel_requested_by__username").get()
    except (OperationalError, InterfaceError):
        connection.close()  # the next beat takes a new connection
        return True, ""
    if row["cancel_requested_at"] is not None:
        return False, f"cancelled by {row['cancel_requested_by__username'] or 'request'}"
    return True, ""


def _failure(prefix: str, log_path: Path) -> str:
    return f"{prefix}\n\naiperf's log (last lines):\n{log_tail(log_path, 25)}"


def _measure(runner: JobRunner, run: BenchmarkRun, workdir: Path, scratch: Path) -> RunResults:
    dep = serving_deployment(run.graph)
    config, model = _snapshot(dep)
    tokenizer = resolve_tokenizer(dep, model)
    slo = slo_targets(run.graph)
    params = run.run_params
    log_path = workdir / "aiperf.log"
    artifacts = workdir / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    BenchmarkRun.objects.filter(pk=run.pk).update(config=config.model_dump(mode="json"), revision=dep.revision,
                                                  artifact_dir=str(artifacts), log_path=str(log_path))
    results = RunResults(token_counts=TokenCounts(source=tokenizer.source, tokenizer=tokenizer.path,
                                                  note=tokenizer.note), slo=slo)
    if dep.state == GraphState.DEGRADED:
        results.warnings.append(f"{run.graph.name} was degraded when the run started: {dep.message}")
    if not params.streaming:
        results.warnings.append("not streaming: aiperf measures no TTFT or ITL, only request latency")
    env = aiperf.build_env(scratch, tokenizer)
    deadline = time.monotonic() + params.max_seconds
    loads = params.loads()
    for index, (concurrency, rate) in enumerate(loads):
        name = f"{index + 1:02d}-" + (f"c{concurrency}" if concurrency else "") + (f"r{rate:g}" if rate else "")
        argv = aiperf.build_argv(params=params, url=dep.endpoint, model=model, tokenizer=tokenizer,
                                 artifact_dir=artifacts / name, concurrency=concurrency, request_rate=rate,
                                 slo=slo, request_timeout=min(params.max_seconds, 600))
        point = f"load point {index + 1}/{len(loads)}" if len(loads) > 1 else "the run"
        code = _invoke(runner, argv, env, workdir, log_path, artifacts / name, params, index, len(loads), deadline)
        if code != 0:
            raise RunFailed(_failure(f"aiperf exited with code {code} during {point}", log_path))
        try:
            export = aiperf.read_export(artifacts / name)
        except aiperf.ExportMissing as exc:
            raise RunFailed(_failure(f"{exc} during {point}", log_path)) from None
        step = aiperf.parse_step(export, index=index, artifact=name, concurrency=concurrency, request_rate=rate,
                                 gpus=0 if config.gpu_free else config.gpus)
        if step.completed == 0:
            raise RunFailed(_failure(f"no request completed during {point}", log_path))
        if step.errors:
            results.warnings.append(f"{point}: {step.errors} request(s) failed: " +
                                    "; ".join(aiperf.export_errors(export))[:500])
        results.steps.append(step)
        BenchmarkRun.objects.filter(pk=run.pk).update(results=results.model_dump(mode="json"))
    now_dep = Deployment.objects.filter(pk=dep.pk).select_related("revision").first()
    if now_dep is None or now_dep.revision_id != dep.revision_id or now_dep.replicas != dep.replicas:
        results.warnings.append("the graph was changed (re-applied or scaled) during the run: "
                                "its numbers mix two configurations")
    return results


def _invoke(runner: JobRunner, argv: list[str], env: dict[str, str], workdir: Path, log_path: Path, artifact: Path,
            params: RunParams, index: int, points: int, deadline: float) -> int:
    """Run one aiperf invocation to its end, publishing progress; stop it on cancel or timeout."""
    invocation = Invocation(argv, env, workdir, log_path)
    try:
        ref = invocation.start()
    except OSError as exc:
        raise RunFailed(f"aiperf could not start: {exc}") from None
    BenchmarkRun.objects.filter(pk=runner.pk).update(pgid=ref.pgid, proc_start=ref.start_ticks, host=hostname())
    progress = aiperf.Progress(artifact)
    try:
        while (code := invocation.poll()) is None:
            time.sleep(POLL_SECONDS)
            now = time.monotonic()
            progress.update(now)
            percent = int(100 * (index + progress.fraction(params, now)) / points)
            where = f" (load point {index + 1}/{points})" if points > 1 else ""
            text = {"starting": "aiperf is starting", "processing": "aiperf is computing the results"}.get(
                progress.phase, f"{progress.records} requests done")
            keep_going, why = _heartbeat(runner, percent, text + where)
            if not keep_going:
                invocation.stop()
                raise RunCancelled(why)
            if now > deadline:
                invocation.stop()
                raise RunFailed(_failure(f"stopped at its time bound: max_seconds={params.max_seconds}", log_path))
    except BaseException:
        invocation.stop()  # whatever happened here, no aiperf process outlives the run
        raise
    invocation.finish()
    return code


class BenchmarkRunner(JobRunner):
    """Runs one benchmark (jobs.runner), once: a run whose worker died is failed by the sweep
    (its aiperf stopped), never retried: half a measurement cannot be resumed. Its work beats
    every second with progress and reads cancellation requests from the row."""

    kind = "benchmark"
    model = BenchmarkRun
    task = EXECUTE_TASK
    message_field = "error"
    failures = (RunFailed, BenchmarkRefused, aiperf.BadTarget, aiperf.ExportMissing)
    stale_pending = STALE_PENDING
    give_up_pending = GIVE_UP_PENDING

    @classmethod
    def lease_seconds(cls) -> float:
        return settings.BENCHMARK_LEASE_SECONDS

    def work(self) -> dict:
        self.renew(host=hostname(), progress_text="starting aiperf")
        run = BenchmarkRun.objects.select_related("graph").get(pk=self.pk)
        # aiperf's temp files and ZMQ IPC sockets: a short path of its own (a Unix socket path has
        # at most 107 bytes, and aiperf exits 0 without results when its sockets cannot bind).
        scratch = Path(tempfile.mkdtemp(prefix=f"bench{self.pk}-"))
        try:
            results = _measure(self, run, run_dir(self.pk), scratch)
        except RunCancelled as exc:
            raise JobFailed(str(exc), state=RunState.CANCELLED) from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return {"results": results.model_dump(mode="json")}

    @classmethod
    def failure_fields(cls, message: str) -> dict:
        return {"error": message[:20000]}

    @classmethod
    def lost(cls, job: BenchmarkRun) -> str:
        """Never tried again (half a measurement cannot be resumed): its aiperf is stopped and
        the run failed with the end of aiperf's log."""
        _kill_orphan(job)
        why = "the worker running this benchmark stopped (its heartbeat expired); aiperf was stopped"
        return "failed" if _finish(job.pk, RunState.FAILED, error=_failure(why, Path(job.log_path))
                                   if job.log_path else why) else ""

    def ending(self, state: str, fields: dict) -> dict:
        return _ending(state, fields)

    def finished(self, state: str) -> None:
        _advance_study(self.pk)


def benchmark_execute(run_id: int) -> str:
    """Run one benchmark (BenchmarkRunner). Safe to call any number of times: only the first
    claims it."""
    return BenchmarkRunner.handle(run_id)


# --- cancel --------------------------------------------------------------------------------------

def _kill_orphan(run: BenchmarkRun) -> None:
    """Stop the aiperf group of a run whose worker is gone, and remove its scratch folder,
    when it ran on this host."""
    if run.host != hostname():
        return
    if run.pgid and run.proc_start is not None:
        stop_group(ProcessRef(pgid=run.pgid, start_ticks=run.proc_start))
    for scratch in Path(tempfile.gettempdir()).glob(f"bench{run.pk}-*"):
        shutil.rmtree(scratch, ignore_errors=True)


@transaction.atomic
def benchmark_cancel(*, run: BenchmarkRun, user: Actor = None, via: str = "ui") -> BenchmarkRun:
    """Cancel a pending run now; ask a running one to stop (its worker does within a second)."""
    audit_record(actor=user, via=via, action="benchmark.cancel", target_type="benchmark", target=str(run.pk),
                 before={"state": run.state})
    who = user.get_username() if user is not None and user.pk else "request"
    now = timezone.now()
    if BenchmarkRun.objects.filter(pk=run.pk, state=RunState.PENDING).update(
            state=RunState.CANCELLED, finished_at=now, cancel_requested_at=now, progress_text="cancelled",
            cancel_requested_by=user if user is not None and user.pk else None, error=f"cancelled by {who}"):
        run.refresh_from_db()
        return run
    locked = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
    if locked.state != RunState.RUNNING:
        raise BenchmarkRefused(f"run #{run.pk} already {locked.state}")
    if locked.cancel_requested_at is None:
        locked.cancel_requested_at = now
        locked.cancel_requested_by = user if user is not None and user.pk else None
        BenchmarkRun.objects.filter(pk=run.pk).update(cancel_requested_at=now,
                                                      cancel_requested_by=locked.cancel_requested_by,
                                                      progress_text="cancelling")
    if locked.lease_until is not None and locked.lease_until < now:  # nobody will notice: do it here
        _kill_orphan(locked)
        _finish(run.pk, RunState.CANCELLED, error=f"cancelled by {who} (its worker had stopped)")
    run.refresh_from_db()
    return run


def artifacts_zip(run: BenchmarkRun) -> Path:
    """A zip of the run's artifacts and aiperf's log, made once the run is finished."""
    workdir = run_dir(run.pk)
    target = workdir / f"benchmark-{run.pk}-artifacts.zip"
    if target.exists() and not run.is_active:
        return target
    if not workdir.exists():
        raise BenchmarkRefused(f"run #{run.pk} has no artifacts")
    partial = target.with_suffix(".zip.part")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(workdir.rglob("*")):
            if path.is_file() and path not in (target, partial):
                archive.write(path, Path(f"benchmark-{run.pk}") / path.relative_to(workdir))
    partial.replace(target)
    return target
