"""A graph made from an AIConfigurator configuration, served on the local runtime by real
Dynamo processes: its mocker workers are started with the profile data written from
AIConfigurator's estimate, and every label says who times them."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from controlplane.celery import app as celery_app
from graphs import operations
from graphs.engines import deployment_simulation
from graphs.models import Deployment, Graph, Pod
from graphs.runtimes.local.operator import LocalOperator
from graphs.runtimes.processes import wait_until
from sizing import aic, configurations, services, timing

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def operator(tmp_path, settings):
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
    settings.SIZING_DIR = tmp_path / "sizing"
    celery_app.conf.task_always_eager = True
    op = LocalOperator(runtime_dir=tmp_path / "runtime", port_min=settings.LOCAL_RUNTIME_PORT_MIN,
                       port_max=settings.LOCAL_RUNTIME_PORT_MAX)
    yield op
    op.shutdown()
    celery_app.conf.task_always_eager = False


def test_a_graph_from_a_configuration_serves_on_mockers_timed_by_aiconfigurator(operator):
    inputs = aic.Inputs(model="Qwen/Qwen3-32B", system="h200_sxm", total_gpus=8, isl=4000, osl=500, ttft=600,
                        tpot=20, backend="vllm")
    estimate, _ = services.estimate_request(inputs=inputs, via="api")
    estimate.refresh_from_db()
    assert estimate.state == "succeeded", estimate.error
    made = configurations.graph_from_estimate(estimate=estimate, name="qwen-h200", mode="disagg", rank=1)
    graph = Graph.objects.get(name=made.graph)
    op = operations.graph_apply(graph=graph, via="api")
    op.refresh_from_db()
    assert op.state == "succeeded", op.result

    def ready():
        operator.reconcile_once()
        dep = Deployment.objects.get(graph=graph)
        return dep.state == "ready" and dep

    dep = wait_until(ready, timeout=120, interval=0.3, what="the sized graph to be ready")
    profile = str(timing.profile_dir(estimate.pk, "disagg", 1) / timing.PROFILE_FILE)
    workers = [p for p in operator.plan(dep) if p.kind == "mocker"]
    assert workers and all(p.argv[p.argv.index("--planner-profile-data") + 1] == profile for p in workers)
    assert Pod.objects.filter(deployment=dep, ready=True).count() == 1 + len(workers)
    label = deployment_simulation(dep).label
    assert label == f"simulated with Dynamo's mocker, timed by {made.timing}"
    best = estimate.configuration("disagg", 1)
    assert made.timing == f"AIConfigurator for h200_sxm, TP{best['(p)tp']} prefill / TP{best['(d)tp']} decode"

    # AIConfigurator's prefill batch is 1 (--max-num-seqs 1): a vLLM prefill worker queues the rest,
    # the mocker would refuse them, so the local runtime leaves the flag out for mocker prefill.
    by_role = {p.role: p for p in workers}
    assert "--max-num-seqs" not in by_role["prefill"].argv and "--max-num-seqs" in by_role["prefill"].ignored
    assert "--max-num-seqs" in by_role["decode"].argv

    async def chat(client):
        return await client.post(f"{dep.endpoint}/v1/chat/completions", json={
            "model": dep.revision.graph_spec.model, "max_tokens": 4,
            "messages": [{"role": "user", "content": "hello " * 200}]})

    async def several():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(chat(client) for _ in range(6)))

    replies = asyncio.run(several())
    assert [r.status_code for r in replies] == [200] * 6, [r.text for r in replies]
    assert all(r.json()["usage"]["completion_tokens"] == 4 for r in replies)
