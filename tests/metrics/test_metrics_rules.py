"""deploy/prometheus: the recording rules pass promtool's check and its rule unit tests, the
PrometheusRule holds the same groups, and the config we write for local graphs is valid."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest
import yaml

from metrics import localprom

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = localprom.find_tool("promtool")
def needs_promtool(test):
    """promtool ships with Debian's prometheus package (scripts/services.sh installs it)."""

    @functools.wraps(test)
    def wrapped(*args, **kwargs):
        assert PROMTOOL, "no promtool: run scripts/services.sh (installs Debian's prometheus)"
        return test(*args, **kwargs)

    return wrapped


def promtool(*args: str, cwd: Path = DEPLOY) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@needs_promtool
def test_the_recording_rules_pass_promtool_check():
    result = promtool("check", "rules", "recording-rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 10 rules found" in result.stdout


@needs_promtool
def test_the_recording_rules_compute_the_expected_quantiles():
    result = promtool("test", "rules", "recording-rules.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_prometheus_rule_holds_the_same_groups():
    plain = yaml.safe_load((DEPLOY / "recording-rules.yaml").read_text())
    crd = yaml.safe_load((DEPLOY / "prometheusrule.yaml").read_text())
    assert crd["kind"] == "PrometheusRule" and crd["apiVersion"] == "monitoring.coreos.com/v1"
    assert crd["spec"]["groups"] == plain["groups"]


@needs_promtool
@pytest.mark.parametrize("interval", [1, 5, 15])
def test_the_local_prometheus_config_passes_promtool_check(tmp_path, settings, interval):
    config = localprom.write_config(tmp_path, scrape_interval=interval)
    result = promtool("check", "config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
