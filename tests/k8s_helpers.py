"""Helpers for the Kubernetes runtime tests: graphs to apply, and operations run here and now
as the Celery task would run them (fixtures: tests/k8s_fixtures.py)."""

from __future__ import annotations

from core.catalog import PoolFields
from core.specio import spec_from_data
from graphs import operations, services
from graphs.models import Graph, Operation
from tests import factories

NS = "llm"
CLUSTER = "emu"
# The emulators the running test has started (tests/k8s_fixtures.py): an operation waits for their
# fake operator to converge, as a test against a real cluster waits for the rollout.
EMULATORS: list = []


def make_graph(name: str = "g", *, adapter: bool = False, planner: bool = False, gpus: int = 1,
               decode_replicas: int = 1) -> Graph:
    """A disaggregated vLLM graph (Frontend, prefill, decode), optionally with a scaling adapter
    on decode and a Planner component."""
    data = factories.spec(name, template="vllm-disagg", model="Qwen/Qwen3-0.6B", prefill=PoolFields(gpus=gpus),
                          decode=PoolFields(gpus=gpus, replicas=decode_replicas)).model_dump()
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
    settle()
    return op


def settle() -> None:
    """Wait until the fake operator of each running emulator has converged."""
    for emulator in EMULATORS:
        emulator.settle()


def apply(graph: Graph, *, api_version: str = "nvidia.com/v1beta1", namespace: str = NS, dry_run: bool = False,
          cluster: str = CLUSTER) -> Operation:
    op = operations.graph_apply(graph=graph, runtime="kubernetes", cluster=cluster, namespace=namespace,
                                  api_version=api_version, dry_run=dry_run, via="api")
    return run(op)


def scale(graph: Graph, service: str, replicas: int, *, force: bool = False) -> Operation:
    return run(operations.graph_scale(graph=graph, service=service, replicas=replicas, force=force, via="api"))


def dgd_path(name: str = "g", namespace: str = NS) -> str:
    return rf"/namespaces/{namespace}/dynamographdeployments/{name}$"
