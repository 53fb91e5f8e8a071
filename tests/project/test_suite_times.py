"""scripts/suite_times.py reads the suite's size, time and slowest tests from CI's own log."""

from __future__ import annotations

import json

import pytest

from scripts import suite_times

LOG = """\
........................................................................ [ 99%]
============================= slowest 30 durations =============================
61.20s call     tests/graphs/local/test_vllm_cpu.py::test_a_real_engine_answers
12.50s setup    tests/metrics/test_metrics_live.py::test_charts_follow_the_graph
0.01s teardown tests/jobs/test_jobs.py::test_waiting
=========================== short test summary info ============================
SKIPPED [1] tests/core/test_upstream_corpus.py:30: needs ../shared
2963 passed, 1 skipped, 412 warnings in 1877.42s (0:31:17)
"""


def test_the_counts_time_and_slowest_tests_are_read_from_the_log():
    found = suite_times.read(LOG)
    assert found["counts"] == {"passed": 2963, "skipped": 1, "warnings": 412}
    assert found["seconds"] == 1877.42
    assert found["slowest"][0] == {"test": "tests/graphs/local/test_vllm_cpu.py::test_a_real_engine_answers",
                                   "phase": "call", "seconds": 61.2}
    assert [s["phase"] for s in found["slowest"]] == ["call", "setup", "teardown"]


def test_a_log_without_a_summary_is_refused_and_writes_nothing(tmp_path, capsys):
    log, out = tmp_path / "ci.log", tmp_path / "suite.json"
    log.write_text("make: *** [test] Error 2\n")
    assert suite_times.main([str(log), "--commit", "abc", "--output", str(out)]) == 2
    assert "no pytest summary line" in capsys.readouterr().err and not out.exists()


def test_the_json_names_the_commit_and_the_command(tmp_path):
    log, out = tmp_path / "ci.log", tmp_path / "suite.json"
    log.write_text(LOG)
    assert suite_times.main([str(log), "--commit", "abc1234", "--output", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["commit"] == "abc1234" and written["counts"]["passed"] == 2963


@pytest.mark.parametrize("line", ["1 failed, 2 passed in 3.5s", "== 1 failed, 2 passed in 3.5s (0:00:03) =="])
def test_a_failed_run_is_read_as_it_is(line):
    assert suite_times.read(line)["counts"] == {"failed": 1, "passed": 2}
