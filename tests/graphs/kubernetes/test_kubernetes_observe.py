# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""What the workers on a cluster really have, read from their pods over the emulator's real
HTTP API and from a real Prometheus holding dcgm-exporter series: the command line each pod
runs (kubectl describe), /dev/shm as mounted against what the spec asks (the emptyDir trap),
the NIXL backend its log names, and GPU memory and utilisation per pod."""

from __future__ import annotations

import time

import pytest

from core.catalog import PoolFields, build_spec
from graphs import services
from graphs.diagnosis import diagnose
from graphs.models import Deployment, Pod
from graphs.runtimes.kubernetes.watch import ClusterWatcher
from tests import factories
from tests.exposition import exposition_server
from tests.k8s_helpers import NS, apply, make_graph
from tests.metrics_fixtures import fresh_cache, prometheus_server, use_prometheus  # noqa: F401

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fixtures"]

GI, MI = 2**30, 2**20


@pytest.fixture
def watcher(cluster):
    return ClusterWatcher(cluster.pk)


def _pod(kube, component: str) -> dict:
    return next(p for p in kube.list_objects("pods", NS)
                if p["metadata"]["labels"]["nvidia.com/dynamo-component"] == component)


def _status(client_for, graph) -> dict[str, dict]:
    data = client_for("viewer").get(f"/api/graphs/{graph.name}/status/").json()
    return {p["service"]: p for p in data["pods"]}


def test_each_pod_shows_the_command_line_it_runs(cluster, kube, watcher, client_for):
    graph = factories.graph("g", template="vllm-agg-kv")
    apply(graph)
    watcher.watch_once(timeout=0)
    pods = _status(client_for, graph)
    frontend = pods["Frontend"]
    assert frontend["command"] == ["python3"]
    assert frontend["args"] == ["-m", "dynamo.frontend", "--router-mode", "kv"]
    assert pods["worker"]["command"] == ["python3", "-m", "dynamo.vllm"]
    assert pods["worker"]["args"][:2] == ["--model", "Qwen/Qwen3-0.6B"]
    page = client_for("viewer").get(f"/graphs/{graph.name}/status/").content.decode()
    assert "describe " + _pod(kube, "Frontend")["metadata"]["name"] in page and "--router-mode" in page


def test_a_worker_whose_dev_shm_is_smaller_than_its_spec_is_the_emptydir_trap(cluster, kube, watcher, client_for):
    graph = make_graph()  # prefill and decode ask for 16Gi of /dev/shm
    apply(graph)
    prefill, decode = _pod(kube, "prefill"), _pod(kube, "decode")
    # prefill: the operator's own volume at /dev/shm, as asked.
    prefill["spec"]["volumes"] = [{"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    prefill["spec"]["containers"][0]["volumeMounts"] = [{"name": "shared-memory", "mountPath": "/dev/shm"}]
    # decode: the article's workaround, an emptyDir of one's own mounted elsewhere: 64 MB at /dev/shm.
    decode["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    decode["spec"]["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm-extra"}]
    kube.put(prefill)
    kube.put(decode)
    watcher.watch_once(timeout=0)

    pods = _status(client_for, graph)
    assert (pods["prefill"]["shm_bytes"], pods["prefill"]["shm_requested_bytes"]) == (16 * GI, 16 * GI)
    assert (pods["decode"]["shm_bytes"], pods["decode"]["shm_requested_bytes"]) == (64 * MI, 16 * GI)
    assert pods["decode"]["shm_source"] == "pod volumes"
    dep = Deployment.objects.get(graph=graph)
    found = {d.title: d for d in diagnose(dep, list(Pod.objects.filter(deployment=dep)))}
    [trap] = [d for t, d in found.items() if decode["metadata"]["name"] in t]
    assert trap.severity == "error" and "64 MB default /dev/shm" in trap.title
    assert "asks for 16Gi of /dev/shm; the worker sees 64Mi (pod volumes)" in trap.detail
    assert "replaces a /dev/shm mount of the container's own" in trap.detail and "sharedMemorySize" in trap.fix
    assert not any(prefill["metadata"]["name"] in t for t in found)
    page = client_for("viewer").get(f"/graphs/{graph.name}/status/").content.decode()
    assert "the worker sees 64Mi" in page


DF_HEADER = "Filesystem     1024-blocks  Used Available Capacity Mounted on\n"


def _df(kib: int):
    def run(command: list[str]) -> tuple[str, str, int]:
        if command != ["df", "-kP", "/dev/shm"]:
            return "", f"sh: {command[0]}: not found\n", 127
        return f"{DF_HEADER}shm {kib:>19} 0 {kib:>9}   0% /dev/shm\n", "", 0
    return run


def test_where_pods_exec_is_allowed_df_in_the_container_measures_dev_shm(cluster, kube, watcher, settings):
    settings.KUBERNETES_EXEC_SHM = True
    graph = make_graph()
    apply(graph)
    prefill, decode = _pod(kube, "prefill"), _pod(kube, "decode")
    decode["spec"]["volumes"] = [{"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    decode["spec"]["containers"][0]["volumeMounts"] = [{"name": "shared-memory", "mountPath": "/dev/shm"}]
    kube.put(decode)
    kube.set_pod_exec(decode["metadata"]["name"], _df(16 * 2**20), namespace=NS)
    kube.set_pod_exec(prefill["metadata"]["name"], _df(65536), namespace=NS)  # what the container really got
    watcher.watch_once(timeout=0)
    pods = {p.service: p for p in Pod.objects.filter(deployment__graph=graph)}
    assert (pods["decode"].shm_bytes, pods["decode"].shm_source) == (16 * GI, "df in the container")
    assert (pods["prefill"].shm_bytes, pods["prefill"].shm_source) == (64 * MI, "df in the container")
    execs = kube.find_requests("GET", r"/exec$")
    assert sorted(r.path.split("/")[-2] for r in execs) == sorted([prefill["metadata"]["name"],
                                                                   decode["metadata"]["name"]])
    assert all(r.query["command"] == ["df", "-kP", "/dev/shm"] and r.param("container") == "main" for r in execs)
    dep = Deployment.objects.get(graph=graph)
    [trap] = [d for d in diagnose(dep, list(Pod.objects.filter(deployment=dep))) if "/dev/shm" in d.title]
    assert prefill["metadata"]["name"] in trap.title and "(df in the container)" in trap.detail
    watcher.watch_once(timeout=0)
    assert len(kube.find_requests("GET", r"/exec$")) == 2  # once per container start


def test_a_refused_exec_keeps_the_volumes_figure_and_says_why(cluster, kube, watcher, settings):
    settings.KUBERNETES_EXEC_SHM = True
    graph = make_graph()
    apply(graph)
    kube.inject("GET", r"/exec$", status=403, times=None)  # RBAC: no pods/exec for this service account
    watcher.watch_once(timeout=0)
    decode = Pod.objects.get(deployment__graph=graph, service="decode")
    assert decode.shm_bytes == 16 * GI  # from the pod's volumes: the operator's shared-memory emptyDir
    assert decode.shm_source == "pod volumes (df: pods/exec not allowed)"


def test_without_the_admins_leave_no_pod_is_execd(cluster, kube, watcher):
    graph = make_graph()
    apply(graph)
    watcher.watch_once(timeout=0)
    assert not kube.find_requests("GET", r"/exec$")
    assert set(Pod.objects.filter(deployment__graph=graph).values_list("shm_source", flat=True)) == {"pod volumes"}


def test_a_size_limit_below_the_spec_is_flagged_too(cluster, kube, watcher):
    graph = make_graph()
    apply(graph)
    decode = _pod(kube, "decode")
    decode["spec"]["volumes"] = [{"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
    decode["spec"]["containers"][0]["volumeMounts"] = [{"name": "shared-memory", "mountPath": "/dev/shm"}]
    kube.put(decode)
    watcher.watch_once(timeout=0)
    dep = Deployment.objects.get(graph=graph)
    [trap] = [d for d in diagnose(dep, list(Pod.objects.filter(deployment=dep))) if "less /dev/shm" in d.title]
    assert "asks for 16Gi of /dev/shm; the worker sees 1Gi" in trap.detail


def test_the_nixl_backend_comes_from_each_workers_log(cluster, kube, watcher):
    graph = make_graph()
    apply(graph)
    prefill = _pod(kube, "prefill")["metadata"]["name"]
    kube.set_pod_log(prefill, "INFO nixl_connector.py: Initializing NIXL wrapper\n"
                              "INFO nixl_agent: Backend UCX was instantiated\n"
                              "INFO Initialized NIXL agent: 7d0e...\n" + "INFO serving\n" * 50000, namespace=NS)
    watcher.watch_once(timeout=0)
    pods = {p.service: p for p in Pod.objects.filter(deployment__graph=graph)}
    assert pods["prefill"].nixl_backend == "UCX"
    assert pods["decode"].nixl_backend == ""  # its log names no backend (yet)
    assert pods["Frontend"].nixl_backend == ""
    [read] = kube.find_requests("GET", rf"/pods/{prefill}/log$")
    assert read.param("limitBytes") == str(256 * 1024)  # the head of the log, where the backend is logged
    watcher.watch_once(timeout=0)
    assert len(kube.find_requests("GET", rf"/pods/{prefill}/log$")) == 1  # read once per container start


def test_mocker_workers_say_their_transfer_is_simulated(cluster, kube, watcher):
    spec = build_spec(template="mocker-disagg", name="m", prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    graph = services.graph_create(spec=spec)
    apply(graph)
    watcher.watch_once(timeout=0)
    pods = {p.service: p.nixl_backend for p in Pod.objects.filter(deployment__graph=graph)}
    assert pods == {"Frontend": "", "prefill": "simulated", "decode": "simulated"}
    assert not kube.find_requests("GET", r"/log$")


# ------------------------------------------------------------------ DCGM


def _dcgm_server(lines: list[str]):
    return exposition_server(lambda _path: "\n".join(lines) + "\n")


def _series(metric: str, value: float, gpu: int, pod_labels: str) -> str:
    return (f'{metric}{{gpu="{gpu}",UUID="GPU-0000{gpu}",device="nvidia{gpu}",modelName="NVIDIA H200",'
            f'Hostname="node-1",container="main",{pod_labels}}} {value}')


def test_gpu_memory_and_utilisation_per_pod_come_from_dcgm(cluster, kube, watcher, use_prometheus, client_for,
                                                           settings):
    settings.PROMETHEUS_KUBERNETES_URL = use_prometheus.url
    settings.PROMETHEUS_KUBERNETES_SCRAPE_INTERVAL = 1
    kube.add_node("node-1", gpus=8)
    graph = make_graph("gdcgm", gpus=2)
    apply(graph)
    watcher.watch_once(timeout=0)
    prefill, decode = _pod(kube, "prefill")["metadata"]["name"], _pod(kube, "decode")["metadata"]["name"]
    # Pod labels as dcgm-exporter writes them. The prefill pod's exporter is scraped with its own
    # target labels winning, as a ServiceMonitor does: Prometheus renames its pod to exported_pod.
    direct = f'namespace="{NS}",pod="{decode}"'
    exported = f'namespace="{NS}",pod="{prefill}"'
    servers = [_dcgm_server([_series("DCGM_FI_DEV_FB_USED", 40960, 0, direct),
                             _series("DCGM_FI_DEV_FB_USED", 20480, 1, direct),
                             _series("DCGM_FI_DEV_GPU_UTIL", 90, 0, direct),
                             _series("DCGM_FI_DEV_GPU_UTIL", 70, 1, direct),
                             _series("DCGM_FI_DEV_FB_USED", 1024, 2, 'namespace="other",pod="someone-else"')]),
               _dcgm_server([_series("DCGM_FI_DEV_FB_USED", 8192, 3, exported),
                             _series("DCGM_FI_DEV_GPU_UTIL", 55, 3, exported)])]
    try:
        use_prometheus.add_targets("dcgm", [
            {"targets": [f"127.0.0.1:{servers[0].server_address[1]}"], "labels": {"exporter": "dcgm-a"}},
            {"targets": [f"127.0.0.1:{servers[1].server_address[1]}"],
             "labels": {"exporter": "dcgm-b", "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x1"}}])
        use_prometheus.wait_for('count(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}) + count(DCGM_FI_DEV_GPU_UTIL'
                                f'{{pod="{decode}"}})', lambda r: r and float(r[0]["value"][1]) == 3, timeout=60)
        time.sleep(1.5)  # reads are aligned to whole scrape intervals: let one pass after the first sample
        data = client_for("viewer").get(f"/api/metrics/graphs/{graph.name}/gpus/").json()
        page = client_for("viewer").get(f"/graphs/{graph.name}/status/").content.decode()
    finally:
        use_prometheus.add_targets("dcgm", [])
        for server in servers:
            server.shutdown()
    assert (data["runtime"], data["source"], data["state"]) == ("kubernetes", "dcgm", "ok"), data
    rows = {row["pod"]: row for row in data["pods"]}
    assert set(rows) == {decode, prefill}
    assert rows[decode]["gpu_memory_bytes"] == (40960 + 20480) * MI  # both of its GPUs
    assert rows[decode]["gpu_util"] == 80  # their mean
    assert (rows[prefill]["gpu_memory_bytes"], rows[prefill]["gpu_util"]) == (8192 * MI, 55)
    # The pods table shows the same columns.
    assert '<td data-col="gpu-mem">60.0\xa0GB</td>' in page and '<td data-col="gpu-util">80%</td>' in page


def test_without_dcgm_series_the_gpu_columns_say_why(cluster, kube, watcher, use_prometheus, client_for, settings):
    settings.PROMETHEUS_KUBERNETES_URL = use_prometheus.url
    graph = make_graph("gnone", gpus=1)
    apply(graph)
    watcher.watch_once(timeout=0)
    data = client_for("viewer").get(f"/api/metrics/graphs/{graph.name}/gpus/").json()
    assert (data["state"], data["pods"]) == ("no_data", [])
    assert "dcgm-exporter" in data["message"]


def test_an_unreachable_prometheus_leaves_the_gpu_columns_empty_and_says_so(cluster, kube, watcher, client_for,
                                                                            settings, fresh_cache):
    from tests.metrics_fixtures import free_port

    settings.PROMETHEUS_KUBERNETES_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    graph = make_graph("gdown", gpus=1)
    apply(graph)
    watcher.watch_once(timeout=0)
    data = client_for("viewer").get(f"/api/metrics/graphs/{graph.name}/gpus/").json()
    assert (data["state"], data["pods"]) == ("unreachable", [])
    assert "connection refused" in data["message"]
    page = client_for("viewer").get(f"/graphs/{graph.name}/status/")
    assert page.status_code == 200 and '<td data-col="gpu-mem">—</td>' in page.content.decode()
