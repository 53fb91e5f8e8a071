"""The cluster watchers feed the status cache from the emulator over real HTTP: DGD state,
pods found by the operator's labels, events, the GPU-shortage diagnosis, a 410 relist, an
unreachable cluster; and the graph page shows it all while reading only the database."""

from __future__ import annotations

import threading
import time

import pytest

from clusters.models import Cluster
from core.specio import spec_from_data
from graphs import operations, services
from graphs.diagnosis import diagnose
from graphs.models import Deployment, Event, Pod
from graphs.runtimes.kubernetes.watch import ClusterWatcher
from tests.k8s_emulator import UNSCHEDULABLE_MESSAGE
from tests.k8s_helpers import NS, apply, make_graph, run, scale

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

SHM_64MI = 64 * 2**20


@pytest.fixture
def watcher(cluster):
    return ClusterWatcher(cluster.pk)


def _pods(graph) -> dict[str, Pod]:
    return {p.name: p for p in Pod.objects.filter(deployment__graph=graph)}


def _by_service(graph) -> dict[str, list[Pod]]:
    out: dict[str, list[Pod]] = {}
    for pod in Pod.objects.filter(deployment__graph=graph):
        out.setdefault(pod.service, []).append(pod)
    return out


def test_a_listing_fills_pods_state_and_freshness(cluster, kube, watcher):
    kube.add_node("node-1", gpus=8)
    graph = make_graph()
    apply(graph)
    assert watcher.watch_once(timeout=0) is True
    dep = Deployment.objects.get(graph=graph)
    assert dep.state == "ready", dep.message
    assert dep.message.startswith("Ready=True (all_resources_are_ready)")
    assert dep.observed_at is not None and dep.observed_generation == dep.generation
    assert dep.endpoint == f"http://g-frontend.{NS}.svc.cluster.local:8000"
    pods = _by_service(graph)
    assert {s: len(p) for s, p in pods.items()} == {"Frontend": 1, "prefill": 1, "decode": 1}
    decode = pods["decode"][0]
    assert (decode.role, decode.phase, decode.ready, decode.node, decode.gpus) == ("decode", "Running", True,
                                                                                   "node-1", 1)
    # The operator mounts its shared-memory emptyDir of sharedMemorySize (8Gi when unset;
    # deploy/operator/internal/dynamo/shared_memory.go), as the fake operator now does.
    assert graph.head.graph_spec.service("decode").shared_memory == "16Gi"
    assert decode.shm_bytes == 16 * 2**30
    assert decode.started_at is not None
    assert pods["Frontend"][0].role == "frontend"
    cluster.refresh_from_db()
    assert (cluster.reachable, cluster.gpu_allocatable, cluster.gpu_free) == (True, 8, 6)
    assert cluster.watched_at is not None
    pod_lists = kube.find_requests("GET", rf"/namespaces/{NS}/pods$")
    assert pod_lists[0].param("labelSelector") == "nvidia.com/dynamo-graph-deployment-name"


def test_watch_events_update_pods_state_and_events(cluster, kube, watcher):
    graph = make_graph()
    apply(graph)
    watcher.watch_once(timeout=0)
    decode = next(p for p in kube.list_objects("pods", NS) if p["metadata"]["labels"][
        "nvidia.com/dynamo-component"] == "decode")
    name = decode["metadata"]["name"]
    kube.set_pod(name, namespace=NS, dgd="g", component="decode", component_type="decode",
                 waiting_reason="ImagePullBackOff", image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9")
    kube.add_event(kube.get("pods", name, namespace=NS), "Failed", 'Failed to pull image "vllm-runtime:9.9.9"')
    assert watcher.watch_once(timeout=1) is True
    watches = [r for r in kube.find_requests("GET", rf"/namespaces/{NS}/") if r.param("watch") == "true"]
    assert {r.path.rsplit("/", 1)[1] for r in watches} == {"dynamographdeployments",
                                                             "dynamographdeploymentscalingadapters", "pods", "events"}
    assert all(r.param("resourceVersion") not in (None, "0") for r in watches)
    pod = _pods(graph)[name]
    assert (pod.phase, pod.reason, pod.ready) == ("ImagePullBackOff", "ImagePullBackOff", False)
    assert 'Back-off pulling image "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9"' in pod.message
    dep = Deployment.objects.get(graph=graph)
    assert dep.state == "degraded", dep.message  # the frontend still serves
    assert "pods_not_ready" in dep.message
    event = Event.objects.get(graph=graph, reason="Failed")
    assert (event.object, event.type) == (name, "Warning")
    titles = [d.title for d in diagnose(dep, list(Pod.objects.filter(deployment=dep)))]
    assert f"{name} cannot pull its image" in titles
    watcher.watch_once(timeout=0)
    assert Event.objects.filter(graph=graph, reason="Failed").count() == 1  # not duplicated


def test_a_pod_change_rewrites_its_own_graph_and_not_its_namespace_s(cluster, kube, watcher, monkeypatch):
    """Among thousands of graphs, a burst of watch events writes the graphs it names (a pod's
    DGD label, before and after; an event of a pod), not every graph of the namespace; and a
    cycle that resumes its watches rewrites no graph that did not change (its observed time
    moves on in one statement)."""
    one, other = make_graph("one"), make_graph("other")
    apply(one)
    apply(other)
    watcher.watch_once(timeout=0)
    written: list[str] = []
    write = ClusterWatcher._write

    def recorded(self, dep, *args, **kwargs):
        written.append(dep.graph.name)
        return write(self, dep, *args, **kwargs)

    monkeypatch.setattr(ClusterWatcher, "_write", recorded)
    decode = next(p for p in kube.list_objects("pods", NS) if p["metadata"]["labels"][
        "nvidia.com/dynamo-graph-deployment-name"] == "one" and p["metadata"]["labels"][
        "nvidia.com/dynamo-component"] == "decode")["metadata"]["name"]

    def change_while_watching(change) -> list[str]:
        written.clear()

        def once_watching():  # the emulator only: the database is the test's (this thread's)
            time.sleep(0.7)  # the cycle listed nothing (its watches resume), so they are open by now
            change()

        changer = threading.Thread(target=once_watching)
        changer.start()
        assert watcher.watch_once(timeout=2) is True
        changer.join(15)
        return list(written)  # a cycle after the first writes what its watch events concern, and no more

    def unready():
        kube.set_pod(decode, namespace=NS, dgd="one", component="decode", component_type="decode", ready=False)
        kube.add_event(kube.get("pods", decode, namespace=NS), "Unhealthy", "Readiness probe failed")

    seen = Deployment.objects.get(graph=other).observed_at
    by_events = change_while_watching(unready)
    assert by_events and set(by_events) == {"one"}, written
    assert _pods(one)[decode].ready is False
    assert Deployment.objects.get(graph=other).observed_at > seen  # observed, not rewritten
    assert Event.objects.get(graph=one, reason="Unhealthy").object == decode
    # A pod relabelled to another DGD concerns both graphs: it leaves the first one's rows (the
    # operator then takes the surplus pod away from the other).
    by_events = change_while_watching(lambda: kube.set_pod(decode, namespace=NS, dgd="other", component="decode",
                                                           component_type="decode"))
    assert set(by_events) == {"one", "other"}, written
    assert decode not in _pods(one)


def test_free_gpus_are_counted_beside_the_watch_at_their_interval(cluster, kube, watcher, settings):
    """Counting free GPUs lists every pod of the cluster (seconds in a fleet): after the first
    count it is done beside a cycle's watch, and only every KUBERNETES_GPU_READ_SECONDS."""
    kube.add_node("node-1", gpus=8)
    graph = make_graph()
    apply(graph)
    watcher.watch_once(timeout=0)
    cluster.refresh_from_db()
    assert (cluster.gpu_allocatable, cluster.gpu_free) == (8, 6)
    scale(graph, "decode", 2)  # one more GPU in use
    settings.KUBERNETES_GPU_READ_SECONDS = 3600
    kube.clear_requests()
    assert watcher.watch_once(timeout=1) is True
    assert not kube.find_requests("GET", r"^/api/v1/pods$")  # not due: the count stays as it was
    cluster.refresh_from_db()
    assert cluster.gpu_free == 6 and len(_by_service(graph)["decode"]) == 2
    settings.KUBERNETES_GPU_READ_SECONDS = 0
    assert watcher.watch_once(timeout=1) is True
    assert kube.find_requests("GET", r"^/api/v1/pods$")
    cluster.refresh_from_db()
    assert cluster.gpu_free == 5


def test_a_pending_gpu_worker_is_diagnosed_with_the_free_gpus(cluster, kube, watcher, client_for):
    kube.add_node("node-1", gpus=1)  # taken by the prefill worker
    kube.operator.pod_overrides["decode"] = {"unschedulable": True}
    graph = make_graph(gpus=1)
    apply(graph)
    kube.add_event({"kind": "Pod", "name": next(p["metadata"]["name"] for p in kube.list_objects("pods", NS)
                                                if "decode" in p["metadata"]["name"]), "namespace": NS},
                   "FailedScheduling", UNSCHEDULABLE_MESSAGE)
    watcher.watch_once(timeout=0)
    cluster.refresh_from_db()
    assert (cluster.gpu_allocatable, cluster.gpu_free) == (1, 0)
    pod = _by_service(graph)["decode"][0]
    assert (pod.phase, pod.reason, pod.message, pod.gpus, pod.node) == (
        "Pending", "Unschedulable", UNSCHEDULABLE_MESSAGE, 1, "")
    dep = Deployment.objects.get(graph=graph)
    assert dep.state == "degraded" and "insufficient_capacity" in dep.message
    [shortage] = [d for d in diagnose(dep, list(Pod.objects.filter(deployment=dep))) if "GPUs" in d.title]
    assert "It asks for 1 GPUs, the nodes have 0 free: lower the replicas or add GPU nodes." in shortage.detail
    page = client_for("viewer").get(f"/graphs/{graph.name}/")
    text = page.content.decode()
    assert "the nodes have 0 free: lower the replicas or add GPU nodes" in text
    assert pod.name in text and "Unschedulable" in text
    assert Event.objects.filter(graph=graph, reason="FailedScheduling").exists()


def test_crash_loops_keep_their_last_log_lines(cluster, kube, watcher):
    kube.operator.pod_overrides["prefill"] = {"waiting_reason": "CrashLoopBackOff"}
    graph = make_graph()
    apply(graph)
    name = next(p["metadata"]["name"] for p in kube.list_objects("pods", NS) if "prefill" in p["metadata"]["name"])
    kube.set_pod_log(name, "loading model\nRuntimeError: CUDA out of memory\n", namespace=NS)
    watcher.watch_once(timeout=0)
    pod = _pods(graph)[name]
    assert (pod.phase, pod.restarts) == ("CrashLoopBackOff", 5)
    assert "CUDA out of memory" in pod.last_log
    assert "(last exit code 1: Error)" in pod.message
    dep = Deployment.objects.get(graph=graph)
    [crash] = [d for d in diagnose(dep, list(Pod.objects.filter(deployment=dep))) if "crash-looping" in d.title]
    assert "CUDA out of memory" in crash.log
    logs = [r for r in kube.find_requests("GET", rf"/pods/{name}/log$")]
    assert logs[0].param("previous") == "true" and logs[0].param("container") == "main"


def test_shared_memory_comes_from_the_pods_volume(cluster, kube, watcher):
    graph = make_graph()
    data = graph.head.graph_spec.model_dump()
    next(s for s in data["services"] if s["name"] == "decode")["shared_memory"] = None  # the operator's 8Gi
    services.graph_update(graph=graph, spec=spec_from_data(data), message="default /dev/shm for decode")
    graph.refresh_from_db()
    apply(graph)
    decode = next(p for p in kube.list_objects("pods", NS) if "decode" in p["metadata"]["name"])
    assert {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in decode["spec"]["volumes"]
    # A pod without the operator's volume (started by hand, or by an operator that mounts none)
    # gets the container runtime's 64 MB.
    prefill = next(p for p in kube.list_objects("pods", NS) if "prefill" in p["metadata"]["name"])
    prefill["spec"].pop("volumes")
    prefill["spec"]["containers"][0].pop("volumeMounts")
    kube.put(prefill)
    watcher.watch_once(timeout=0)
    pods = _by_service(graph)
    assert pods["decode"][0].shm_bytes == 8 * 2**30
    assert pods["prefill"][0].shm_bytes == SHM_64MI
    dep = Deployment.objects.get(graph=graph)
    warnings = [d.title for d in diagnose(dep, list(Pod.objects.filter(deployment=dep)))]
    assert any("prefill" in t and "64 MB default /dev/shm" in t for t in warnings)
    assert not any("decode" in t and "/dev/shm" in t for t in warnings)


def test_a_scale_and_a_delete_reach_the_cache_through_the_watch(cluster, kube, watcher):
    graph = make_graph()
    apply(graph)
    watcher.watch_once(timeout=0)
    scale(graph, "decode", 3)
    watcher.watch_once(timeout=1)
    assert len(_by_service(graph)["decode"]) == 3
    assert Deployment.objects.get(graph=graph).state == "ready"
    run(operations.graph_undeploy(graph=graph))
    watcher.watch_once(timeout=1)
    dep = Deployment.objects.get(graph=graph)
    assert (dep.state, dep.active) == ("not_deployed", False)
    assert not Pod.objects.filter(deployment=dep).exists()


def test_an_expired_watch_lists_again(cluster, kube, watcher):
    graph = make_graph()
    apply(graph)
    watcher.watch_once(timeout=0)
    stale = watcher.views[NS].versions["pods"]
    extra = next(p for p in kube.list_objects("pods", NS) if "prefill" in p["metadata"]["name"])
    kube.delete_object("pods", extra["metadata"]["name"], namespace=NS)  # the operator recreates it
    kube.expire_history()
    kube.clear_requests()
    assert watcher.watch_once(timeout=1) is True
    pod_calls = kube.find_requests("GET", rf"/namespaces/{NS}/pods$")
    assert pod_calls[0].param("resourceVersion") == stale and pod_calls[0].param("watch") == "true"
    relists = [r for r in pod_calls if r.param("watch") is None]
    assert relists, "a 410 must be followed by a list"
    names = set(_pods(graph))
    assert extra["metadata"]["name"] not in names and len(names) == 3
    assert watcher.views[NS].versions["pods"] != stale


def test_a_watch_expiring_mid_stream_lists_again(cluster, kube, watcher):
    graph = make_graph()
    apply(graph)
    watcher.watch_once(timeout=0)
    prefill = next(p["metadata"]["name"] for p in kube.list_objects("pods", NS) if "prefill" in p["metadata"]["name"])
    kube.clear_requests()

    def expire_while_watching():
        began = time.monotonic()  # wait for the pods watch to be open (a loaded machine may take a while)
        while not kube.find_requests("GET", rf"/namespaces/{NS}/pods$") and time.monotonic() - began < 3:
            time.sleep(0.05)
        time.sleep(0.2)
        with kube.store.cond:  # change and compact before any watch can read the change: 410 mid-stream
            kube.set_pod(prefill, namespace=NS, dgd="g", component="prefill", component_type="prefill",
                         waiting_reason="CrashLoopBackOff")
            kube.expire_history()

    thread = threading.Thread(target=expire_while_watching)
    thread.start()
    assert watcher.watch_once(timeout=5) is True  # room to list again and watch anew, even on a busy machine
    thread.join()
    calls = [("watch" if r.param("watch") else "list") for r in kube.find_requests("GET", rf"/namespaces/{NS}/pods$")]
    assert calls[:3] == ["watch", "list", "watch"], calls
    assert _pods(graph)[prefill].phase == "CrashLoopBackOff"


def _cluster_requests(monkeypatch, kube) -> list[str]:
    """The HTTP requests sent to the cluster's API server (through urllib3's pool, which the
    kubernetes client sends through); each is let through."""
    from urllib.parse import urlsplit

    import urllib3

    server = urlsplit(kube.url).port
    sent: list[str] = []
    real = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def urlopen(self, method, url, *args, **kwargs):
        if self.port == server:
            sent.append(f"{method} {url}")
        return real(self, method, url, *args, **kwargs)

    monkeypatch.setattr(urllib3.connectionpool.HTTPConnectionPool, "urlopen", urlopen)
    return sent


def test_an_unreachable_cluster_is_marked_at_once_and_pages_never_ask_it(cluster, kube, watcher, client_for,
                                                                          monkeypatch, settings):
    graph = make_graph()
    apply(graph)
    watcher.watch_once(timeout=0)
    seen = Deployment.objects.get(graph=graph).observed_at
    sent = _cluster_requests(monkeypatch, kube)
    kube.stop()
    assert watcher.watch_once(timeout=5) is False
    # Given up after its retries, not after the watch's 5 s (what that costs in seconds is bench/'s).
    assert 1 <= len(sent) <= settings.KUBERNETES_RETRIES, sent
    cluster.refresh_from_db()
    assert cluster.reachable is False and "no answer from cluster emu" in cluster.error
    dep = Deployment.objects.get(graph=graph)
    assert dep.state == "unknown" and dep.observed_at == seen
    assert dep.message.startswith("cluster emu is not answering (last seen ")
    del sent[:]
    page = client_for("viewer").get(f"/graphs/{graph.name}/")
    assert page.status_code == 200 and sent == []  # the page reads the status cache, never the cluster
    assert "not answering" in page.content.decode()
    admin_page = client_for("admin").get("/clusters/")
    assert "unreachable" in admin_page.content.decode()


def test_watch_threads_notice_a_cluster_that_goes_away_mid_watch(cluster, kube, watcher):
    graph = make_graph()
    apply(graph)
    watcher.watch_once(timeout=0)
    kube.inject("GET", r"/pods$", 503, times=None)  # every watch (and relist) of pods now fails
    kube.end_watches()
    assert watcher.watch_once(timeout=1) is False
    assert Cluster.objects.get(pk=cluster.pk).reachable is False
    assert Deployment.objects.get(graph=graph).state == "unknown"
    kube.clear_faults()
    assert watcher.watch_once(timeout=0) is True
    assert Cluster.objects.get(pk=cluster.pk).reachable is True
    assert Deployment.objects.get(graph=graph).state == "ready"


def test_the_operators_watches_outlive_a_cycle_and_the_next_cycle_writes_what_came_between(
        cluster, kube, watcher, settings):
    """As run_forever runs them: a cycle's end does not close its streams, so a change made while
    the watcher refreshes and starts its next cycle is already held, and written by that cycle."""
    settings.KUBERNETES_WATCH_SECONDS = 2  # each stream is renewed, by its own thread, every 2 s
    graph = make_graph()
    apply(graph)
    try:
        assert watcher.watch_once(timeout=1, keep_watching=True) is True
        threads = {key: thread for key, (thread, _) in watcher.watches.items()}
        assert {kind for _, kind in threads} == {"dgds", "pods", "events"} | (
            {"dgdsas"} if watcher.dgdsa_version else set())
        assert all(thread.is_alive() for thread in threads.values())
        decode = next(p for p in kube.list_objects("pods", NS) if p["metadata"]["labels"][
            "nvidia.com/dynamo-component"] == "decode")
        name = decode["metadata"]["name"]
        assert _pods(graph)[name].ready is True
        kube.set_pod(name, namespace=NS, dgd="g", component="decode", component_type="decode", ready=False)
        time.sleep(2.5)  # between cycles, and past a renewal of every stream
        assert _pods(graph)[name].ready is True  # held, not yet written: no cycle runs
        assert watcher.watch_once(timeout=1, keep_watching=True) is True
        assert _pods(graph)[name].ready is False
        assert {key: thread for key, (thread, _) in watcher.watches.items()} == threads  # the same streams
    finally:
        watcher.end_watches()
    for thread in threads.values():
        thread.join(5)
    assert not any(thread.is_alive() for thread in threads.values())
    assert watcher.watches == {} and watcher.kube is None


def test_a_cycle_that_does_not_keep_its_watches_ends_them(cluster, kube, watcher):
    apply(make_graph())
    assert watcher.watch_once(timeout=1) is True
    assert watcher.watches == {} and watcher.kube is None


@pytest.mark.django_db(transaction=True)
def test_the_operators_loop_keeps_its_streams_from_cycle_to_cycle_and_ends_them_when_stopped(cluster, kube, settings):
    settings.KUBERNETES_WATCH_SECONDS = 1  # a cycle a second
    graph = make_graph()
    apply(graph)
    watcher = ClusterWatcher(cluster.pk)
    loop = threading.Thread(target=watcher.run_forever, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 20
        while not (watcher.watches and Pod.objects.filter(deployment__graph=graph).exists()):
            assert time.monotonic() < deadline, "the loop wrote nothing"
            time.sleep(0.1)
        streams = {key: thread for key, (thread, _) in watcher.watches.items()}
        time.sleep(2.5)  # two more cycles
        assert {key: thread for key, (thread, _) in watcher.watches.items()} == streams
        assert all(thread.is_alive() for thread in streams.values())
    finally:
        watcher.stop.set()
        loop.join(15)
    assert not loop.is_alive() and watcher.watches == {}
    for thread in streams.values():
        thread.join(5)
    assert not any(thread.is_alive() for thread in streams.values())
