"""Benchmarks against a real Dynamo graph (frontend + mocker prefill/decode workers) with the
real aiperf: the stored numbers are aiperf's own, a cancel stops every aiperf process, and a
frontend that is down gives a failed run with aiperf's log kept."""

from __future__ import annotations

import io
import json
import os
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import pytest
from django.utils import timezone

from benchmarks import aiperf, services
from benchmarks.models import BenchmarkRun
from core.catalog import PoolFields, build_spec
from graphs import services as graph_services
from graphs.models import Deployment, GraphState
from graphs.runtimes.processes import allocate_ports, group_members, wait_until
from tests.dynamo_fixtures import dynamo_graph  # noqa: F401

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bench_dir(settings, tmp_path):
    settings.BENCHMARK_DIR = tmp_path / "benchmarks"
    return settings.BENCHMARK_DIR


def _graph_on(endpoint: str, model: str, name: str = "live"):
    """A graph whose deployment is the given frontend, as the local runtime would record it."""
    spec = build_spec(template="mocker-disagg", name=name, model=model, backend="mocker",
                      prefill=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""),
                      decode=PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret=""))
    graph = graph_services.graph_create(spec=spec)
    Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state=GraphState.READY,
                              endpoint=endpoint, observed_at=timezone.now())
    return graph


def _aiperf_processes(run_id: int) -> list[int]:
    """Live processes working in a run's folder (aiperf starts there and its services inherit
    it; command lines and environments do not tell, aiperf renames its processes with
    setproctitle, which overwrites both)."""
    folder = str(services.run_dir(run_id).resolve())
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cwd == folder and state != "Z":
            out.append(int(entry))
    return out


def test_a_short_profile_stores_aiperfs_own_percentiles(dynamo_graph, settings, bench_dir, api_for, eager):  # noqa: F811
    settings.LOCAL_RUNTIME_DIR = dynamo_graph.root  # its model directory is the graph's own tokenizer
    _graph_on(dynamo_graph.endpoint, dynamo_graph.model)
    started = time.monotonic()
    response = api_for("operator").post("/api/benchmarks/runs/", {
        "graph": "live", "profile": "custom", "concurrency": 2, "request_count": 10,
        "input_tokens_mean": 64, "output_tokens_mean": 24}, format="json")
    elapsed = time.monotonic() - started
    assert response.status_code == 201, response.content
    run = BenchmarkRun.objects.get(pk=response.json()["id"])
    assert run.state == "succeeded", run.error
    assert run.progress == 100 and run.started_at and run.finished_at
    results = run.run_results
    step = results.steps[0]
    export = json.loads((Path(run.artifact_dir) / step.artifact / aiperf.EXPORT_JSON).read_text())
    for ours, tag in aiperf.STAT_TAGS.items():
        for q in ("p50", "p90", "p99"):
            assert getattr(getattr(step, ours), q) == export[tag][q], (ours, q)
    assert step.request_throughput == export["request_throughput"]["avg"]
    assert step.output_token_throughput == export["output_token_throughput"]["avg"]
    # A mocker graph asks no GPU: no tokens per GPU, though its 2 workers count as 2 GPU-equivalents.
    assert step.tokens_per_gpu is None
    assert run.run_config.gpu_free and run.run_config.gpus == 2
    assert step.completed == 10 and step.errors == 0
    assert step.output_tokens.p50 == 24  # ignore_eos: every answer has the asked length
    assert results.token_counts.source == "client"
    assert results.token_counts.tokenizer.startswith(str(dynamo_graph.root / "models"))
    assert run.run_config.shape == "p1d1" and run.run_config.endpoint == dynamo_graph.endpoint
    argv_line = Path(run.log_path).read_text().splitlines()[0]
    assert f"--url {dynamo_graph.endpoint}" in argv_line

    viewer = api_for("viewer")
    archive = zipfile.ZipFile(io.BytesIO(b"".join(viewer.get(f"/api/benchmarks/runs/{run.pk}/artifacts/")
                                                   .streaming_content)))
    names = archive.namelist()
    assert f"benchmark-{run.pk}/artifacts/{step.artifact}/{aiperf.EXPORT_JSON}" in names
    assert f"benchmark-{run.pk}/aiperf.log" in names
    html = viewer.get(f"/api/benchmarks/runs/{run.pk}/report/?type=html").content.decode()
    assert "<svg" in html and "client" in html
    assert not list(Path(tempfile.gettempdir()).glob(f"bench{run.pk}-*")), "aiperf's scratch folder is removed"
    print(f"\nshort profile: {elapsed:.1f}s wall; TTFT p50/p90/p99 {step.ttft.p50:.1f}/{step.ttft.p90:.1f}/"
          f"{step.ttft.p99:.1f} ms, ITL p90 {step.itl.p90:.2f} ms, {step.output_token_throughput:.0f} tok/s")


def test_cancel_stops_every_aiperf_process(dynamo_graph, settings, bench_dir, api_for, eager):  # noqa: F811
    settings.LOCAL_RUNTIME_DIR = dynamo_graph.root
    _graph_on(dynamo_graph.endpoint, dynamo_graph.model, name="cancel-me")
    # The request's commit runs the real task inline (eager), so the request lasts as long as the
    # run: it is sent from a thread of its own, and the cancel from here.
    requested = []
    worker = threading.Thread(target=lambda: requested.append(api_for("operator").post("/api/benchmarks/runs/", {
        "graph": "cancel-me", "concurrency": 1, "request_count": 400, "output_tokens_mean": 200,
        "max_seconds": 120}, format="json")), daemon=True)
    worker.start()
    run = wait_until(lambda: (r := BenchmarkRun.objects.filter(graph__name="cancel-me").first()) and r.pgid
                     and "requests done" in r.progress_text and r, timeout=90, interval=0.3,
                     what="aiperf to send requests")
    run_id = run.pk
    pgid = run.pgid
    assert group_members(pgid) and len(_aiperf_processes(run_id)) > 1
    response = api_for("operator").post(f"/api/benchmarks/runs/{run_id}/cancel/")
    assert response.status_code == 200
    worker.join(timeout=60)
    assert not worker.is_alive() and requested[0].status_code == 201
    run.refresh_from_db()
    assert run.state == "cancelled" and "cancelled by operator" in run.error
    assert group_members(pgid) == [] and _aiperf_processes(run_id) == []
    assert run.progress < 100 and run.progress_text == "cancelled"
    assert Path(run.log_path).exists()


def test_a_frontend_that_is_down_gives_a_failed_run_with_aiperfs_log(dynamo_graph, settings, bench_dir,  # noqa: F811
                                                                      api_for, eager):
    settings.LOCAL_RUNTIME_DIR = dynamo_graph.root
    port = allocate_ports(1, 33000, 34000, set())[0]  # nothing listens there
    _graph_on(f"http://127.0.0.1:{port}", dynamo_graph.model, name="down")
    response = api_for("operator").post("/api/benchmarks/runs/", {"graph": "down", "concurrency": 2,
                                                                  "request_count": 6}, format="json")
    assert response.status_code == 201
    run = BenchmarkRun.objects.get(pk=response.json()["id"])
    assert run.state == "failed"
    assert "aiperf exited with code 1" in run.error and "failed" in run.error
    log = b"".join(api_for("viewer").get(f"/api/benchmarks/runs/{run.pk}/log/").streaming_content).decode()
    assert "All 6 inference request(s) failed" in log or "ClientConnectorError" in log
    assert _aiperf_processes(run.pk) == []
