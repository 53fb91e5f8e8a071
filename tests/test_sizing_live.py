"""A graph made from an AIConfigurator configuration, served on the local runtime by real
Dynamo processes: its mocker workers are started with the profile data written from
AIConfigurator's estimate, and every label says who times them."""

from __future__ import annotations

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

    reply = httpx.post(f"{dep.endpoint}/v1/chat/completions", timeout=60,
                       json={"model": dep.revision.graph_spec.model, "max_tokens": 4,
                             "messages": [{"role": "user", "content": "hello " * 200}]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 4
