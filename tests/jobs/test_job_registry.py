"""Every kind of background work in one registry (jobs/registry.py), looked after by one sweep:
a kind is one class, the sweep asks each for what got stuck and each answers by its rules."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from django.conf import settings
from django.utils import timezone

from benchmarks.models import BenchmarkRun, RunState
from controlplane.celery import app as celery_app
from graphs.models import Operation, OperationState
from jobs import registry
from jobs.models import RUNNING
from jobs.registry import Driver
from jobs.runner import JobRunner
from sizing.models import Estimate, EstimateState
from tests import factories

pytestmark = pytest.mark.django_db

KINDS = {"operation", "benchmark", "estimate", "study", "recommendation"}


@pytest.fixture
def graph():
    return factories.graph("swept", model="m", backend="mocker")


@pytest.fixture
def kinds():
    """The registry as the product declares it, restored after a test that adds a kind."""
    before = dict(registry.load())
    yield registry.KINDS
    registry.KINDS.clear()
    registry.KINDS.update(before)


def _ago(**delta) -> dt.datetime:
    return timezone.now() - dt.timedelta(**delta)


def test_every_kind_of_background_work_is_in_the_registry_with_a_task_that_runs_it(kinds):
    assert set(kinds) == KINDS
    for name, kind in kinds.items():
        assert kind.task in celery_app.tasks, (name, kind.task)
    # one periodic entry looks after all of them
    sweeps = [e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "jobs.tasks.jobs_sweep"]
    assert len(sweeps) == 1 and "reconcile" not in " ".join(settings.CELERY_BEAT_SCHEDULE)


def test_the_one_sweep_ends_what_each_kind_lost_by_that_kind_s_rules(graph, kinds):
    # an operation whose worker died on its last attempt
    op = Operation.objects.create(graph=graph, kind="apply", state=OperationState.RUNNING, attempts=3,
                                  lease_until=_ago(seconds=5), result="applying")
    # a benchmark run recorded 11 minutes ago that no worker ever took
    run = BenchmarkRun.objects.create(graph=graph, revision=graph.head, profile="custom", params={})
    BenchmarkRun.objects.filter(pk=run.pk).update(created_at=_ago(minutes=11))
    # a sizing estimate whose worker died mid-search
    estimate = Estimate.objects.create(inputs={}, input_key="k", state=RUNNING, attempts=1,
                                       lease_until=_ago(seconds=5), progress_text="searching")

    assert registry.sweep() == {"benchmark": {"failed": 1}, "estimate": {"failed": 1}, "operation": {"failed": 1}}

    op.refresh_from_db()
    run.refresh_from_db()
    estimate.refresh_from_db()
    assert op.state == OperationState.FAILED and op.result == "applying\ngave up after 3 attempts (worker lost)"
    assert run.state == RunState.FAILED and run.error == "no worker picked this benchmark up within 10 minutes"
    assert (estimate.state, estimate.error, estimate.progress_text) == (
        EstimateState.FAILED, "the worker running this estimate was lost", "failed")
    assert registry.sweep() == {}  # nothing is stuck any more: a second sweep does nothing


def test_a_sweep_leaves_what_is_neither_late_nor_lost(graph, kinds):
    op = Operation.objects.create(graph=graph, kind="apply")  # just recorded: its message is on its way
    running = Estimate.objects.create(inputs={}, input_key="k", state=RUNNING, attempts=1,
                                      lease_until=timezone.now() + dt.timedelta(seconds=30))
    assert registry.sweep() == {}
    assert Operation.objects.get(pk=op.pk).state == OperationState.PENDING
    assert Estimate.objects.get(pk=running.pk).state == RUNNING


def test_a_new_kind_is_one_class_and_the_sweep_asks_it(kinds):
    asked = []

    class Nightly(Driver):
        kind = "nightly"
        task = "jobs.tasks.jobs_sweep"
        step_delay = 1.0

        @classmethod
        def active(cls):
            return [7, 8]

        @classmethod
        def advance(cls, pk):
            asked.append(pk)
            return "done"

    assert kinds["nightly"] is Nightly
    assert registry.sweep()["nightly"] == {"advanced": 2} and asked == [7, 8]


def test_two_kinds_of_one_name_are_refused(kinds):
    with pytest.raises(ValueError, match="two job kinds are named 'operation'"):
        class Again(JobRunner):
            kind = "operation"


def test_a_subclass_that_names_no_kind_of_its_own_is_not_one(kinds):
    class Helper(JobRunner):  # a base for other runners: no kind of its own
        pass

    assert Helper not in kinds.values() and set(kinds) == KINDS


def test_a_job_that_moved_on_while_the_sweep_read_it_is_left_as_it_is(graph, kinds, monkeypatch):
    from graphs.operations import OperationRunner

    op = Operation.objects.create(graph=graph, kind="apply", state=OperationState.RUNNING, attempts=3,
                                  lease_until=_ago(seconds=5))
    read = list(Operation.lease_expired(timezone.now()))
    Operation.objects.filter(pk=op.pk).update(state=OperationState.SUCCEEDED)  # finished meanwhile
    monkeypatch.setattr(Operation, "lease_expired", classmethod(lambda cls, now: read))
    assert OperationRunner.sweep(timezone.now()) == {"requeued": 0, "failed": 0}
    assert Operation.objects.get(pk=op.pk).state == OperationState.SUCCEEDED


def test_a_kind_whose_sweep_fails_does_not_keep_the_others_from_theirs(graph, kinds, caplog):
    class Broken(Driver):
        kind = "broken"
        task = "jobs.tasks.jobs_sweep"
        step_delay = 1.0

        @classmethod
        def active(cls):
            raise RuntimeError("its table is unreadable")

    caplog.set_level(logging.ERROR, logger="jobs.registry")
    op = Operation.objects.create(graph=graph, kind="apply", state=OperationState.RUNNING, attempts=3,
                                  lease_until=_ago(seconds=5))
    assert registry.sweep() == {"broken": {"failed_sweep": 1}, "operation": {"failed": 1}}
    assert Operation.objects.get(pk=op.pk).state == OperationState.FAILED
    assert "the sweep of job kind broken failed" in caplog.text
