"""Sizing estimates: ask (answered from a stored estimate of the same inputs when there is
one), run (a job on the one runner: claim, AIConfigurator, finish; swept as every job is),
compare. Every write is
here; pages, the API and the CLI call these."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from audit.services import audit_record
from core.errors import Unprocessable
from jobs.dispatch import enqueue
from jobs.runner import JobFailed, JobRunner

from . import aic
from .models import Estimate, EstimateState

if TYPE_CHECKING:
    from accounts.roles import Actor

log = logging.getLogger(__name__)

EXECUTE_TASK = "sizing.tasks.estimate_execute"
LEASE_SECONDS = 120.0  # one AIConfigurator search takes seconds; the lease is renewed at each step
WAITING_SECONDS = 120.0  # a pending estimate no worker picked up is enqueued again after this


class SizingRefused(Unprocessable):
    """Inputs AIConfigurator cannot answer for (not in its support matrix, out of range), or an
    estimate that cannot be used as asked: HTTP 422, a rule of AIConfigurator's data that the
    API's schema cannot state."""


class SizingConflict(SizingRefused):
    """An estimate that cannot be used as asked in its current state (not finished): HTTP 409."""

    status = 409


def estimate_dir(estimate_id: int) -> Path:
    return Path(settings.SIZING_DIR) / "estimates" / str(estimate_id)


def input_key(inputs: aic.Inputs) -> str:
    """The cache key: the inputs and the AIConfigurator (and database package) that answers."""
    blob = json.dumps({"inputs": inputs.as_dict(), "aic": aic.version(), "core": aic.core_version()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def cached_estimate(inputs: aic.Inputs) -> Estimate | None:
    """A stored answer to the same inputs (or one on its way), newest first; failures are not kept."""
    return (Estimate.objects.filter(input_key=input_key(inputs))
            .exclude(state=EstimateState.FAILED).order_by("-created_at", "-id").first())


@transaction.atomic
def estimate_request(*, inputs: aic.Inputs, user: Actor = None, via: str = "ui", fresh: bool = False) -> tuple[
        Estimate, bool]:
    """The estimate for ``inputs`` and whether it came from the cache. A new one is recorded
    pending and run by a worker. Raises SizingRefused naming the field AIConfigurator refuses."""
    try:
        aic.check_inputs(inputs)
    except aic.SizingError as exc:
        raise SizingRefused(str(exc)) from None
    if not fresh:
        hit = cached_estimate(inputs)
        if hit is not None:
            return hit, True
    estimate = Estimate.objects.create(inputs=inputs.as_dict(), input_key=input_key(inputs), via=via,
                                       requested_by=user if user is not None and user.pk else None,
                                       progress_text="waiting for a worker")
    enqueue(EXECUTE_TASK, estimate.pk)
    audit_record(actor=user, via=via, action="sizing.estimate", target_type="estimate", target=str(estimate.pk),
                 after={"inputs": estimate.inputs})
    return estimate, False


class EstimateRunner(JobRunner):
    """One AIConfigurator search (jobs.runner), once: the row ends succeeded with the answer, its
    artefacts kept under ``SIZING_DIR``, or failed with AIConfigurator's reason. A search whose
    worker died is failed by the sweep, after which the same inputs are estimated afresh; one no
    worker took is sent again after WAITING_SECONDS."""

    kind = "estimate"
    model = Estimate
    task = EXECUTE_TASK
    message_field = "error"
    failures = (aic.SizingError,)
    stale_pending = dt.timedelta(seconds=WAITING_SECONDS)

    @classmethod
    def lease_seconds(cls) -> float:
        return LEASE_SECONDS

    @classmethod
    def failure_fields(cls, message: str) -> dict:
        return {"error": message[:20000], "progress_text": "failed"}

    @classmethod
    def lost(cls, job: Estimate) -> str:
        return cls.fail(job, "the worker running this estimate was lost")

    def report(self, percent: int, text: str) -> None:
        self.renew(progress=percent, progress_text=text[:200])

    def work(self) -> dict:
        self.renew(progress_text="starting")
        estimate = Estimate.objects.get(pk=self.pk)
        workdir = estimate_dir(self.pk)
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        try:
            result = aic.run_default(estimate.estimate_inputs, save_dir=workdir, progress=self.report)
        except aic.SizingError:
            raise
        except Exception as exc:  # AIConfigurator's internals raise what they like; the row says what
            log.exception("estimate %s: AIConfigurator failed", self.pk)
            raise JobFailed(f"AIConfigurator failed: {exc!r}") from exc
        return {"result": result, "progress": 100, "progress_text": "done", "elapsed_s": result["elapsed_s"],
                "perf_db_version": result["perf_db_version"] or "", "aiconfigurator_version": result["aiconfigurator"],
                "artifact_dir": str(workdir)}


def estimate_execute(estimate_id: int) -> str:
    """Run a pending estimate once (EstimateRunner); "not claimed" when another caller has it."""
    return EstimateRunner.handle(estimate_id)


def estimates_compare(first: Estimate, second: Estimate) -> dict:
    """Two answers side by side: inputs that differ, and each one's best configuration."""
    if not first.is_finished or not second.is_finished:
        raise SizingConflict("both estimates must be finished to compare them")
    keys = sorted(set(first.inputs) | set(second.inputs))
    changed = {k: [first.inputs.get(k), second.inputs.get(k)] for k in keys
               if first.inputs.get(k) != second.inputs.get(k)}

    def best(e: Estimate) -> dict | None:
        chosen = e.result.get("chosen")
        return e.configuration(chosen, 1) if chosen else None

    return {"estimates": [first.pk, second.pk], "inputs_changed": changed,
            "chosen": [first.result.get("chosen"), second.result.get("chosen")],
            "best": [best(first), best(second)],
            "best_throughputs": [first.result.get("best_throughputs"), second.result.get("best_throughputs")],
            "perf_db_version": [first.perf_db_version, second.perf_db_version]}
