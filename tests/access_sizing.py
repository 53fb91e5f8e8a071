"""The sizing part of the access matrix's world: a finished estimate holding AIConfigurator's
real answer (computed once per test session, its generated DGDs kept), and a DGDR applied from
it to the world's cluster on the API emulator, profiled, its chosen DGD ready to adopt."""

from __future__ import annotations

from pathlib import Path

import yaml

from sizing import aic, clusters, services
from sizing.models import Estimate, EstimateState
from tests.k8s_emulator.schema import CRD_DIR, load_crd_file
from tests.k8s_helpers import NS

# tests/sizing/test_sizing.py's inputs: inside AIConfigurator's support matrix, one search of seconds.
INPUTS = aic.Inputs(model="Qwen/Qwen3-32B", system="h200_sxm", total_gpus=8, isl=4000, osl=500, ttft=600, tpot=20,
                    backend="vllm")
# The same inputs as the estimate form and the API post them: answered from the stored estimate.
FORM = {"model": INPUTS.model, "system": INPUTS.system, "backend": INPUTS.backend, "gpus": INPUTS.total_gpus,
        "isl": INPUTS.isl, "osl": INPUTS.osl, "ttft": INPUTS.ttft, "itl": INPUTS.tpot}
DGDR_CRD = "nvidia.com_dynamographdeploymentrequests.yaml"
PROFILED = CRD_DIR.parents[1] / "tests" / "fixtures" / "reference" / "seed-disagg.yaml"


def estimate_result(save_dir: Path) -> dict:
    """AIConfigurator's default search for INPUTS, its artefacts under ``save_dir``."""
    return aic.run_default(INPUTS, save_dir=save_dir)


def sizing_world(*, result: dict, save_dir: Path, kube, cluster, user) -> dict:
    estimate = Estimate.objects.create(
        inputs=INPUTS.as_dict(), input_key=services.input_key(INPUTS), state=EstimateState.SUCCEEDED, progress=100,
        result=result, elapsed_s=result["elapsed_s"], perf_db_version=result["perf_db_version"] or "",
        aiconfigurator_version=result["aiconfigurator"], artifact_dir=str(save_dir), requested_by=user)
    kube.install_crd(load_crd_file(str(CRD_DIR / DGDR_CRD)))
    req = clusters.dgdr_apply(estimate=estimate, cluster=cluster, namespace=NS, name="matrix-dgdr", user=user)
    kube.operator.dgdr.finish_profiling("matrix-dgdr", NS, yaml.safe_dump(yaml.safe_load(PROFILED.read_text())))
    return {"estimate": estimate.pk, "deployment_request": req.pk, "namespace": NS}
