"""The local runtime with real Dynamo processes: cold start of a graph to serving (apply to
the frontend answering a chat completion), and a slider move (scale decode +1) to the new
pod Running and Ready."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx


def run() -> list[tuple[str, float, float, str]]:
    from django.conf import settings

    from controlplane.celery import app
    from core.catalog import PoolFields, build_spec
    from graphs import operations, services
    from graphs.models import Deployment, Pod
    from graphs.runtimes.local.operator import LocalOperator
    from graphs.runtimes.processes import wait_until

    app.conf.task_always_eager = True
    root = Path(tempfile.mkdtemp(prefix="cp-bench-rt-"))
    settings.LOCAL_RUNTIME_DIR = root
    operator = LocalOperator(runtime_dir=root, port_min=27000, port_max=27999)
    spec = build_spec(template="mocker-disagg", name="bench-cold", model="bench-model", backend="mocker",
                      prefill=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""),
                      decode=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""))
    graph = services.graph_create(spec=spec)
    try:
        start = time.perf_counter()
        operations.graph_apply(graph=graph, via="cli")

        def serving():
            operator.reconcile_once()
            dep = Deployment.objects.get(graph=graph)
            if not dep.endpoint:
                return False
            try:
                r = httpx.post(f"{dep.endpoint}/v1/chat/completions", timeout=2,
                               json={"model": "bench-model", "messages": [{"role": "user", "content": "hi"}],
                                     "max_tokens": 2})
            except httpx.HTTPError:
                return False
            return r.status_code == 200

        try:
            wait_until(serving, timeout=120, interval=0.2, what="the graph to serve")
        except TimeoutError:
            dep = Deployment.objects.get(graph=graph)
            pods = list(Pod.objects.filter(deployment=dep).values_list("name", "phase", "message"))
            raise TimeoutError(f"{dep.state}: {dep.message} {pods}") from None
        cold = time.perf_counter() - start

        start = time.perf_counter()
        operations.graph_scale(graph=graph, service="decode", replicas=2, via="cli")

        def new_pod_ready():
            operator.reconcile_once()
            return Pod.objects.filter(deployment__graph=graph, name="bench-cold-decode-1", ready=True).exists()

        wait_until(new_pod_ready, timeout=60, interval=0.2, what="the new decode pod")
        slider = time.perf_counter() - start
    finally:
        operator.shutdown()
    return [
        ("local graph cold start to serving", cold, 30, "s"),
        ("slider move to new pod Running+Ready", slider, 10, "s"),
    ]
