"""A DGD that reports Ready while pods of the spec it replaced still carry the count
(ai-dynamo/dynamo#3567) is a rollout in progress, in the graph's state and message; and while a
generation serves and another rolls out, a change is refused with the reason (#13620)."""

from __future__ import annotations

from graphs.models import GraphState
from graphs.runtimes.base import PodStatus
from graphs.runtimes.kubernetes.observe import graph_state, previous_generation
from tests.metrics_fixtures import fresh_cache, prometheus_server  # noqa: F401

pytest_plugins = ["tests.k8s_fixtures"]

READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "AllReady", "message": "all ready"}],
         "state": "successful", "observedGeneration": 2}


def _dgd(args: list[str], alpha: bool = False) -> dict:
    if alpha:
        spec = {"services": {"decode": {"extraPodSpec": {"mainContainer": {"command": ["python3", "-m", "dynamo.vllm"],
                                                                            "args": args}}}}}
    else:
        spec = {"components": [{"name": "decode", "podTemplate": {"spec": {"containers": [
            {"name": "main", "command": ["python3", "-m", "dynamo.vllm"], "args": args}]}}},
            {"name": "Frontend"}]}
    return {"metadata": {"generation": 2}, "spec": spec, "status": READY}


def _pod(name: str, args: list[str], phase: str = "Running") -> PodStatus:
    return PodStatus(name=name, service="decode", role="decode", phase=phase, ready=phase == "Running",
                     command=["python3", "-m", "dynamo.vllm"], args=args)


NEW, OLD = ["--model", "m", "--max-num-seqs", "64"], ["--model", "m"]


def test_ready_with_pods_of_the_previous_spec_is_still_rolling_out():
    for alpha in (False, True):
        dgd = _dgd(NEW, alpha)
        pods = [_pod("d-a", NEW), _pod("d-b", OLD)]
        assert previous_generation(dgd, pods) == {"decode": (1, 2)}
        state, message = graph_state(active=True, dgd=dgd, pods=pods, name="g", namespace="ns")
        assert state == GraphState.PROGRESSING
        assert message.startswith("rolling out: 1 of 2 decode pods still run the previous spec") and "#3567" in message


def test_ready_is_ready_once_every_pod_runs_the_spec_whatever_flags_the_operator_adds():
    dgd = _dgd(NEW)
    pods = [_pod("d-a", [*NEW, "--operator-added", "1"]), _pod("d-b", NEW), _pod("d-old", OLD, phase="Terminating")]
    assert previous_generation(dgd, pods) == {}
    assert graph_state(active=True, dgd=dgd, pods=pods, name="g", namespace="ns")[0] == GraphState.READY
    # a component that declares no command line is not judged
    assert previous_generation({"spec": {"components": [{"name": "decode"}]}}, [_pod("d", OLD)]) == {}


# ---------------------------------------------------------------- against the emulator's Grove


def test_a_rollout_on_the_cluster_shows_its_ready_but_old_pods_and_refuses_a_revert_in_the_middle(db, cluster, kube,
                                                                                                 client_for):
    import time

    from core.catalog import PoolFields, build_spec
    from core.errors import OperationRefused
    from graphs import operations, rollouts, services
    from graphs.models import Deployment
    from graphs.runtimes.kubernetes.watch import ClusterWatcher
    from tests.k8s_helpers import apply, make_graph

    graph = make_graph(decode_replicas=2)
    apply(graph)
    client = client_for("viewer")
    watcher = ClusterWatcher(cluster.pk)
    watcher.watch_once(timeout=0)
    assert Deployment.objects.get(graph=graph).state == GraphState.READY
    kube.operator.ready_delay = 1.0  # each replacement pod takes a while to be ready
    kube.operator.roll_delay = 2.5  # and Grove takes the next old pod at a later reconcile
    changed = build_spec(template="vllm-disagg", name="g", model="Qwen/Qwen3-0.6B",
                         prefill=PoolFields(gpus=1),
                         decode=PoolFields(gpus=1, replicas=2, engine_args="--max-num-seqs 64"))
    services.graph_update(graph=graph, spec=changed)
    op = operations.graph_apply(graph=graph, runtime="kubernetes", cluster="emu", namespace="llm", via="api")
    operations.operation_run(op.pk)
    seen, refused = [], ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        watcher.watch_once(timeout=1)
        dep = Deployment.objects.get(graph=graph)
        seen.append((dep.state, dep.message))
        if "still run the previous spec" in dep.message and not refused:
            table = client.get("/graphs/g/status/").content.decode()
            assert 'id="rollout"' in table and "pods of an earlier spec" in table
            assert dep.runtime_info["rollout_pools"] == [
                {"pool": "decode", "desired": 2, "new": 1, "new_routable": 1, "old": 1, "draining": 0, "ready": 2}]
            try:
                rollouts.graph_rollback(graph=graph, revision_number=1)
            except OperationRefused as exc:
                refused = str(exc)
        if dep.state == GraphState.READY and len(seen) > 1 and "--max-num-seqs" in " ".join(
                " ".join(p.args) for p in dep.pods.filter(service="decode")):
            break
    # Grove's maxUnavailable 1: a decode pod of the old spec goes before its successor is ready;
    # once the successor is ready the DGD says Ready while the other old pod still counts.
    assert any(m.startswith("rolling out: 1 of 2 decode pods still run the previous spec") for _s, m in seen), seen
    assert "#13620" in refused and graph.revisions.count() == 2
    assert seen[-1][0] == GraphState.READY
    assert Deployment.objects.get(graph=graph).runtime_info["rollout_pools"] == []  # over: no table


def test_a_scale_down_on_the_cluster_says_what_its_pods_grace_period_will_cut(db, cluster, kube):
    from core.catalog import PoolFields, build_spec
    from core.specio import spec_from_data
    from graphs import services
    from tests.k8s_helpers import apply, scale

    data = build_spec(template="vllm-disagg", name="g", model="Qwen/Qwen3-0.6B", prefill=PoolFields(gpus=1),
                      decode=PoolFields(gpus=1, replicas=2)).model_dump()
    next(s for s in data["services"] if s["name"] == "decode")["pod_extra"] = {"terminationGracePeriodSeconds": 20}
    graph = services.graph_create(spec=spec_from_data(data))
    assert apply(graph).state == "succeeded"
    op = scale(graph, "decode", 1)
    assert op.state == "succeeded", op.result
    assert op.result.startswith("decode: 2 → 1 replicas") and "killed 20 s after SIGTERM" in op.result
    up = scale(graph, "decode", 2)
    assert "SIGTERM" not in up.result  # a scale-up stops nothing


def test_a_one_replica_pool_rolled_by_grove_has_a_window_with_nothing_ready_and_the_page_says_so(
        db, cluster, kube, client_for):
    import time

    from core.catalog import PoolFields, build_spec
    from graphs import operations, services
    from graphs.runtimes.kubernetes.watch import ClusterWatcher
    from tests.k8s_helpers import apply, make_graph

    graph = make_graph(decode_replicas=1)
    apply(graph)
    watcher = ClusterWatcher(cluster.pk)
    watcher.watch_once(timeout=0)
    kube.operator.ready_delay = 3.0  # the replacement takes a while to be ready
    services.graph_update(graph=graph, spec=build_spec(
        template="vllm-disagg", name="g", model="Qwen/Qwen3-0.6B", prefill=PoolFields(gpus=1),
        decode=PoolFields(gpus=1, replicas=1, engine_args="--max-num-seqs 64")))
    op = operations.graph_apply(graph=graph, runtime="kubernetes", cluster="emu", namespace="llm", via="api")
    operations.operation_run(op.pk)
    warned = ""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not warned:
        watcher.watch_once(timeout=1)
        page = client_for("viewer").get("/graphs/g/status/").content.decode()
        if 'data-zero-ready="decode"' in page:
            warned = page
    assert "decode has no ready pod while it rolls" in warned and "maxUnavailable 1" in warned


def test_a_ready_pod_the_frontend_does_not_route_to_yet_shows_as_none_routable_while_the_dgd_says_ready(
        db, cluster, kube, client_for, settings, prometheus_server, fresh_cache):  # noqa: F811
    """#13622 end to end: the emulator's frontend admits a Ready worker 12 s late; Prometheus
    scrapes its per-worker series; the graph page's chart shows the pool with none routable
    while its pod is Ready and the DGD reports Ready."""
    import time

    from core.catalog import PoolFields, build_spec
    from graphs import operations, services
    from graphs.models import Deployment
    from graphs.runtimes.kubernetes.watch import ClusterWatcher
    from tests.k8s_emulator.frontend import ITL, FrontendMetrics
    from tests.k8s_helpers import NS, apply, make_graph

    prometheus = prometheus_server
    settings.PROMETHEUS_KUBERNETES_URL = prometheus.url
    settings.PROMETHEUS_KUBERNETES_SCRAPE_INTERVAL = 1
    settings.PROMETHEUS_CACHE_SECONDS = 1
    graph = make_graph(decode_replicas=1)
    apply(graph)
    watcher = ClusterWatcher(cluster.pk)
    watcher.watch_once(timeout=0)
    frontend = FrontendMetrics(kube).serve()
    prometheus.add_targets("emu-g", [frontend.target(NS, "g")])
    client = client_for("viewer")
    try:
        prometheus.wait_for(f'count_over_time({ITL}{{dynamo_namespace="{NS}-g"}}[1m])',
                            lambda r: r and float(r[0]["value"][1]) >= 8, timeout=60)
        assert "decode: 1 now" in client.get("/graphs/g/status/").content.decode()
        kube.operator.admit_delay = 12.0
        services.graph_update(graph=graph, spec=build_spec(
            template="vllm-disagg", name="g", model="Qwen/Qwen3-0.6B", prefill=PoolFields(gpus=1),
            decode=PoolFields(gpus=1, replicas=1, engine_args="--max-num-seqs 64")))
        op = operations.graph_apply(graph=graph, runtime="kubernetes", cluster="emu", namespace=NS, via="api")
        operations.operation_run(op.pk)
        ready_with_none, after = False, ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not after:
            watcher.watch_once(timeout=1)
            dep = Deployment.objects.get(graph=graph)
            page = client.get("/graphs/g/status/").content.decode()
            new_ready = any("--max-num-seqs" in " ".join(p.args) for p in dep.pods.filter(service="decode", ready=True))
            if "decode: 0 now" in page and new_ready and dep.state == "ready":
                ready_with_none = True
            if ready_with_none and "decode: 1 now" in page:
                after = page
        assert ready_with_none, "the new decode pod was never Ready while the frontend routed to none"
        zero = float(after.split("decode: 1 now, <strong class=\"error\">none for ", 1)[1].split(" s", 1)[0])
        assert zero >= 3.0, after
    finally:
        prometheus.remove_targets("emu-g")
        frontend.close()
