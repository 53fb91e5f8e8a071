"""The operator's loop of the seed brief on the local runtime, with real Dynamo processes:
apply, wait for ready, chat, scale each pool on its own, kill a worker, delete."""

from __future__ import annotations

import os
import signal
import threading

import httpx
import pytest
from django.db import connections

from controlplane.celery import app as celery_app
from core.catalog import PoolFields, build_spec
from core.errors import OperationRefused
from graphs import operations, services
from graphs.models import Deployment, Event, Operation, Pod
from graphs.runtimes.processes import group_members, port_is_free, wait_until
from tests import factories

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]


def _graph(name="e2e"):
    return factories.graph(name, model=f"{name}-model", backend="mocker", pool=factories.CPU)


def _converge(operator, graph, predicate, timeout=90):
    def step():
        operator.reconcile_once()
        dep = Deployment.objects.get(graph=graph)
        pods = {p.name: p for p in Pod.objects.filter(deployment=dep)}
        return predicate(dep, pods)

    return wait_until(step, timeout=timeout, interval=0.3, what="the graph to converge")


def _run_closing(op_id: int) -> None:
    try:
        operations.operation_run(op_id)
    finally:
        connections.close_all()


def _pids(operator, names):
    return {n: operator.supervisor.status(n).pid for n in names}


def test_apply_serve_scale_each_pool_restart_and_delete(eager, operator):
    graph = _graph()
    op = operations.graph_apply(graph=graph, via="api")
    op.refresh_from_db()
    assert op.state == "succeeded", op.result

    _converge(operator, graph, lambda dep, pods: dep.state == "ready" and len(pods) == 3)
    dep = Deployment.objects.get(graph=graph)
    assert set(Pod.objects.filter(deployment=dep).values_list("name", flat=True)) == {
        "e2e-frontend-0", "e2e-prefill-0", "e2e-decode-0"}
    reply = httpx.post(f"{dep.endpoint}/v1/chat/completions", timeout=30,
                       json={"model": "e2e-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    assert reply.status_code == 200
    assert reply.json()["usage"]["completion_tokens"] == 8
    # The workers' Dynamo instance ids, as pod names (what the playground shows for a reply).
    workers = _converge(operator, graph, lambda dep, pods: len(dep.runtime_info.get("workers", {})) == 2
                        and dep.runtime_info["workers"])
    assert sorted(workers.values()) == ["e2e-decode-0", "e2e-prefill-0"]
    assert all(key.isdigit() for key in workers)

    # Scale prefill 1 -> 2: only a prefill process is added; decode and frontend keep their pids.
    before = _pids(operator, ["e2e-frontend-0", "e2e-decode-0", "e2e-prefill-0"])
    operations.graph_scale(graph=graph, service="prefill", replicas=2, via="api")
    _converge(operator, graph, lambda dep, pods: "e2e-prefill-1" in pods and pods["e2e-prefill-1"].ready)
    assert _pids(operator, before) == before
    # Then decode 1 -> 2: prefill stays at 2, nothing else restarts.
    before = _pids(operator, ["e2e-frontend-0", "e2e-decode-0", "e2e-prefill-0", "e2e-prefill-1"])
    operations.graph_scale(graph=graph, service="decode", replicas=2, via="api")
    _converge(operator, graph, lambda dep, pods: "e2e-decode-1" in pods and pods["e2e-decode-1"].ready)
    assert _pids(operator, before) == before
    assert Deployment.objects.get(graph=graph).desired_replicas(graph.head.graph_spec) == {
        "Frontend": 1, "prefill": 2, "decode": 2}

    # Kill a worker: it is restarted, RESTARTS counts it, and an event says so.
    victim = operator.supervisor.status("e2e-decode-0").pid
    os.kill(victim, signal.SIGKILL)
    _converge(operator, graph, lambda dep, pods: pods["e2e-decode-0"].restarts == 1 and pods["e2e-decode-0"].ready)
    assert Event.objects.filter(graph=graph, reason="Exited", object="e2e-decode-0").exists()

    # Delete: every process is gone, the pods leave the cache, the ports are free again.
    groups = [operator.supervisor.status(n).pid for n in operator.supervisor.names()]
    ports = list(Pod.objects.filter(deployment__graph=graph).values_list("port", flat=True))
    operations.graph_undeploy(graph=graph, via="api")
    _converge(operator, graph, lambda dep, pods: dep.state == "not_deployed" and not pods)
    assert operator.supervisor.names() == []
    assert groups and all(not group_members(g) for g in groups)
    assert ports and all(port_is_free(p) for p in ports)
    kinds = list(Operation.objects.filter(graph=graph).order_by("created_at").values_list("kind", "state"))
    assert kinds == [("apply", "succeeded"), ("scale", "succeeded"), ("scale", "succeeded"),
                     ("delete", "succeeded")]


def test_bad_scales_and_concurrent_operations_are_refused_and_change_nothing(eager, operator, settings):
    graph = _graph("refusals")
    with pytest.raises(OperationRefused, match="not deployed"):
        operations.graph_scale(graph=graph, service="decode", replicas=2)
    operations.graph_apply(graph=graph)
    for bad in (-1, 100000):
        with pytest.raises(OperationRefused, match="whole number from 0 to"):
            operations.graph_scale(graph=graph, service="decode", replicas=bad)
    with pytest.raises(OperationRefused, match="no service 'nope'"):
        operations.graph_scale(graph=graph, service="nope", replicas=1)
    # An unfinished operation blocks the next one.
    celery_app.conf.task_always_eager = False
    try:
        pending = operations.graph_scale(graph=graph, service="decode", replicas=2)
        with pytest.raises(OperationRefused, match="already has a pending scale"):
            operations.graph_apply(graph=graph)
    finally:
        celery_app.conf.task_always_eager = True
    # A scale succeeds only once the runtime runs the new pool size: its worker (a thread here)
    # waits for the operator, stepped by this test, to run it.
    settings.OPERATION_OBSERVE_SECONDS = 120
    asked = Deployment.objects.get(graph=graph).generation
    worker = threading.Thread(target=_run_closing, args=(pending.pk,), daemon=True)
    worker.start()
    _converge(operator, graph, lambda dep, pods: Operation.objects.get(pk=pending.pk).state != "running"
              and dep.generation > asked)
    worker.join(10)
    done = Operation.objects.get(pk=pending.pk)
    assert done.state == "succeeded" and "2 running, observed" in done.result
    assert Operation.objects.filter(graph=graph).count() == 2


def test_a_scale_past_the_process_limit_is_refused_up_front_and_never_stops_running_pods(eager, operator, settings):
    settings.LOCAL_RUNTIME_MAX_PROCESSES = operator.max_processes = 4
    graph = _graph("limit")
    operations.graph_apply(graph=graph)
    _converge(operator, graph, lambda dep, pods: len(pods) == 3 and all(p.phase == "Running" for p in pods.values()))
    before = _pids(operator, ["limit-frontend-0", "limit-prefill-0", "limit-decode-0"])
    with pytest.raises(OperationRefused, match=r"at most 4 processes on this host \(setting "
                                               r"LOCAL_RUNTIME_MAX_PROCESSES\).*at most 2 replicas of decode fit"):
        operations.graph_scale(graph=graph, service="decode", replicas=100)
    assert Operation.objects.filter(graph=graph, kind="scale").count() == 0
    # The race the refusal cannot see (the desired size written past it): what runs keeps running.
    Deployment.objects.filter(graph=graph).update(replicas={"decode": 100})
    dep = _converge(operator, graph, lambda dep, pods: dep.state == "failed" and dep)
    assert "3 running process(es) keep running" in dep.message and "LOCAL_RUNTIME_MAX_PROCESSES" in dep.message
    assert _pids(operator, before) == before
    assert Pod.objects.filter(deployment=dep).count() == 3


def test_an_invalid_revision_is_not_applied(eager, operator):
    spec = build_spec(template="vllm-disagg", name="invalid", prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    graph = services.graph_create(spec=spec)
    with pytest.raises(OperationRefused, match="cannot be applied"):
        operations.graph_apply(graph=graph)
    assert not Deployment.objects.filter(graph=graph).exists()
    assert not Operation.objects.filter(graph=graph).exists()


def test_ports_already_taken_are_skipped(eager, operator):
    import socket

    held = socket.socket()
    held.bind(("127.0.0.1", 24000))
    held.listen()
    try:
        graph = _graph("ports")
        operations.graph_apply(graph=graph)
        _converge(operator, graph, lambda dep, pods: dep.state == "ready")
        assert 24000 not in set(Pod.objects.filter(deployment__graph=graph).values_list("port", flat=True))
    finally:
        held.close()


def test_a_graph_beyond_the_process_cap_fails_with_the_reason_and_starts_nothing(eager, operator):
    operator.max_processes = 2
    graph = _graph("capped")
    operations.graph_apply(graph=graph)
    operator.reconcile_once()
    dep = Deployment.objects.get(graph=graph)
    assert dep.state == "failed"
    assert "at most 2 processes" in dep.message
    assert operator.supervisor.names() == []


def test_a_dry_run_changes_nothing_and_the_page_shows_its_diff(eager, operator, client_for):
    graph = _graph("preview")
    operations.graph_apply(graph=graph)
    revised = graph.head.graph_spec.model_copy(deep=True)
    revised.services[2].replicas = 3
    services.graph_update(graph=graph, spec=revised)
    generation = Deployment.objects.get(graph=graph).generation
    op = operations.graph_apply(graph=graph, dry_run=True)
    op.refresh_from_db()
    assert op.state == "succeeded" and "would change" in op.result
    assert "-    replicas: 1" in op.diff and "+    replicas: 3" in op.diff
    deployment = Deployment.objects.get(graph=graph)
    assert deployment.generation == generation and deployment.revision.number == 1
    page = client_for("viewer").get("/graphs/preview/status/").content.decode()
    assert "diff against the live graph" in page and "+    replicas: 3" in page
