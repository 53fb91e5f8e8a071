"""The pure parts of benchmarks: profile validation, aiperf's argv and export, graph shapes
and variants, the replica recommendation (synthetic runs), and the exported reports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import aiperf
from benchmarks.profiles import ProfileError, RunParams, resolve
from benchmarks.recommendations import Observation, recommend
from benchmarks.shapes import Shape, parse_shape, same_budget_shapes, shape_gpus, shape_of, variant_spec
from core.catalog import PoolFields, build_spec

EXPORT = Path(__file__).resolve().parents[1] / "fixtures" / "aiperf" / "profile_export_aiperf.json"


def _spec(name="demo", prefill=1, decode=1, gpus=1, template="vllm-disagg"):
    return build_spec(template=template, name=name, prefill=PoolFields(replicas=prefill, gpus=gpus),
                      decode=PoolFields(replicas=decode, gpus=gpus))


# --- profiles ------------------------------------------------------------------------------------

def test_each_profile_resolves_to_small_bounded_defaults():
    for key in ("streaming-chat", "long", "short", "custom"):
        params = resolve(key)
        assert params.max_seconds == 300
        assert (params.request_count or 0) <= 200
    assert resolve("streaming-chat").concurrency == 50
    assert resolve("streaming-chat").streaming is True


@pytest.mark.parametrize(("overrides", "field"), [
    ({"concurrency": -1}, "concurrency"),
    ({"concurrency": 1_000_000}, "concurrency"),
    ({"request_count": 0}, "request_count"),
    ({"request_count": 10**9}, "request_count"),
    ({"request_count": 10, "duration_s": 5}, "request_count"),
    ({"sweep": [4, 2]}, "sweep"),
    ({"sweep": [1, 2], "concurrency": 3}, "sweep"),
    ({"input_tokens_mean": 10, "input_tokens_stddev": 20}, "input_tokens_stddev"),
    ({"max_seconds": 10**6}, "max_seconds"),
    ({"duration_s": 200, "sweep": [1, 2]}, "duration_s"),
    ({"request_rate": -3}, "request_rate"),
    ({"bogus": 1}, "bogus"),
])
def test_bad_parameters_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ProfileError) as exc:
        resolve("custom", overrides)
    assert field in exc.value.errors, exc.value.errors


def test_unknown_profile_is_refused():
    with pytest.raises(ProfileError) as exc:
        resolve("fastest")
    assert "profile" in exc.value.errors


def test_a_sweep_or_a_rate_replaces_the_profiles_concurrency():
    assert resolve("short", {"sweep": [1, 2, 4]}).loads() == [(1, None), (2, None), (4, None)]
    assert resolve("short", {"request_rate": 2.5}).loads() == [(None, 2.5)]
    assert resolve("short", {"duration_s": 30}).request_count is None


# --- aiperf argv, progress, export ----------------------------------------------------------------

def _argv(**kw):
    params = kw.pop("params", resolve("custom", {"concurrency": 2, "request_count": 10}))
    base = {"params": params, "url": "http://127.0.0.1:18000", "model": "m",
            "tokenizer": aiperf.Tokenizer("/models/m", "client"), "artifact_dir": Path("/tmp/a"),
            "concurrency": 2, "request_rate": None, "slo": {}, "request_timeout": 60}
    base.update(kw)
    return aiperf.build_argv(**base)


def test_argv_is_a_list_built_from_validated_values():
    argv = _argv(slo={"ttft_ms": 100, "itl_ms": 8})
    assert argv[argv.index("--url") + 1] == "http://127.0.0.1:18000"
    assert argv[argv.index("--concurrency") + 1] == "2"
    assert argv[argv.index("--request-count") + 1] == "10"
    assert argv[argv.index("--goodput") + 1] == "time_to_first_token:100 inter_token_latency:8"
    assert "--streaming" in argv and "--use-server-token-count" not in argv
    assert argv[argv.index("--extra-inputs") + 1] == "ignore_eos:true"
    server = _argv(tokenizer=aiperf.Tokenizer("/stand-in", "server"))
    assert "--use-server-token-count" in server


@pytest.mark.parametrize("endpoint", ["ftp://x:1", "http://user:pw@h:1", "http://h:1/?q=1", "http://h:1/v1",
                                      "", "not a url", "http://h:99999"])
def test_only_a_plain_frontend_base_url_is_accepted(endpoint):
    with pytest.raises(aiperf.BadTarget):
        aiperf.frontend_url(endpoint)


def test_a_model_name_that_looks_like_a_flag_is_refused():
    with pytest.raises(aiperf.BadTarget):
        _argv(model="--url=http://elsewhere")


def test_the_run_environment_carries_no_secrets(tmp_path):
    env = aiperf.build_env(tmp_path, aiperf.Tokenizer("/models/m", "client"),
                           base={"PATH": "/bin", "DATABASE_URL": "postgres://secret", "DJANGO_SECRET_KEY": "x"})
    assert "DATABASE_URL" not in env and "DJANGO_SECRET_KEY" not in env
    assert env["TMPDIR"] == str(tmp_path) and env["AIPERF_DATASET_MMAP_BASE_PATH"] == str(tmp_path)
    assert "HF_HUB_OFFLINE" not in env  # see build_env: it breaks tokenizer directories
    assert aiperf.build_env(tmp_path, aiperf.Tokenizer("Qwen/Qwen3-0.6B", "client"), base={})["HF_HUB_OFFLINE"] == "1"


def test_a_step_keeps_aiperfs_exported_percentiles_unrounded():
    export = json.loads(EXPORT.read_text())
    step = aiperf.parse_step(export, index=0, artifact="01-c4", concurrency=4, request_rate=5.0, gpus=2)
    for ours, tag in aiperf.STAT_TAGS.items():
        for q in ("p50", "p90", "p99", "avg"):
            assert getattr(getattr(step, ours), q) == export[tag][q]
    assert step.output_token_throughput == export["output_token_throughput"]["avg"]
    assert step.tokens_per_gpu == export["output_token_throughput"]["avg"] / 2
    assert step.goodput == export["goodput"]["avg"]
    assert step.completed == export["completed_request_count"]["avg"]


def test_progress_counts_finished_requests_and_phases(tmp_path):
    params = resolve("custom", {"concurrency": 2, "request_count": 10})
    progress = aiperf.Progress(tmp_path)
    progress.update(0.0)
    assert progress.fraction(params, 0.0) == 0.0
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "aiperf.log").write_text("x - system_controller - INFO - AIPerf System is PROFILING\n")
    (tmp_path / "profile_export.jsonl").write_text('{"a": 1}\n' * 4 + '{"partial"')
    progress.update(1.0)
    assert progress.phase == "profiling" and progress.records == 4
    assert progress.fraction(params, 1.0) == pytest.approx(0.4)
    with open(tmp_path / "logs" / "aiperf.log", "a") as log:
        log.write("System state: profiling -> processing\n")
    progress.update(2.0)
    assert progress.fraction(params, 2.0) == pytest.approx(0.98)


# --- shapes --------------------------------------------------------------------------------------

def test_shapes_parse_and_count_gpus():
    assert parse_shape("p2d1") == Shape(prefill=2, decode=1)
    assert parse_shape("AGG3") == Shape(workers=3)
    for bad in ("p0d1", "2p1d", "agg", "p1d1; rm -rf /"):
        with pytest.raises(ValueError):
            parse_shape(bad)
    spec = _spec(prefill=1, decode=1, gpus=2)
    assert shape_of(spec) == Shape(prefill=1, decode=1)
    assert shape_gpus(spec, Shape(prefill=2, decode=1)) == 6
    assert shape_of(spec, {"prefill": 3}) == Shape(prefill=3, decode=1)


def test_same_budget_shapes_keep_the_gpu_count():
    spec = _spec(prefill=2, decode=2, gpus=1)
    shapes = same_budget_shapes(spec)
    assert Shape(workers=4) in shapes and Shape(prefill=2, decode=2) in shapes
    assert Shape(prefill=1, decode=3) in shapes and Shape(prefill=3, decode=1) in shapes
    assert all(shape_gpus(spec, s) == 4 for s in shapes)
    # A mocker worker asks no GPU: it counts as one.
    mocker = _spec(template="mocker-disagg", gpus=0)
    assert same_budget_shapes(mocker) == [Shape(workers=2), Shape(prefill=1, decode=1)]


def test_variants_reshape_the_graph_and_keep_its_pools_settings():
    spec = _spec(prefill=1, decode=1, gpus=1)
    agg = variant_spec(spec, name="demo-agg2", shape=Shape(workers=2))
    workers = agg.pools("worker")
    assert agg.name == "demo-agg2" and not agg.pools("prefill") and not agg.pools("decode")
    assert workers[0].replicas == 2 and workers[0].gpus == 1
    assert "--disaggregation-mode" not in (workers[0].args or [])
    split = variant_spec(agg, name="demo-p2d1", shape=Shape(prefill=2, decode=1))
    assert split.pools("prefill")[0].replicas == 2 and split.pools("decode")[0].replicas == 1
    assert split.pools("prefill")[0].args[-2:] == ["--disaggregation-mode", "prefill"]
    assert split.pools("decode")[0].args[-2:] == ["--disaggregation-mode", "decode"]
    assert split.services[0].role == "frontend"


# --- recommendation ------------------------------------------------------------------------------

def _obs(run_id, shape, ttft, itl, gpus=None, throughput=1000.0):
    s = parse_shape(shape)
    return Observation(run_id=run_id, shape=s, gpus=gpus or (s.workers or s.prefill + s.decode), ttft_p90=ttft,
                       itl_p90=itl, throughput=throughput)


def test_the_smallest_measured_shape_meeting_both_targets_is_recommended():
    runs = [_obs(1, "p1d1", 180, 9), _obs(2, "p2d1", 90, 9), _obs(3, "p3d1", 60, 9), _obs(4, "p2d2", 85, 6)]
    advice = recommend(runs, current=Shape(prefill=1, decode=1), ttft_ms=100, itl_ms=10)
    assert advice.shape == Shape(prefill=2, decode=1) and advice.met
    assert advice.reasons[0].startswith("Run #2 (2 prefill : 1 decode, 3 GPUs) met every target")
    assert "TTFT p90 90.0 ms ≤ 100 ms" in advice.reasons[0]
    assert any(r.startswith("Run #1") and "missed" in r for r in advice.reasons)
    assert set(advice.evidence) == {1, 2, 3, 4}


def test_high_ttft_raises_prefill_and_high_itl_raises_decode():
    advice = recommend([_obs(1, "p1d1", 250, 8)], current=Shape(prefill=1, decode=1), ttft_ms=100, itl_ms=10)
    assert advice.shape == Shape(prefill=3, decode=1) and not advice.met
    assert any("prefill 1 → 3" in r for r in advice.reasons)
    advice = recommend([_obs(1, "p2d2", 50, 15)], current=Shape(prefill=2, decode=2), ttft_ms=100, itl_ms=10)
    assert advice.shape == Shape(prefill=2, decode=3)
    assert any("decode 2 → 3" in r for r in advice.reasons)


def test_an_estimate_goes_past_every_measured_count_that_missed():
    runs = [_obs(1, "p1d1", 130, 8), _obs(2, "p2d1", 125, 8), _obs(3, "p3d1", 120, 8)]
    advice = recommend(runs, current=Shape(prefill=1, decode=1), ttft_ms=100, itl_ms=10)
    assert advice.shape.prefill == 4
    assert any("Caution: more prefill did not lower TTFT" in r for r in advice.reasons)


def test_only_targets_that_are_set_count_and_no_target_is_an_error():
    runs = [_obs(1, "p1d1", 500, 9)]
    assert recommend(runs, current=Shape(prefill=1, decode=1), ttft_ms=None, itl_ms=10).met
    with pytest.raises(ValueError, match="no TTFT or ITL target"):
        recommend(runs, current=Shape(prefill=1, decode=1), ttft_ms=None, itl_ms=None)


def test_aggregated_graphs_scale_their_workers_and_other_kinds_are_mentioned():
    runs = [_obs(1, "agg2", 150, 12), _obs(2, "p1d1", 80, 8)]
    advice = recommend(runs, current=Shape(workers=2), ttft_ms=100, itl_ms=10)
    assert advice.shape == Shape(workers=3)
    assert any("disaggregated run #2" in r for r in advice.reasons)


# --- reports ---------------------------------------------------------------------------------------

def test_svg_chart_has_one_line_per_run_and_no_external_reference():
    from benchmarks.reports import legend, svg_chart

    data = [{"label": "#1 p1d1", "color": "#0072B2", "dash": "", "marker": "circle",
             "points": [{"x": 100.0, "ttft": 50.0}, {"x": 200.0, "ttft": 80.0}]},
            {"label": "#2 p2d1", "color": "#E69F00", "dash": "8 4", "marker": "square",
             "points": [{"x": 150.0, "ttft": 40.0}]}]
    svg = svg_chart(data, "ttft", "TTFT", "ms")
    assert svg.count("<path d=\"M") == 1 and "<rect" in svg and "<circle" in svg
    assert not re.search(r"(href|src)=", svg + legend(data))


def test_run_params_round_trip_through_json():
    params = resolve("custom", {"sweep": [1, 2]})
    assert RunParams.model_validate(json.loads(params.model_dump_json())) == params


def test_a_recommendation_for_a_gpu_free_graph_counts_no_gpus():
    from benchmarks.shapes import Shape

    runs = [Observation(run_id=1, shape=Shape(prefill=1, decode=1), gpus=2, ttft_p90=50, itl_p90=5, gpu_free=True),
            Observation(run_id=2, shape=Shape(prefill=2, decode=2), gpus=4, ttft_p90=40, itl_p90=4, gpu_free=True)]
    advice = recommend(runs, current=Shape(prefill=1, decode=1), ttft_ms=100, itl_ms=10)
    text = " ".join(advice.reasons)
    assert text.startswith("Run #1 (1 prefill : 1 decode, no GPU) met every target")
    assert "GPU" not in text.replace("no GPU", "")
