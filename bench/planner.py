"""The local runtime as Dynamo's Planner's executor: from a decision published through the real
VirtualConnectorCoordinator (tests/planner_publisher.py, as the Planner publishes) to the
coordinator seeing it acknowledged, i.e. the scale operation made via planner, the new mocker
worker started and Ready, and the bridge's complete(). Decode alternates 1 → 2 → 1 …

    python bench/planner.py [DECISIONS]      # writes bench/results/planner.json"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(count: int = 6) -> dict:
    from bench.run import setup_django

    setup_django()
    from django.conf import settings

    from controlplane.celery import app
    from core.catalog import PoolFields, build_spec
    from core.planner_config import PlannerSettings
    from graphs import operations, services
    from graphs.models import Deployment
    from graphs.runtimes.local.operator import LocalOperator
    from graphs.runtimes.processes import wait_until

    app.conf.task_always_eager = True
    root = Path(tempfile.mkdtemp(prefix="cp-bench-planner-"))
    settings.LOCAL_RUNTIME_DIR = root
    operator = LocalOperator(runtime_dir=root, port_min=27000, port_max=27999)
    spec = build_spec(template="mocker-disagg", name="bench-planner", model="bench-model", backend="mocker",
                      prefill=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""),
                      decode=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""),
                      planner=PlannerSettings())
    graph = services.graph_create(spec=spec)
    stop = threading.Event()
    try:
        operations.graph_apply(graph=graph, via="cli")

        def connected():
            operator.reconcile_once()
            dep = Deployment.objects.get(graph=graph)
            return dep.state == "ready" and dep.runtime_info.get("planner", {}).get("connector", {}).get("running")

        wait_until(connected, timeout=120, interval=0.2, what="the graph and its connector")
        attach = Deployment.objects.get(graph=graph).runtime_info
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "ETCD_"))}, **attach["env"],
               "ETCD_ENDPOINTS": attach["planner"]["connector"]["etcd"], "DYN_LOG": "warn"}
        decisions = [f"1:{2 if i % 2 == 0 else 1}" for i in range(count)]

        def loop():  # the operator's own loop, as `manage.py runoperator` runs it (about 3 passes a second here)
            while not stop.is_set():
                operator.reconcile_once()
                time.sleep(0.3)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        done = subprocess.run([sys.executable, str(ROOT / "tests" / "planner_publisher.py"), "dynamo", *decisions],
                              env=env, capture_output=True, text=True, timeout=600)
        acks = [json.loads(line) for line in done.stdout.splitlines() if "acknowledged" in line]
    finally:
        stop.set()
        operator.shutdown()
    seconds = [a["seconds"] for a in acks if a["ready"]]
    result = {"decisions": count, "acknowledged": len(seconds), "publish_to_ack_seconds": seconds,
              "median_seconds": round(statistics.median(seconds), 2) if seconds else None,
              "max_seconds": max(seconds) if seconds else None,
              "note": "decode 1↔2 on a mocker graph; operator loop every 0.3 s; 2 shared cores"}
    from bench import record

    record.write("planner", result, argv=["bench/planner.py", *sys.argv[1:]])
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("decisions", nargs="?", type=int, default=6, help="Planner decisions to publish (6)")
    main(parser.parse_args().decisions)
