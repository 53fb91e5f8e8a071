"""The one job runner (jobs/runner.py) behind operations and benchmark runs: a live worker's
heartbeat keeps its lease well past the lease's length, a dead one's job is taken over once
the short lease runs out, a job whose broker message was lost is found and run exactly once,
a late attempt records nothing, and no row lock is held while a cluster is being called."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.celery import app as celery_app
from core.catalog import PoolFields
from graphs import operations
from graphs.models import Deployment, Event, Operation
from graphs.runtimes.processes import wait_until
from tests import factories
from tests.k8s_helpers import CLUSTER, NS, dgd_path, make_graph

pytest_plugins = ["tests.k8s_fixtures"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_local_operator(settings):
    """No local operator runs here to observe a local scale: an operation ends when its work does."""
    settings.OPERATION_OBSERVE_SECONDS = 0


def _deployed(name: str):
    pool = PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret="")
    graph = factories.graph(name, model="m", backend="mocker",
                                                  prefill=pool, decode=pool)
    op = operations.graph_apply(graph=graph, via="api")
    operations.operation_run(op.pk)
    op.refresh_from_db()
    assert op.state == "succeeded", op.result
    return graph


def _lockable(model, pk: int) -> bool:
    """Whether another connection could lock the row now (no transaction holds it), or within
    a few milliseconds: a heartbeat's UPDATE of the lease holds the row for the time of its
    statement and commit, which is not a lock held across the cluster call."""
    for _ in range(5):
        try:
            with transaction.atomic():
                list(model.objects.select_for_update(nowait=True).filter(pk=pk))
            return True
        except Exception:
            time.sleep(0.01)
    return False


@pytest.mark.django_db(transaction=True)
def test_a_cluster_call_holds_no_row_lock_and_the_heartbeat_keeps_the_lease(cluster, kube, settings):
    settings.OPERATION_LEASE_SECONDS = 1.5
    settings.JOB_HEARTBEAT_SECONDS = 0.3
    settings.KUBERNETES_READ_TIMEOUT = 10
    graph = make_graph("slow")
    op = operations.graph_apply(graph=graph, runtime="kubernetes", cluster=CLUSTER, namespace=NS, via="api")
    kube.inject("PATCH", dgd_path("slow"), delay=4.0)  # the API server takes 4 s to answer the apply
    worker = threading.Thread(target=operations.operation_run, args=(op.pk,))
    worker.start()
    try:
        wait_until(lambda: kube.find_requests("PATCH", dgd_path("slow")), timeout=10, what="the apply to be sent")
        deployment = Deployment.objects.get(graph=graph)
        leases = []
        while worker.is_alive() and kube.find_requests("PATCH", dgd_path("slow"))[0].status is None:
            # While the cluster call is in flight, both rows it will write are free...
            assert _lockable(Operation, op.pk) and _lockable(Deployment, deployment.pk)
            leases.append(Operation.objects.values_list("lease_until", flat=True).get(pk=op.pk))
            # ...and the lease never runs out, though the call lasts longer than the lease.
            assert leases[-1] > timezone.now(), "the lease expired while its worker was alive"
            time.sleep(0.2)
            if len(leases) > 15:
                break
        assert len(set(leases)) >= 3, "the heartbeat did not renew the lease"
    finally:
        worker.join(30)
    op.refresh_from_db()
    assert (op.state, op.attempts) == ("succeeded", 1), op.result
    assert Deployment.objects.get(graph=graph).active


@pytest.mark.django_db
def test_a_dead_workers_operation_is_taken_over_once_its_short_lease_runs_out(settings):
    assert settings.OPERATION_LEASE_SECONDS <= 20  # the default: a dead worker is noticed within 20 s
    graph = _deployed("dead")
    op = operations.graph_scale(graph=graph, service="decode", replicas=3, via="api")
    assert operations.OperationRunner.claim(op.pk) == 1  # a worker took it, then died: no heartbeat
    claimed = Operation.objects.get(pk=op.pk).lease_until
    # the runner's lease is OPERATION_LEASE_SECONDS from the claim, never longer
    assert claimed <= timezone.now() + dt.timedelta(seconds=settings.OPERATION_LEASE_SECONDS)
    assert operations.operation_run(op.pk) == "not claimed"  # its lease still runs
    Operation.objects.filter(pk=op.pk).update(lease_until=timezone.now() - dt.timedelta(seconds=1))
    assert operations.operation_run(op.pk) == "succeeded"
    op.refresh_from_db()
    assert op.attempts == 2 and Deployment.objects.get(graph=graph).replicas == {"decode": 3}


@pytest.mark.django_db
def test_a_late_attempt_records_nothing(settings):
    graph = _deployed("late")
    op = operations.graph_scale(graph=graph, service="decode", replicas=4, via="api")
    first = operations.OperationRunner(op.pk, operations.OperationRunner.claim(op.pk))
    first.work()
    # Its lease ran out before it finished and another attempt took the row over.
    Operation.objects.filter(pk=op.pk).update(lease_until=timezone.now() - dt.timedelta(seconds=1))
    second = operations.OperationRunner(op.pk, operations.OperationRunner.claim(op.pk))
    generation = Deployment.objects.get(graph=graph).generation
    assert first.finish("succeeded", {"result": "late"}) is False
    assert Deployment.objects.get(graph=graph).generation == generation
    assert second.finish("succeeded", second.work()) is True
    assert Deployment.objects.get(graph=graph).generation == generation + 1
    assert Event.objects.filter(graph=graph, reason="Scaled").count() == 1


@pytest.mark.django_db
def test_an_unexpected_error_ends_the_job_failed_as_an_internal_error(monkeypatch):
    graph = _deployed("boom")
    op = operations.graph_scale(graph=graph, service="decode", replicas=2, via="api")

    def explode(*args, **kwargs):
        raise KeyError("replicas")

    monkeypatch.setattr(operations, "_execute_change", explode)
    assert operations.operation_run(op.pk) == "failed"
    op.refresh_from_db()
    assert op.result.startswith("internal error:") and op.lease_until is None


def _database_url() -> str:
    s = connection.settings_dict
    host, port = s.get("HOST") or "127.0.0.1", s.get("PORT") or 5432
    return f"postgres://{s.get('USER') or 'postgres'}@{host}:{port}/{s['NAME']}"


@pytest.fixture
def start_worker(tmp_path):
    """Starts a real Celery worker on the run's broker when the test calls it."""
    env = dict(os.environ, DATABASE_URL=_database_url(), CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
               CONTROLPLANE_VAR_DIR=str(settings.VAR_DIR), CELERY_TASK_ALWAYS_EAGER="0",
               OPERATION_OBSERVE_SECONDS="0")
    procs = []
    with open(tmp_path / "worker.log", "ab") as log:
        def start() -> None:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--pool", "solo",
                 "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

        yield start
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    print((tmp_path / "worker.log").read_text()[-3000:])


@pytest.mark.django_db(transaction=True)
def test_an_operation_whose_broker_message_was_lost_is_found_and_run_once(start_worker):
    if connection.vendor != "postgresql":
        pytest.skip("a worker process needs a database server it shares with the test")
    graph = _deployed("lost")
    op = operations.graph_scale(graph=graph, service="decode", replicas=5, via="api")
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge("celery")  # the broker restarted with its queue lost
    start_worker()
    assert Operation.objects.get(pk=op.pk).state == "pending"
    # Not yet stale: nothing is sent again while the message may still be on its way.
    assert operations.OperationRunner.sweep(timezone.now())["requeued"] == 0
    Operation.objects.filter(pk=op.pk).update(created_at=timezone.now() - operations.STALE_PENDING * 2)
    for _ in range(3):  # three sweeps before the worker gets to it: three messages, one run
        assert operations.OperationRunner.sweep(timezone.now())["requeued"] == 1
    wait_until(lambda: not Operation.objects.get(pk=op.pk).is_active, timeout=60, what="the re-enqueued operation")
    op.refresh_from_db()
    assert (op.state, op.attempts) == ("succeeded", 1), op.result
    assert Event.objects.filter(graph=graph, reason="Scaled").count() == 1
    assert Deployment.objects.get(graph=graph).replicas == {"decode": 5}


@pytest.mark.django_db
def test_a_database_that_goes_away_mid_work_hands_the_job_to_another_attempt(monkeypatch):
    from django.db import OperationalError

    graph = _deployed("blip")
    op = operations.graph_scale(graph=graph, service="decode", replicas=2, via="api")
    real = operations._execute_change

    def cut(*args, **kwargs):
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(operations, "_execute_change", cut)
    with pytest.raises(OperationalError):
        operations.operation_run(op.pk)
    op.refresh_from_db()
    assert op.state == "running" and op.lease_until <= timezone.now() and "database went away" in op.result
    monkeypatch.setattr(operations, "_execute_change", real)
    assert operations.operation_run(op.pk) == "succeeded"  # the next attempt (the sweep's) does it
    op.refresh_from_db()
    assert op.attempts == 2
