"""A real Dynamo graph (frontend + mocker prefill and decode workers) for tests that need a
live OpenAI-compatible frontend. Import the fixture into a test module:

    from tests.dynamo_fixtures import dynamo_graph  # noqa: F401

The graph runs for the whole session, on free loopback ports, in its own discovery folder."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from graphs.runtimes.local.argv import build_process_argv, build_process_env
from graphs.runtimes.local.supervisor import Supervisor
from graphs.runtimes.local.tinymodel import ensure_model_dir
from graphs.runtimes.processes import allocate_ports

MODEL = "test-model"


@dataclass
class LiveGraph:
    endpoint: str  # http://127.0.0.1:PORT
    port: int
    model: str
    supervisor: Supervisor
    names: list[str]
    root: Path

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Until the frontend answers a one-token chat. Listing the model is not enough: the
        frontend can answer 503 "not ready to serve requests yet" while it lists the model (a
        full run on a loaded host met it twice, half an hour in, for a reason its logs would
        tell), and the graph is shared by the whole session. Fails with every process's log tail."""
        import httpx

        body = {"model": self.model, "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 1}
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                reply = httpx.post(f"{self.endpoint}/v1/chat/completions", json=body, timeout=10)
                if reply.status_code == 200:
                    return
                last = f"{reply.status_code} {reply.text[:300]}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {n}\n{self.supervisor.tail_log(n, 30)}" for n in self.names)
                raise AssertionError(f"the session's Dynamo graph does not serve after {timeout:.0f} s: "
                                     f"{last}\n{tails}")
            time.sleep(0.25)


def start_graph(root: Path, *, model: str = MODEL, decode: int = 1, speedup: float = 1.0) -> LiveGraph:
    model_dir = ensure_model_dir(root / "models", model)
    discovery = root / "discovery"
    discovery.mkdir(parents=True, exist_ok=True)
    ports = allocate_ports(3 + decode, 20000, 32000, set())
    fe_port, prefill_sys, bootstrap, *decode_sys = ports
    sup = Supervisor(root / "pids")
    logs = root / "logs"
    sup.ensure("frontend", build_process_argv(kind="frontend", python=sys.executable, http_port=fe_port),
               build_process_env(discovery_dir=discovery), root, logs / "frontend.log",
               {"probe": "frontend", "port": fe_port, "model": model, "role": "frontend", "service": "Frontend"})
    sup.ensure("prefill-0", build_process_argv(kind="mocker", python=sys.executable, model_path=model_dir,
                                                  model_name=model, mode="prefill", bootstrap_port=bootstrap,
                                                  speedup_ratio=speedup),
               build_process_env(discovery_dir=discovery, system_port=prefill_sys), root, logs / "prefill-0.log",
               {"probe": "worker", "port": prefill_sys, "role": "prefill", "service": "prefill"})
    names = ["frontend", "prefill-0"]
    for i, port in enumerate(decode_sys):
        name = f"decode-{i}"
        sup.ensure(name, build_process_argv(kind="mocker", python=sys.executable, model_path=model_dir,
                                               model_name=model, mode="decode", speedup_ratio=speedup),
                   build_process_env(discovery_dir=discovery, system_port=port), root, logs / f"{name}.log",
                   {"probe": "worker", "port": port, "role": "decode", "service": "decode"})
        names.append(name)
    sup.wait_ready(names, timeout=120)
    return LiveGraph(f"http://127.0.0.1:{fe_port}", fe_port, model, sup, names, root)


@pytest.fixture(scope="session")
def dynamo_graph(tmp_path_factory):
    graph = start_graph(tmp_path_factory.mktemp("dynamo-graph"))
    yield graph
    graph.supervisor.stop_all(grace=3.0)
