"""The one job model behind operations and benchmark runs (jobs.models.Job): the database keeps
one unfinished job of a kind per graph, a claim has one winner, a lease keeps a run alive and
a late finish cannot overwrite the sweep's verdict."""

import datetime as dt

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from benchmarks.models import BenchmarkRun, RunState
from graphs.models import Operation, OperationState
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def graph():
    return factories.graph("jobs", model="m", backend="mocker")


def _run(graph, **fields):
    return BenchmarkRun.objects.create(graph=graph, revision=graph.head, profile="custom", params={}, **fields)


@pytest.mark.parametrize("make", [
    lambda g, **f: Operation.objects.create(graph=g, kind="apply", **f),
    _run,
], ids=["operation", "benchmark run"])
def test_the_database_keeps_one_unfinished_job_of_a_kind_per_graph(graph, make):
    make(graph)
    with pytest.raises(IntegrityError), transaction.atomic():
        make(graph)
    make(graph, state="failed")  # finished ones do not count


def test_a_claim_has_one_winner_and_sets_the_lease(graph):
    op = Operation.objects.create(graph=graph, kind="apply")
    assert Operation.claim(op.pk, lease_seconds=30) is True
    assert Operation.claim(op.pk, lease_seconds=30) is False
    op.refresh_from_db()
    assert op.state == OperationState.RUNNING and op.started_at is not None
    # the lease asked for, no longer: a worker that dies is noticed once it ends
    assert timezone.now() + dt.timedelta(seconds=20) < op.lease_until <= timezone.now() + dt.timedelta(seconds=30)


def test_a_renewed_lease_is_not_expired_and_an_unrenewed_one_is_found(graph):
    run = _run(graph)
    assert BenchmarkRun.claim(run.pk, lease_seconds=0.001)
    later = timezone.now() + dt.timedelta(seconds=1)
    assert list(BenchmarkRun.lease_expired(later)) == [run]
    assert BenchmarkRun.renew(run.pk, lease_seconds=60, progress=50)
    assert list(BenchmarkRun.lease_expired(later)) == []
    renewed = BenchmarkRun.objects.get(pk=run.pk).lease_until
    assert renewed <= timezone.now() + dt.timedelta(seconds=60)  # a renewal extends by its lease, no more
    assert list(BenchmarkRun.lease_expired(timezone.now() + dt.timedelta(seconds=61))) == [run]
    assert BenchmarkRun.objects.get(pk=run.pk).progress == 50


def test_a_late_finish_cannot_overwrite_what_the_sweep_decided(graph):
    run = _run(graph)
    BenchmarkRun.claim(run.pk, lease_seconds=60)
    run.refresh_from_db()
    assert BenchmarkRun.give_up(run, RunState.FAILED, error="worker lost") == 1
    assert BenchmarkRun.finish(run.pk, RunState.SUCCEEDED) is False
    run.refresh_from_db()
    assert (run.state, run.error, run.lease_until) == (RunState.FAILED, "worker lost", None)
    assert not run.is_active


def test_waiting_jobs_are_those_pending_since_before_the_cut(graph):
    op = Operation.objects.create(graph=graph, kind="apply")
    assert list(Operation.waiting_since(timezone.now() + dt.timedelta(seconds=1))) == [op]
    assert list(Operation.waiting_since(op.created_at)) == []
