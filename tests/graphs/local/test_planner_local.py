"""The local runtime as the Planner's executor, with real parts: a real mocker graph with a Planner
component, the operator's etcd and virtual-connector bridge, and the real
VirtualConnectorCoordinator publishing decisions as the Planner does (tests/planner_publisher.py).
Each decision becomes scale operations made via planner, is acknowledged once the pools are
ready, and shows on the timeline API with the replicas around it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.errors import OperationRefused
from core.planner_config import PlannerSettings
from graphs import operations
from graphs.models import Deployment, Operation, PlannerDecision, Pod
from graphs.runtimes.processes import wait_until
from tests import factories

# 1.6.1's virtual connector needs etcd: scripts/services.sh installs Debian's etcd-server.
pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]
PUBLISHER = (Path(__file__).parents[2] / "planner_publisher.py")


def _graph(name="plan"):
    return factories.graph(name, model=f"{name}-model", backend="mocker", pool=factories.CPU, planner=PlannerSettings(
        optimization_target="sla", ttft_ms=200, itl_ms=20, adjustment_interval_seconds=30, max_gpu_budget=-1))


def _converge(operator, graph, predicate, timeout=90):
    def step():
        operator.reconcile_once()
        dep = Deployment.objects.get(graph=graph)
        return predicate(dep, {p.name: p for p in Pod.objects.filter(deployment=dep)})

    return wait_until(step, timeout=timeout, interval=0.3, what="the graph to converge")


class Publisher:
    """The coordinator process, its stdout read line by line on a thread."""

    def __init__(self, env: dict, *decisions: str):
        self.proc = subprocess.Popen([sys.executable, str(PUBLISHER), "dynamo", *decisions], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines: list[dict] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.lines.append(json.loads(line))

    def acknowledged(self) -> list[dict]:
        return [line for line in self.lines if "acknowledged" in line]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def test_decisions_published_by_the_real_coordinator_scale_the_pools_via_planner(eager, operator, client_for):
    graph = _graph()
    operations.graph_apply(graph=graph, via="api")
    _converge(operator, graph, lambda dep, pods: dep.state == "ready" and len(pods) == 3
              and dep.runtime_info.get("planner", {}).get("connector", {}).get("running"))

    # The status API says where to attach: namespace, discovery store, and the connector's etcd.
    attach = operations.status_snapshot(graph)["attach"]
    assert attach["dynamo_namespace"] == "dynamo"
    assert attach["discovery"]["backend"] == "file" and Path(attach["discovery"]["path"]).is_dir()
    planner = attach["planner"]
    assert planner["runs"] is False and "import dynamo.planner" in planner["missing"][0]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "ETCD_"))},
           **attach["env"], "ETCD_ENDPOINTS": planner["connector"]["etcd"], "DYN_LOG": "warn"}

    publisher = Publisher(env, "2:1", "1:2")
    try:
        _converge(operator, graph, lambda dep, pods: len(publisher.acknowledged()) == 2, timeout=150)
    finally:
        publisher.stop()
    assert [a["ready"] for a in publisher.acknowledged()] == [True, True], publisher.lines

    decisions = list(PlannerDecision.objects.filter(graph=graph).order_by("at"))
    assert [(d.decision_id, d.desired, d.state) for d in decisions] == [
        (0, {"prefill": 2, "decode": 1}, "acknowledged"), (1, {"prefill": 1, "decode": 2}, "acknowledged")]
    assert decisions[0].before == {"prefill": 1, "decode": 1}
    # Each pool that changed is one scale operation made via planner, audited and in the list.
    ops = list(Operation.objects.filter(graph=graph, kind="scale").order_by("created_at"))
    made = [(o.via, o.params["service"], o.params["replicas"], o.state, o.params["decision"]) for o in ops]
    assert made[0] == ("planner", "prefill", 2, "succeeded", decisions[0].pk)
    assert sorted(made[1:]) == [("planner", "decode", 2, "succeeded", decisions[1].pk),
                                ("planner", "prefill", 1, "succeeded", decisions[1].pk)]
    dep = Deployment.objects.get(graph=graph)
    ready = {s: Pod.objects.filter(deployment=dep, service=s, ready=True).count() for s in ("prefill", "decode")}
    assert ready == {"prefill": 1, "decode": 2}
    from audit.models import AuditRecord
    assert AuditRecord.objects.filter(via="planner", action="operation.scale", target=graph.name).count() == 3

    viewer = client_for("viewer")
    page = viewer.get(f"/graphs/{graph.name}/status/").content.decode()
    assert "via planner · for Planner decision 1 (acknowledged)" in page
    timeline = viewer.get(f"/api/graphs/{graph.name}/planner/?window=15m").json()
    assert [(d["decision_id"], d["state"], d["source"]) for d in timeline["decisions"]] == [
        (0, "acknowledged", "virtual-connector"), (1, "acknowledged", "virtual-connector")]
    assert timeline["targets"] == {"ttft_ms": 200.0, "itl_ms": 20.0, "from": "planner",
                                   "optimization_target": "sla"}
    # The replicas around each decision: desired moves first, ready follows.
    prefill = timeline["replicas"]["prefill"]
    changes = [v for i, (_, v) in enumerate(prefill["desired"]) if i == 0 or prefill["desired"][i - 1][1] != v]
    assert changes == [1, 2, 1]
    first = decisions[0].at.timestamp()
    assert max(v for t, v in prefill["ready"] if t >= first) == 2
    # Decisions published from outside are executed, but the line is not green: the Planner
    # itself cannot run here, as the runtime card says, and the line says why.
    assert timeline["health"]["level"] == "warning"
    assert timeline["health"]["message"].startswith("Last decision")
    assert timeline["health"]["warnings"][0].startswith("Dynamo's Planner does not run on this host")
    assert "AISimulate (aisimulate_core)" in timeline["health"]["warnings"][0]

    # A person's scale of a pool the Planner manages is refused unless forced, on this runtime too.
    with pytest.raises(OperationRefused, match="managed by Dynamo's Planner"):
        operations.graph_scale(graph=graph, service="decode", replicas=3, via="api")


def test_an_unacknowledged_decision_warns_on_the_health_line(client_for, settings):
    from django.utils import timezone

    from graphs import planner_decisions as planner_services

    graph = _graph("stuck")
    decision = planner_services.decision_record(graph=graph, source=planner_services.SOURCE_VIRTUAL,
                                                desired={"prefill": 3}, decision_id=7)
    PlannerDecision.objects.filter(pk=decision.pk).update(at=timezone.now() - timezone.timedelta(minutes=5))
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # nothing listens: the database half still answers
    body = client_for("viewer").get(f"/api/graphs/{graph.name}/planner/").json()
    assert body["state"] == "unreachable"
    assert body["health"]["level"] == "warning"
    assert "decision 7" in body["health"]["warnings"][0] and "not acknowledged" in body["health"]["warnings"][0]
    # Recording the same decision again (a bridge replaying) adds nothing.
    again = planner_services.decision_record(graph=graph, source=planner_services.SOURCE_VIRTUAL,
                                             desired={"prefill": 3}, decision_id=7)
    assert again.pk == decision.pk and PlannerDecision.objects.filter(graph=graph).count() == 1
