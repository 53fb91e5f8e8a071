"""`dynamo-cp sizing` against the live test server, run as a process: an estimate in JSON and
as a table, the same inputs answered from the cache, a graph made from a ranked configuration,
and refusals with their reasons and exit statuses. Estimates run eagerly in the server."""

from __future__ import annotations

import json

import pytest

from controlplane.celery import app as celery_app
from dynamo_cp import exits
from graphs.models import Graph
from tests.dynamo_cp.test_dynamo_cp import cli, err, out  # noqa: F401  (cli: the fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ARGS = ["--model", "Qwen/Qwen3-32B", "--system", "h200_sxm", "--gpus", "8", "--isl", "4000", "--osl", "500",
        "--ttft", "600", "--itl", "20", "--backend", "vllm"]


@pytest.fixture
def sized(request, settings, tmp_path):
    settings.SIZING_DIR = tmp_path / "sizing"
    celery_app.conf.task_always_eager = True
    yield request.getfixturevalue("cli")
    celery_app.conf.task_always_eager = False


def test_estimate_then_create_a_graph_from_its_best_configuration(sized):
    first = sized("sizing", "estimate", *ARGS, "-o", "json", "-q")
    assert first.returncode == exits.OK, err(first)
    estimate = json.loads(out(first))
    assert estimate["state"] == "succeeded" and estimate["cached"] is False
    chosen = estimate["result"]["chosen"]
    best = estimate["result"]["experiments"][chosen]["configurations"][0]

    again = sized("sizing", "estimate", *ARGS, "-q")
    assert again.returncode == exits.OK, err(again)
    text = out(again)
    assert f"chosen: {chosen} at {best['tokens/s/gpu']:.2f} tokens/s/gpu" in text
    assert "(cached)" in text and "RANK" in text and "TOKENS/S/GPU" in text
    # Each configuration's GPUs per replica and its parallelism with DP and EP, as the page shows them.
    assert "GPUS/REPLICA" in text and "PARALLEL" in text
    parallel = best.get("parallel") or best.get("(p)parallel")
    assert parallel and "dp" in parallel and parallel in text

    made = sized("sizing", "create", "sized-qwen", "--estimate", str(estimate["id"]), "--rank", "1")
    assert made.returncode == exits.OK, err(made)
    assert out(made).startswith(f"graph sized-qwen revision 1 from estimate #{estimate['id']}, {chosen} rank 1")
    assert "mocker timed by AIConfigurator for h200_sxm" in out(made)
    assert Graph.objects.filter(name="sized-qwen").exists()
    # The graph starts with the SLO it was sized for (--ttft 600 --itl 20): goodput reads against it.
    from metrics.models import Objectives

    objectives = Objectives.objects.get(graph__name="sized-qwen")
    assert (objectives.ttft_ms, objectives.itl_ms) == (600.0, 20.0)


def test_refusals_name_the_field_and_exit_non_zero(sized):
    bad = sized("sizing", "estimate", *ARGS[:2], "--system", "h999_sxm", *ARGS[4:], "-q")
    assert bad.returncode != exits.OK
    assert "system" in err(bad) and "h999_sxm" in err(bad) and "not a valid choice" in err(bad)
    missing = sized("sizing", "create", "x", "--estimate", "999999")
    assert missing.returncode != exits.OK and "999999" not in out(missing)


def test_the_dgdr_the_cli_prints_is_the_one_an_apply_sends(cli):  # noqa: F811
    import yaml

    from sizing import aic
    from sizing.models import Estimate

    inputs = aic.Inputs(model="Qwen/Qwen3-32B", system="h200_sxm", total_gpus=8, isl=4000, osl=500, ttft=600,
                        tpot=20, backend="vllm")
    estimate = Estimate.objects.create(inputs=inputs.as_dict(), input_key="k", state="succeeded")
    shown = cli("sizing", "dgdr", str(estimate.pk), "qwen-dgdr", "--namespace", "llm")
    assert shown.returncode == exits.OK, err(shown)
    assert yaml.safe_load(out(shown))["spec"]["autoApply"] is False  # as README and the POST: off by default
    on = cli("sizing", "dgdr", str(estimate.pk), "qwen-dgdr", "--auto-apply")
    assert on.returncode == exits.OK, err(on)
    assert yaml.safe_load(out(on))["spec"]["autoApply"] is True
