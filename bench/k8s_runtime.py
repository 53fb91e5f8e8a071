"""The Kubernetes runtime against the API emulator (tests/k8s_emulator, real HTTP, the real
client, the fake Dynamo operator): click-to-applied latency, a replica change visible in the
page through the watchers, and the page cost with a cluster that answers in 5 s.

    python bench/k8s_runtime.py        (also run by: python bench/run.py others)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import print_table, setup_django  # noqa: E402


def _p95(samples: list[float]) -> float:
    samples = sorted(samples)
    return samples[max(0, int(len(samples) * 0.95) - 1)]


def _page_ms(client, url: str, n: int = 30) -> float:
    for _ in range(3):
        client.get(url, secure=True)
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        assert client.get(url, secure=True).status_code == 200, url
        samples.append((time.perf_counter() - start) * 1000)
    return _p95(samples)


def run() -> list[tuple[str, float, float, str]]:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from clusters.models import Cluster
    from controlplane.celery import app
    from core.catalog import PoolFields, build_spec
    from core.specio import spec_from_data
    from graphs import services
    from graphs.models import Operation, Pod
    from graphs.runtimes.kubernetes.watch import ClusterWatcher
    from tests.k8s_emulator import KubeEmulator

    app.conf.task_always_eager = True
    settings.KUBERNETES_WATCH_SECONDS = 5
    kube = KubeEmulator(simulate_operator=True).start()
    kube.add_namespace("llm")
    path = kube.write_kubeconfig(Path(tempfile.mkdtemp(prefix="cp-bench-k8s-")) / "kubeconfig")
    cluster = Cluster.objects.create(name="bench-emu", kubeconfig=str(path), namespaces=["llm"])
    client = Client()
    client.force_login(User.objects.create_superuser("bench-k8s", "b@x", "bench-pass-1"))
    graph = services.graph_create(spec=build_spec(template="vllm-disagg", name="bench-k8s",
                                                  prefill=PoolFields(gpus=1), decode=PoolFields(gpus=1)))

    # Click to applied: the Apply button's POST until the operation succeeded (each a real change).
    applied = []
    for i in range(20):
        spec = graph.head.graph_spec.model_dump()
        spec["services"][2]["replicas"] = 1 + i % 2
        services.graph_update(graph=graph, spec=spec_from_data(spec), message=f"bench {i}")
        graph.refresh_from_db()
        start = time.perf_counter()
        response = client.post(f"/graphs/{graph.name}/apply/", {"runtime": "kubernetes:bench-emu/llm"},
                               secure=True)
        assert response.status_code == 200, (response.status_code, response.get("Location"), response.content[:300])
        op = Operation.objects.filter(graph=graph).first()
        assert op.state == "succeeded", op.result
        applied.append(time.perf_counter() - start)

    # A slider move (decode +1) until the page shows the new pod, with the watchers running.
    watcher = ClusterWatcher(cluster.pk)
    thread = threading.Thread(target=watcher.run_forever, daemon=True)
    thread.start()
    time.sleep(1)
    before = Pod.objects.filter(deployment__graph=graph, service="decode").count()
    start = time.perf_counter()
    client.post(f"/graphs/{graph.name}/scale/", {"service": "decode", "replicas": before + 1}, secure=True)
    while True:
        page = client.get(f"/graphs/{graph.name}/status/", secure=True).content.decode()
        if page.count('data-pod="bench-k8s-decode-') == before + 1:
            break
        if time.perf_counter() - start > 30:
            raise TimeoutError("the new decode pod never reached the page")
        time.sleep(0.05)
    visible = time.perf_counter() - start

    # The pages with a healthy cluster, then with one that answers every request in 5 s.
    healthy = (_page_ms(client, "/graphs/"), _page_ms(client, f"/graphs/{graph.name}/"))
    kube.inject("*", ".", delay=5.0, times=None)
    slow = (_page_ms(client, "/graphs/"), _page_ms(client, f"/graphs/{graph.name}/"))
    watcher.stop.set()
    kube.stop()
    print(f"kubernetes: apply median {statistics.median(applied) * 1000:.0f} ms; pages p95 healthy "
          f"{healthy[0]:.1f}/{healthy[1]:.1f} ms, 5 s cluster {slow[0]:.1f}/{slow[1]:.1f} ms (list/detail)")
    return [
        ("click to applied p95 (Kubernetes, emulator)", _p95(applied), 1, "s"),
        ("replica change visible in the page", visible, 2, "s"),
        ("list page p95, 5 s cluster vs healthy", slow[0] / healthy[0], 1.5, "x"),
        ("detail page p95, 5 s cluster vs healthy", slow[1] / healthy[1], 1.5, "x"),
    ]


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    setup_django()
    print_table(run())
