"""Fixtures and helpers for the Kubernetes runtime tests: the API emulator over real HTTP with
the fake Dynamo operator, a registered cluster reaching it through a kubeconfig (so the
product's own connection code runs), graphs to apply, and a way to run operations.

Use from a test module with ``pytest_plugins = ["tests.k8s_fixtures"]``."""

from __future__ import annotations

import pytest

from graphs import operations, services
from graphs.catalog import PoolFields, build_spec
from graphs.models import Graph, Operation
from graphs.specio import spec_from_data
from tests.k8s_emulator import KubeEmulator

NS = "llm"
CLUSTER = "emu"


@pytest.fixture
def kube():
    """A started emulator with the fake Dynamo operator, namespaces default and llm."""
    with KubeEmulator(simulate_operator=True) as emulator:
        emulator.add_namespace(NS)
        yield emulator
    assert not emulator.errors, emulator.errors


@pytest.fixture
def fast_retries(settings):
    """Back-off in tens of milliseconds, so retry tests take no time; still 3 attempts."""
    settings.KUBERNETES_RETRIES = 3
    settings.KUBERNETES_RETRY_BACKOFF = 0.02
    settings.KUBERNETES_RETRY_MAX_DELAY = 0.1
    settings.KUBERNETES_CONNECT_TIMEOUT = 2
    settings.KUBERNETES_READ_TIMEOUT = 5


@pytest.fixture
def cluster(db, kube, tmp_path, fast_retries):
    """Cluster ``emu`` registered with a kubeconfig file and context, allowing default and llm."""
    from clusters.models import Cluster

    path = kube.write_kubeconfig(tmp_path / "kubeconfig", context="emulator")
    return Cluster.objects.create(name=CLUSTER, kubeconfig=str(path), context="emulator",
                                  namespaces=["default", NS])


def make_graph(name: str = "g", *, adapter: bool = False, planner: bool = False, gpus: int = 1,
               decode_replicas: int = 1) -> Graph:
    """A disaggregated vLLM graph (Frontend, prefill, decode), optionally with a scaling adapter
    on decode and a Planner component."""
    spec = build_spec(template="vllm-disagg", name=name, model="Qwen/Qwen3-0.6B",
                      prefill=PoolFields(gpus=gpus), decode=PoolFields(gpus=gpus, replicas=decode_replicas))
    data = spec.model_dump()
    if adapter:
        next(s for s in data["services"] if s["name"] == "decode")["scaling_adapter"] = True
    if planner:
        frontend = next(s for s in data["services"] if s["role"] == "frontend")
        data["services"].append({"name": "Planner", "role": "planner", "replicas": 1, "image": frontend["image"],
                                 "command": ["python3", "-m", "dynamo.planner"], "args": []})
    return services.graph_create(spec=spec_from_data(data))


def run(op: Operation) -> Operation:
    """Run an operation as the Celery task would, here and now."""
    operations.operation_run(op.pk)
    op.refresh_from_db()
    return op


def apply(graph: Graph, *, api_version: str = "nvidia.com/v1beta1", namespace: str = NS, dry_run: bool = False,
          cluster: str = CLUSTER) -> Operation:
    op = operations.request_apply(graph=graph, runtime="kubernetes", cluster=cluster, namespace=namespace,
                                  api_version=api_version, dry_run=dry_run, via="api")
    return run(op)


def scale(graph: Graph, service: str, replicas: int, *, force: bool = False) -> Operation:
    return run(operations.request_scale(graph=graph, service=service, replicas=replicas, force=force, via="api"))


def dgd_path(name: str = "g", namespace: str = NS) -> str:
    return rf"/namespaces/{namespace}/dynamographdeployments/{name}$"
