"""Sizing with AIConfigurator, through the API: its support matrix, an estimate run as a job and
equal to AIConfigurator's own CLI for the same inputs, the cache, refusals naming the field,
two estimates compared, and a graph made from a ranked configuration with the mocker's
profile data written from AIConfigurator's timing."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from controlplane.celery import app as celery_app
from graphs.models import Graph
from sizing import aic, services, timing
from sizing.models import Estimate
from sizing.services import SizingRefused

# Transactional: a recorded estimate runs (eagerly, in this process) when its request commits.
pytestmark = pytest.mark.django_db(transaction=True)

ESTIMATES = "/api/sizing/estimates/"
QWEN = {"model": "Qwen/Qwen3-32B", "system": "h200_sxm", "gpus": 8, "isl": 4000, "osl": 500, "ttft": 600,
        "itl": 20, "backend": "vllm"}


@pytest.fixture(autouse=True)
def _eager(settings, tmp_path):
    settings.SIZING_DIR = tmp_path / "sizing"
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


def _estimate(api, body=QWEN) -> dict:
    created = api.post(ESTIMATES, body, format="json")
    assert created.status_code in (200, 201), created.content
    return api.get(f"{ESTIMATES}{created.json()['id']}/").json()


def _cli_answer(body: dict, save_dir: Path) -> tuple[str, float, list[dict]]:
    """AIConfigurator's own ``cli default``: the experiment it chose, its tokens/s/GPU, and the
    chosen experiment's ranked rows from the CSV it saves."""
    inputs = aic.Inputs(model=body["model"], system=body["system"], total_gpus=body["gpus"], isl=body["isl"],
                        osl=body["osl"], ttft=body["ttft"], tpot=body["itl"], backend=body["backend"])
    argv = [str(Path(sys.executable).with_name("aiconfigurator")), *inputs.cli_argv(str(save_dir))[1:]]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    text = out.stdout + out.stderr
    match = re.search(r"Best Experiment Chosen: (?:\x1b\[[0-9;]*m)?(\w+) at ([0-9.]+) tokens/s/gpu", text)
    assert match, text[-3000:]
    chosen = match.group(1)
    (table,) = save_dir.glob(f"**/{chosen}/best_config_topn.csv")
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    return chosen, float(match.group(2)), rows


def test_the_estimate_equals_aiconfigurators_own_cli_for_the_same_inputs(api_for, tmp_path):
    estimate = _estimate(api_for("operator"))
    assert estimate["state"] == "succeeded", estimate["error"]
    result = estimate["result"]
    chosen, tokens_per_gpu, rows = _cli_answer(QWEN, tmp_path / "cli")

    assert result["chosen"] == chosen
    best = result["experiments"][chosen]["configurations"][0]
    assert round(best["tokens/s/gpu"], 2) == tokens_per_gpu
    assert round(result["best_throughputs"][chosen], 2) == tokens_per_gpu
    # Every ranked configuration, in the CLI's order, with the CLI's numbers.
    ours = result["experiments"][chosen]["configurations"]
    assert [round(r["tokens/s/gpu"], 3) for r in ours] == [round(float(r["tokens/s/gpu"]), 3) for r in rows]
    parallel = "(p)parallel" if chosen == "disagg" else "parallel"
    assert [r[parallel] for r in ours] == [r[parallel] for r in rows]
    assert result["perf_db_version"] == best.get("(p)version", best.get("version"))
    assert estimate["elapsed_s"] > 0 and estimate["aiconfigurator_version"] == "0.12.0"
    assert {"agg", "disagg"} <= set(result["experiments"])
    assert all(len(e["pareto"]) > 0 for e in result["experiments"].values())


def test_the_same_inputs_are_answered_from_the_stored_estimate(api_for):
    api = api_for("operator")
    first = api.post(ESTIMATES, QWEN, format="json")
    assert first.status_code == 201 and first.json()["cached"] is False
    again = api.post(ESTIMATES, QWEN, format="json")
    assert again.status_code == 200
    assert again.json()["cached"] is True and again.json()["id"] == first.json()["id"]
    assert again.json()["state"] == "succeeded"
    fresh = api.post(ESTIMATES, {**QWEN, "fresh": True}, format="json")
    assert fresh.status_code == 201 and fresh.json()["id"] != first.json()["id"]
    assert Estimate.objects.count() == 2
    # 600 and 600.0 are the same target: one cache key.
    assert services.input_key(aic.Inputs("m", "s", 8, 10, 10, 600, 20)) == services.input_key(
        aic.Inputs("m", "s", 8.0, 10, 10, 600.0, 20.0, backend_version=""))


@pytest.mark.parametrize(("change", "field"), [
    ({"system": "h999_sxm"}, "system"),
    ({"backend": "onnx"}, "backend"),
    ({"model": "nobody/no-such-model"}, "model"),
])
def test_inputs_outside_aiconfigurators_support_matrix_are_refused_naming_the_field(api_for, change, field):
    response = api_for("operator").post(ESTIMATES, {**QWEN, **change}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field] and str(change[field]) in response.json()[field][0]
    assert Estimate.objects.count() == 0


def test_a_model_the_matrix_lists_but_not_on_that_system_is_refused_naming_it(api_for):
    matrix = aic.support_matrix()
    model, system, backend = next(
        (m, sys_name, b) for m, pairs in matrix["model_support"].items() for sys_name, backends in
        matrix["versions"].items() for b in backends if f"{sys_name}/{b}" not in pairs)
    response = api_for("operator").post(ESTIMATES, {**QWEN, "model": model, "system": system, "backend": backend},
                                        format="json")
    assert response.status_code == 422
    assert response.json()["detail"].startswith(f"model: AIConfigurator's support matrix lists {model} on")
    assert Estimate.objects.count() == 0


def test_out_of_range_inputs_are_a_400_naming_the_field(api_for):
    response = api_for("operator").post(ESTIMATES, {**QWEN, "gpus": 0, "isl": "many"}, format="json")
    assert response.status_code == 400
    assert set(response.json()) >= {"gpus", "isl"}


def test_viewers_read_estimates_and_cannot_ask_for_one(api_for):
    assert api_for("viewer").post(ESTIMATES, QWEN, format="json").status_code == 403
    assert api_for("viewer").get(ESTIMATES).status_code == 200


def test_the_support_matrix_is_aiconfigurators_own(api_for):
    from aiconfigurator_core.sdk.common import get_support_matrix

    body = api_for("viewer").get("/api/sizing/support/").json()
    rows = [r for r in get_support_matrix() if r["Status"].endswith("PASS")]
    assert body["systems"] == sorted({r["System"] for r in rows})
    assert set(body["models"]) == {r["HuggingFaceID"] for r in rows}
    assert "h200_sxm/vllm" in body["model_support"]["Qwen/Qwen3-32B"]


def test_two_estimates_are_compared(api_for):
    api = api_for("operator")
    a = _estimate(api)
    b = _estimate(api, {**QWEN, "gpus": 16})
    body = api.get("/api/sizing/compare/", {"a": a["id"], "b": b["id"]}).json()
    assert body["inputs_changed"] == {"total_gpus": [8, 16]}
    assert body["chosen"] == [a["result"]["chosen"], b["result"]["chosen"]]
    assert body["best"][0]["tokens/s/gpu"] == a["result"]["experiments"][a["result"]["chosen"]]["configurations"][0][
        "tokens/s/gpu"]


def test_a_graph_is_made_from_a_ranked_configuration_with_the_mockers_timing(api_for):
    from dynamo.mocker.utils.planner_profiler_perf_data_converter import is_mocker_format_npz

    api = api_for("operator")
    estimate = _estimate(api)
    best = estimate["result"]["experiments"]["disagg"]["configurations"][0]
    made = api.post(f"{ESTIMATES}{estimate['id']}/graph/", {"name": "qwen-sized", "mode": "disagg", "rank": 1},
                    format="json")
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["dynamo_version"] == "1.6.1" and body["unchanged"] is False
    again = api.post(f"{ESTIMATES}{estimate['id']}/graph/", {"name": "qwen-sized", "mode": "disagg", "rank": 1},
                     format="json")
    assert again.status_code == 200 and again.json()["unchanged"] is True
    assert again.json()["revision"] == body["revision"]
    assert body["timing"] == f"AIConfigurator for h200_sxm, TP{best['(p)tp']} prefill / TP{best['(d)tp']} decode"
    spec = Graph.objects.get(name="qwen-sized").head.graph_spec
    pools = {s.role: s for s in spec.services}
    assert pools["prefill"].replicas == best["(p)workers"] and pools["decode"].replicas == best["(d)workers"]
    assert pools["prefill"].gpus == best["(p)tp"] and pools["decode"].gpus == best["(d)tp"]
    assert all(s.image.endswith(":1.6.1") for s in spec.services if s.image)
    profile = timing.profile_dir(estimate["id"], "disagg", 1) / timing.PROFILE_FILE
    assert is_mocker_format_npz(profile)
    tables = timing.load_tables(profile)
    # The prefill table at the estimate's ISL is AIConfigurator's prefill time at batch 1.
    isl_index = list(tables["prefill_isl"]).index(QWEN["isl"])
    assert 0 < tables["prefill_ttft_ms"][isl_index] <= best["ttft"]
    assert np.all(np.diff(tables["prefill_ttft_ms"]) > 0)  # longer prompts take longer
    assert tables["decode_itl"].shape == (timing.KV_POINTS, len(tables["decode_context_length"]))
    refused = api.post(f"{ESTIMATES}{estimate['id']}/graph/", {"name": "other", "mode": "disagg", "rank": 99},
                       format="json")
    assert refused.status_code == 422 and refused.json()["detail"].startswith("rank:")
    assert not Graph.objects.filter(name="other").exists()
    # What a random schemathesis run sent: a release that is not one, a name Kubernetes refuses.
    # The first is not what the schema states (400); the second is, and the rules refuse it (422).
    for body, field, status in (({"name": "zc", "rank": 1, "dynamo_version": "Running"}, "dynamo_version", 400),
                                ({"name": "ZC", "rank": 199124218012}, None, 422)):
        refused = api.post(f"{ESTIMATES}{estimate['id']}/graph/", body, format="json")
        assert refused.status_code == status, refused.content
        assert field is None or field in refused.json(), refused.json()
    assert not Graph.objects.filter(name__in=["zc", "ZC"]).exists()
    from sizing.configurations import graph_from_estimate

    with pytest.raises(SizingRefused, match="dynamo_version: 'Running' is not a Dynamo version"):
        graph_from_estimate(estimate=Estimate.objects.get(pk=estimate["id"]), name="zc", dynamo_version="Running")


def test_adapting_a_manifest_moves_only_dynamo_images():
    from sizing.configurations import adapt_manifest

    obj = {"metadata": {"name": "x"}, "spec": {"services": {
        "A": {"extraPodSpec": {"mainContainer": {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0"}}},
        "B": {"extraPodSpec": {"mainContainer": {"image": "example/tool:latest"}}}}}}
    out = adapt_manifest(obj, name="y", dynamo_version="1.6.1", annotations={"k": "v"})
    assert out["metadata"] == {"name": "y", "annotations": {"k": "v"}}
    images = [s["extraPodSpec"]["mainContainer"]["image"] for s in out["spec"]["services"].values()]
    assert images == ["nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", "example/tool:latest"]
    assert yaml.safe_dump(obj).count("1.3.0") == 1  # the input is untouched


def test_the_sizing_pages_ask_follow_show_and_make_a_graph(client_for):
    viewer, operator = client_for("viewer"), client_for("operator")
    page = viewer.get("/sizing/")
    assert page.status_code == 200 and b"h200_sxm" in page.content and b"Qwen/Qwen3-32B" in page.content
    assert viewer.post("/sizing/", {**QWEN}).status_code == 403
    asked = operator.post("/sizing/", QWEN)
    assert asked.status_code == 302
    detail = operator.get(asked["Location"])
    estimate = Estimate.objects.get()
    html = detail.content.decode()
    assert estimate.state == "succeeded"
    assert 'id="pareto-data"' in html and 'id="configurations-disagg"' in html and 'id="configurations-agg"' in html
    assert f"{estimate.result['best_throughputs']['disagg']:.2f} tokens/s/GPU" in html
    assert estimate.perf_db_version in html and estimate.result["comparison"] in html
    # The status fragment stops htmx's polling (286) once the estimate is finished.
    fragment = operator.get(asked["Location"] + "?fragment=status", HTTP_HX_REQUEST="true")
    assert fragment.status_code == 286
    # The same inputs again: answered from the stored estimate, and the page says so.
    again = operator.post("/sizing/", QWEN, follow=True)
    assert Estimate.objects.count() == 1 and f"Answered from estimate #{estimate.pk}" in again.content.decode()
    refused = operator.post(f"/sizing/estimates/{estimate.pk}/graph/",
                            {"name": "paged", "mode": "agg", "rank": 42, "dynamo_version": "1.6.1"})
    assert refused.status_code == 422 and "no rank 42" in refused.content.decode()
    made = operator.post(f"/sizing/estimates/{estimate.pk}/graph/",
                         {"name": "paged", "mode": "agg", "rank": 1, "dynamo_version": "1.6.1"})
    assert made.status_code == 302 and made["Location"].endswith("/graphs/paged/")
    bad = operator.post("/sizing/", {**QWEN, "system": "nope"})
    assert bad.status_code == 400 and b"system" in bad.content


def test_an_estimates_inputs_render_as_a_dgdr_the_crd_accepts(api_for):
    from core.schema import validator_for
    from sizing import dgdr

    inputs = aic.Inputs(model="Qwen/Qwen3-32B", system="h200_sxm", total_gpus=8, isl=4000, osl=500, ttft=600,
                        tpot=20, backend="vllm")
    estimate = Estimate.objects.create(inputs=inputs.as_dict(), input_key="k", state="succeeded")
    body = api_for("viewer").get(f"{ESTIMATES}{estimate.pk}/dgdr/", {"name": "qwen-dgdr", "namespace": "llm"}).json()
    manifest = body["manifest"]
    assert body["errors"] == []
    assert list(validator_for(dgdr.API_VERSION, dgdr.CRD).iter_errors(manifest)) == []
    assert manifest["apiVersion"] == "nvidia.com/v1beta1" and manifest["kind"] == "DynamoGraphDeploymentRequest"
    assert manifest["metadata"] == {"name": "qwen-dgdr", "namespace": "llm"}
    spec = manifest["spec"]
    assert (spec["model"], spec["backend"], spec["searchStrategy"]) == ("Qwen/Qwen3-32B", "vllm", "rapid")
    assert spec["hardware"] == {"totalGpus": 8, "gpuSku": "h200_sxm"}
    assert spec["sla"] == {"ttft": 600, "itl": 20} and spec["workload"] == {"isl": 4000, "osl": 500}
    assert spec["image"].endswith("/dynamo-planner:1.6.1")
    # A system the CRD has no SKU name for is left to the operator's discovery.
    assert "gpuSku" not in dgdr.render(aic.Inputs(**{**inputs.as_dict(), "system": "b300_sxm"}), name="x")[
        "spec"]["hardware"]
    assert dgdr.schema_errors({**manifest, "spec": {**spec, "searchStrategy": "exhaustive"}})
    bad = api_for("viewer").get(f"{ESTIMATES}{estimate.pk}/dgdr/", {"name": "Not A Name"})
    assert bad.status_code == 400 and "name" in bad.json()
