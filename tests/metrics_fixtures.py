"""A real Prometheus server for the metrics tests, and a small exposition of Dynamo-shaped
metrics whose counters grow at known rates, so that quantiles and SLO shares have exact
expected values. Import the fixtures into a test module:

    from tests.metrics_fixtures import prometheus_server, exposition  # noqa: F401

The server runs for the whole session on a free loopback port with its own storage, scrapes
every second, and discovers targets from files (metrics/localprom.py writes the same config
the product uses)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from metrics import localprom
from tests.exposition import exposition_server

SCRAPE_INTERVAL = 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LivePrometheus:
    url: str
    root: Path
    proc: subprocess.Popen

    def add_targets(self, name: str, groups: list[dict]) -> None:
        """Publish target groups in their own file (the product's file is local-graphs.json)."""
        path = self.root / "targets" / f"{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        os.replace(tmp, path)

    def remove_targets(self, name: str) -> None:
        """Withdraw a file of add_targets: Prometheus marks its series stale at once, so a later
        test does not see a target that is down because its fixture ended."""
        (self.root / "targets" / f"{name}.json").unlink(missing_ok=True)

    def query(self, promql: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.load(resp)["data"]["result"]

    def wait_for(self, promql: str, predicate, timeout: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if predicate(result):
                return result
            time.sleep(0.25)
        raise AssertionError(f"{promql} never satisfied the condition within {timeout}s; last: {result}")

    def api_requests(self, handler: str) -> float:
        """How many API requests Prometheus has served on ``handler`` (from its own /metrics)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as resp:
            total = 0.0
            for line in resp.read().decode().splitlines():
                if line.startswith("prometheus_http_requests_total{") and f'handler="{handler}"' in line:
                    total += float(line.rsplit(" ", 1)[1])
            return total


def start_prometheus(root: Path) -> LivePrometheus:
    binary = localprom.find_binary()
    if binary is None:
        pytest.fail("no prometheus binary: run scripts/services.sh (installs Debian's prometheus)")
    port = free_port()
    config = localprom.write_config(root, scrape_interval=SCRAPE_INTERVAL)
    argv = localprom.server_argv(binary, config=config, port=port, storage=root / "data", retention="1d")
    log = open(root / "prometheus.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, (root / "prometheus.log").read_text()[-2000:]
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    return LivePrometheus(url, root, proc)
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("prometheus did not become ready within 30 s")


@pytest.fixture
def fresh_cache():
    """An empty Django cache (results and the circuit breaker's memory) for each test."""
    from django.core.cache import cache

    cache.clear()
    yield cache
    cache.clear()


@pytest.fixture
def use_prometheus(settings, prometheus_server, fresh_cache):
    """Point the product at the session's Prometheus."""
    settings.PROMETHEUS_URL = prometheus_server.url
    settings.PROMETHEUS_SCRAPE_INTERVAL = SCRAPE_INTERVAL
    settings.PROMETHEUS_TIMEOUT = 5
    return prometheus_server


# Each test module that imports a session fixture gets its own copy of it from pytest; these
# hold the one instance per test run, so that the server starts (and the known target is
# scraped long enough) once, whichever modules run.
_shared: dict[str, object] = {}


@pytest.fixture(scope="session")
def prometheus_server(tmp_path_factory):
    first = "prometheus" not in _shared
    if first:
        _shared["prometheus"] = start_prometheus(tmp_path_factory.mktemp("prometheus"))
    server = _shared["prometheus"]
    yield server
    if first:
        os.killpg(server.proc.pid, signal.SIGTERM)
        try:
            server.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)


# ---------------------------------------------------------------- a known exposition

# Cumulative observations per second for each bucket bound (ending with +Inf).
TTFT_BUCKETS = {"0": 0, "0.05": 1, "0.1": 3, "0.2": 4, "+Inf": 4}  # p50 75 ms, p90 160 ms, p99 196 ms
ITL_BUCKETS = {"0": 0, "0.005": 10, "0.01": 30, "0.02": 40, "+Inf": 40}  # p50 7.5 ms, p90 16 ms, p99 19.6 ms
REQUESTS_PER_S = 4.0
INPUT_TOKENS_PER_S = 400.0
OUTPUT_TOKENS_PER_S = 40.0
ACTIVE = 2


def exposition_text(elapsed: float, model: str = "known") -> str:
    lines = []
    for name, buckets, mean in (("dynamo_frontend_time_to_first_token_seconds", TTFT_BUCKETS, 0.1),
                                ("dynamo_frontend_inter_token_latency_seconds", ITL_BUCKETS, 0.01)):
        lines.append(f"# TYPE {name} histogram")
        for le, per_s in buckets.items():
            lines.append(f'{name}_bucket{{model="{model}",le="{le}"}} {per_s * elapsed}')
        lines.append(f'{name}_sum{{model="{model}"}} {buckets["+Inf"] * mean * elapsed}')
        lines.append(f'{name}_count{{model="{model}"}} {buckets["+Inf"] * elapsed}')
    lines += [
        "# TYPE dynamo_frontend_input_sequence_tokens histogram",
        f'dynamo_frontend_input_sequence_tokens_bucket{{model="{model}",le="+Inf"}} {REQUESTS_PER_S * elapsed}',
        f'dynamo_frontend_input_sequence_tokens_sum{{model="{model}"}} {INPUT_TOKENS_PER_S * elapsed}',
        f'dynamo_frontend_input_sequence_tokens_count{{model="{model}"}} {REQUESTS_PER_S * elapsed}',
        "# TYPE dynamo_frontend_requests_total counter",
        f'dynamo_frontend_requests_total{{model="{model}",endpoint="chat_completions",request_type="stream",'
        f'status="success",error_type=""}} {REQUESTS_PER_S * elapsed}',
        "# TYPE dynamo_frontend_output_tokens_total counter",
        f'dynamo_frontend_output_tokens_total{{model="{model}"}} {OUTPUT_TOKENS_PER_S * elapsed}',
        "# TYPE dynamo_frontend_active_requests gauge",
        f'dynamo_frontend_active_requests{{model="{model}"}} {ACTIVE}',
        "# TYPE dynamo_frontend_inflight_requests gauge",
        f'dynamo_frontend_inflight_requests{{model="{model}"}} {ACTIVE}',
    ]
    return "\n".join(lines) + "\n"


KNOWN = "known"


@dataclass
class Exposition:
    port: int
    server: ThreadingHTTPServer
    started: float

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def exposition():
    """An HTTP server whose /metrics counters grow linearly from zero at known rates, so every
    rate, quantile and share computed from it has an exact expected value."""
    if "exposition" in _shared:
        yield _shared["exposition"]
        return
    started = time.time()
    server = exposition_server(lambda _path: exposition_text(time.time() - started))
    _shared["exposition"] = Exposition(server.server_address[1], server, started)
    yield _shared["exposition"]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def known_scraped(prometheus_server, exposition):
    """The known exposition as graph "known", scraped long enough that an 8 s rate window
    (a 15m chart at 1 s scrapes) lies wholly inside its samples."""
    prometheus_server.add_targets(KNOWN, [{"targets": [exposition.target],
                                           "labels": {"graph": KNOWN, "pool": "frontend", "pod": "known-frontend-0"}}])
    prometheus_server.wait_for(f'count_over_time(up{{graph="{KNOWN}", pool="frontend"}}[1m])',
                               lambda r: r and float(r[0]["value"][1]) >= 11, timeout=60)
    return prometheus_server
