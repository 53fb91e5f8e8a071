"""The frontend of each DGD the fake operator runs, as a Prometheus scrape sees it: the per-worker
series Dynamo's frontend writes (``dynamo_frontend_worker_last_*``, lib/llm/src/http/service/
metrics.rs at 2a6da14c) for the worker pods it routes to, under steady traffic.

The frontend routes to a worker once it has read the worker's discovery record, which comes after
the pod's readiness: ``operator.admit_delay`` seconds after a pod turns Ready here (the window of
ai-dynamo/dynamo#13622, where a rolled pool is Ready with nothing the frontend routes to). A pod
being deleted is gone from routing at once (the worker unregisters on SIGTERM).

``FrontendMetrics(emu).serve()`` starts an HTTP server; ``target(namespace, dgd)`` is the file_sd
group that scrapes one DGD's frontend with the labels the operator's PodMonitor gives it."""

from __future__ import annotations

import hashlib
import time
from http.server import ThreadingHTTPServer
from typing import Any

from tests.exposition import exposition_server

from .fixtures import COMPONENT_TYPE_LABEL, DGD_LABEL, SUB_COMPONENT_TYPE_LABEL
from .operator import POD, _pod_ready

TTFT = "dynamo_frontend_worker_last_time_to_first_token_seconds"
ITL = "dynamo_frontend_worker_last_inter_token_latency_seconds"


def worker_id(pod_name: str) -> str:
    """A stable instance id per pod (Dynamo's is the worker's lease id, a u64)."""
    return str(int(hashlib.sha1(pod_name.encode(), usedforsecurity=False).hexdigest()[:15], 16))


class FrontendMetrics:
    def __init__(self, emu: Any):
        self.emu = emu
        self.server: ThreadingHTTPServer | None = None

    def routed(self, namespace: str, dgd: str, at: float | None = None) -> list[tuple[str, str]]:
        """(pod name, worker_type) of the worker pods the DGD's frontend routes to at ``at``."""
        at = time.time() if at is None else at
        operator = self.emu.operator
        out = []
        for pod in self.emu.store.list(POD, namespace):
            labels = pod["metadata"].get("labels") or {}
            if labels.get(DGD_LABEL) != dgd or pod["metadata"].get("deletionTimestamp") or not _pod_ready(pod):
                continue
            kind = labels.get(SUB_COMPONENT_TYPE_LABEL) or labels.get(COMPONENT_TYPE_LABEL)
            if kind not in ("prefill", "decode", "worker"):
                continue
            ready_at = operator.ready_at.get((namespace, pod["metadata"]["name"]), 0.0)
            if at >= ready_at + operator.admit_delay:
                out.append((pod["metadata"]["name"], "prefill" if kind == "prefill" else "decode"))
        return sorted(out)

    def text(self, namespace: str, dgd: str) -> str:
        at = time.time()
        moving = f"{0.01 + (at % 97) / 1000:.6f}"  # requests keep reaching every routed worker
        lines = []
        for name, kind in self.routed(namespace, dgd, at):
            labels = f'dp_rank="none",worker_id="{worker_id(name)}",worker_type="{kind}"'
            lines.append(f"{TTFT if kind == 'prefill' else ITL}{{{labels}}} {moving}")
        return "".join(line + "\n" for line in lines)

    def serve(self) -> FrontendMetrics:
        def answer(path: str) -> str | None:
            parts = path.strip("/").split("/")
            if len(parts) != 3 or parts[0] != "metrics":
                return None
            with self.emu.store.cond:
                return self.text(parts[1], parts[2])

        self.server = exposition_server(answer)
        return self

    def target(self, namespace: str, dgd: str) -> dict:
        assert self.server is not None, "serve() first"
        return {"targets": [f"127.0.0.1:{self.server.server_address[1]}"],
                "labels": {"__metrics_path__": f"/metrics/{namespace}/{dgd}", "namespace": namespace,
                           "dynamo_namespace": f"{namespace}-{dgd}"}}

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
