"""A scale on a Kubernetes cluster succeeds only once the cluster runs the new count, as the
local runtime's does: the operation patches, then waits (OPERATION_OBSERVE_SECONDS) until the
DGD's status, the scaling adapter and the pool's pods show it. Against the API emulator, whose
fake Dynamo operator converges over time, holds pods Pending for GPUs no node has, or stalls."""

from __future__ import annotations

import time

import pytest

from graphs import operations
from graphs.models import Deployment, Event
from tests.k8s_emulator import UNSCHEDULABLE_MESSAGE
from tests.k8s_helpers import NS, apply, make_graph

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]


def _decode_pods(kube, graph="g"):
    pods = kube.list_objects("pods", namespace=NS)
    return [p for p in pods if p["metadata"]["labels"].get("nvidia.com/dynamo-graph-deployment-name") == graph
            and p["metadata"]["labels"].get("nvidia.com/dynamo-component") == "decode"]


def _ready(pod) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _scale(graph, service, replicas):
    op = operations.graph_scale(graph=graph, service=service, replicas=replicas, via="api")
    started = time.monotonic()
    operations.operation_run(op.pk)
    op.refresh_from_db()
    return op, time.monotonic() - started


@pytest.mark.parametrize("adapter", [False, True], ids=["dgd", "adapter"])
def test_a_scale_succeeds_once_the_cluster_runs_the_new_pods(cluster, kube, adapter):
    graph = make_graph(adapter=adapter)
    assert apply(graph).state == "succeeded"
    kube.operator.ready_delay = 1.0  # the new pods take a second to become ready
    op, took = _scale(graph, "decode", 3)
    assert op.state == "succeeded", op.result
    assert op.result == "decode: 1 → 3 replicas (3 ready, observed)"
    # Not when the patch was accepted: when the pods were there and ready.
    assert took >= 0.9
    pods = _decode_pods(kube)
    assert len(pods) == 3 and all(_ready(p) for p in pods)
    assert Deployment.objects.get(graph=graph).replicas == {"decode": 3}


def test_a_status_that_runs_ahead_of_the_pods_is_not_a_scale_done(cluster, kube, settings):
    """The DGD says 3 of 3 ready at once; the pods say otherwise: the scale waits for the pods,
    and fails naming them when they never come."""
    graph = make_graph()
    assert apply(graph).state == "succeeded"
    kube.settle()
    kube.operator.status_ahead = True
    kube.operator.ready_delay = 1.0
    op, took = _scale(graph, "decode", 3)
    assert op.state == "succeeded", op.result
    assert took >= 0.9  # the status said 3 ready at once: the pods took a second
    assert sum(_ready(p) for p in _decode_pods(kube)) == 3
    settings.OPERATION_OBSERVE_SECONDS = 1.5
    kube.operator.pod_overrides["decode"] = {"unschedulable": True}
    op, _took = _scale(graph, "decode", 5)
    assert op.state == "failed", op.result
    assert "readyReplicas 5" in op.result  # what the status claims ...
    assert "3 Running" in op.result and "2 Pending (Unschedulable)" in op.result  # ... and what runs


def test_a_scale_down_succeeds_once_the_extra_pods_are_gone(cluster, kube):
    graph = make_graph(decode_replicas=3)
    assert apply(graph).state == "succeeded"
    kube.settle()
    op, _took = _scale(graph, "decode", 1)
    assert op.state == "succeeded", op.result
    assert len([p for p in _decode_pods(kube) if not p["metadata"].get("deletionTimestamp")]) == 1


def test_a_scale_that_waits_for_gpus_fails_saying_what_was_asked_what_runs_and_why(cluster, kube, settings):
    settings.OPERATION_OBSERVE_SECONDS = 1.5
    graph = make_graph()
    assert apply(graph).state == "succeeded"
    kube.operator.pod_overrides["decode"] = {"unschedulable": True}  # no node has a GPU free for more
    op, took = _scale(graph, "decode", 3)
    assert op.state == "failed"
    assert 1.4 <= took < 10
    assert op.result.startswith("decode: asked for 3 replica(s) (the DynamoGraphDeployment asks for them now), "
                                "but after 1.5 s (setting OPERATION_OBSERVE_SECONDS) the cluster shows 1 of 3 "
                                "replicas ready"), op.result
    assert "2 Pending (Unschedulable)" in op.result
    assert "Likely: " in op.result and "cannot be scheduled: not enough GPUs" in op.result
    assert UNSCHEDULABLE_MESSAGE in op.result and "Lower this pool's replicas, or add GPU nodes." in op.result
    # The cluster still asks for 3 (the patch was accepted): the control plane's desired state says so too.
    dep = Deployment.objects.get(graph=graph)
    assert dep.replicas == {"decode": 3}
    [event] = Event.objects.filter(graph=graph, reason="ScaleNotObserved")
    assert event.type == "Warning" and event.message == op.result


def test_a_scale_the_operator_never_reconciles_fails_naming_the_generation_it_is_behind(cluster, kube, settings):
    settings.OPERATION_OBSERVE_SECONDS = 1
    graph = make_graph()
    assert apply(graph).state == "succeeded"
    kube.settle()
    kube.operator.stop()  # the Dynamo operator is down: the patch is accepted, nothing follows
    op, _took = _scale(graph, "decode", 2)
    assert op.state == "failed"
    assert "the cluster shows 1 of 2 replicas ready (DGD status: replicas 1, readyReplicas 1" in op.result
    assert "the Dynamo operator has not reconciled generation 2 (observed 1)" in op.result
    assert "Likely: Ready=True (all_resources_are_ready)" in op.result


def test_with_observation_off_a_scale_succeeds_when_the_patch_is_accepted(cluster, kube, settings):
    settings.OPERATION_OBSERVE_SECONDS = 0
    graph = make_graph()
    assert apply(graph).state == "succeeded"
    kube.operator.pod_overrides["decode"] = {"unschedulable": True}
    op, _took = _scale(graph, "decode", 2)
    assert (op.state, op.result) == ("succeeded", "decode: 1 → 2 replicas")
