"""A Celery worker killed in the middle of operations loses nothing: every operation ends
succeeded or failed (never stuck), and none is applied twice. Real Celery worker processes,
the real broker of the run (Redis in CI), the real database."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from controlplane.celery import app as celery_app
from core.catalog import PoolFields, build_spec
from graphs import operations, services
from graphs.models import Deployment, Event, Operation
from graphs.runtimes.processes import wait_until
from jobs.registry import sweep as jobs_sweep

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("FAULT_TRIALS", "20"))


def _database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or "postgres"
    return f"postgres://{user}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


class Worker:
    def __init__(self, env, log):
        self.env = env
        self.log = log
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--pool", "solo", "--without-gossip",
             "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"],
            cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def worker(tmp_path):
    env = dict(os.environ, DATABASE_URL=_database_url(), CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
               CONTROLPLANE_VAR_DIR=str(settings.VAR_DIR), OPERATION_FAULT_DELAY="0.8",
               OPERATION_LEASE_SECONDS="2", CELERY_TASK_ALWAYS_EAGER="0",
               # No local operator runs here: a scale succeeds once recorded, not once observed.
               OPERATION_OBSERVE_SECONDS="0")
    celery_app.conf.task_always_eager = False
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge("celery")
    with open(tmp_path / "worker.log", "ab") as log:
        w = Worker(env, log)
        yield w
        w.kill()
    print((tmp_path / "worker.log").read_text()[-3000:])


def test_killing_the_worker_mid_operation_never_leaves_one_stuck_or_doubled(worker, settings):
    settings.OPERATION_LEASE_SECONDS = 2
    settings.LOCAL_RUNTIME_MAX_PROCESSES = 100  # the revisions below grow prefill past the host's default
    spec = build_spec(template="mocker-disagg", name="faults", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""),
                      decode=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""))
    graph = services.graph_create(spec=spec)
    worker.start()
    apply = operations.graph_apply(graph=graph, via="api")
    wait_until(lambda: not Operation.objects.get(pk=apply.pk).is_active, timeout=60, what="the first apply")
    apply.refresh_from_db()
    assert apply.state == "succeeded", apply.result
    generation0 = Deployment.objects.get(graph=graph).generation

    rng = random.Random(1234)
    ops = []
    for trial in range(TRIALS):
        if trial % 2:
            # An apply of a new revision (unique prefill replicas, so every apply changes something).
            revised = graph.head.graph_spec.model_copy(deep=True)
            revised.services[1].replicas = 10 + trial
            services.graph_update(graph=graph, spec=revised, message=f"trial {trial}")
            op = operations.graph_apply(graph=graph, via="api")
        else:
            op = operations.graph_scale(graph=graph, service="decode", replicas=2 + trial % 4, via="api")
        ops.append(op.pk)
        # Kill at a random point: before the claim, inside the transaction, or after it.
        time.sleep(rng.uniform(0.0, 1.6))
        worker.kill()
        worker.start()

        def settled(op_id=op.pk):
            jobs_sweep()
            return not Operation.objects.get(pk=op_id).is_active

        wait_until(settled, timeout=60, interval=0.5, what=f"operation {op.pk} to finish")

    states = dict(Operation.objects.filter(pk__in=ops).values_list("pk", "state"))
    assert set(states.values()) <= {"succeeded", "failed"}, states
    succeeded = [pk for pk in ops if states[pk] == "succeeded"]
    assert succeeded, "no operation survived any kill: the test did not exercise recovery"
    deployment = Deployment.objects.get(graph=graph)
    # Each succeeded operation changed the desired state exactly once and left exactly one event...
    assert deployment.generation - generation0 == len(succeeded)
    kinds = dict(Operation.objects.filter(pk__in=succeeded).values_list("pk", "kind"))
    assert Event.objects.filter(graph=graph, reason="Scaled").count() == sum(k == "scale" for k in kinds.values())
    assert Event.objects.filter(graph=graph, reason="Applied").count() == 1 + sum(k == "apply" for k in kinds.values())
    # ...and the live state is exactly what replaying the succeeded ones gives.
    revision, replicas = apply.revision_id, {}
    for op in Operation.objects.filter(pk__in=succeeded).order_by("created_at", "id"):
        if op.kind == "apply":
            revision, replicas = op.revision_id, {}
        else:
            replicas[op.params["service"]] = op.params["replicas"]
    assert (deployment.revision_id, deployment.replicas) == (revision, replicas)
    retried = Operation.objects.filter(pk__in=ops, attempts__gte=2).count()
    # Kills landing inside an operation are what this test is about: make sure some did.
    assert retried, "no kill landed inside an operation"
    print(f"{len(succeeded)} of {TRIALS} operations succeeded ({retried} after their worker was killed mid-way), "
          f"{TRIALS - len(succeeded)} failed")
    for pk in ops:
        op = Operation.objects.get(pk=pk)
        assert op.finished_at is not None and op.lease_until is None
        if op.state == "failed":
            assert "gave up" in op.result or op.result
