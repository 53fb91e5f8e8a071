"""An estimate's inputs as a DynamoGraphDeploymentRequest (``nvidia.com/v1beta1``): the same
question put to the Dynamo operator on a cluster, whose profiler answers it with AIConfigurator
("rapid" search) and deploys the DGD it picks (``autoApply``).

Pure: inputs in, an object out, checked against the DGDR CRD in core/crds/ (the schema the
operator's API server enforces). The mapping, field by field, from the CRD's own descriptions:
``model`` the Hugging Face id; ``backend``; ``hardware.totalGpus`` the GPU budget and
``hardware.gpuSku`` the system (AIConfigurator's system names are the operator's SKU names
where the CRD lists them); ``sla.ttft`` / ``sla.itl`` in ms; ``workload.isl`` / ``workload.osl``;
``image`` the profiling job's image, ``dynamo-planner`` of the chosen release (1.1.0 and later).
v1beta2 (1.7.0's search API) is never written."""

from __future__ import annotations

from typing import Any

from core.facts import LATEST, DynamoVersion
from core.schema import load_crd, validator_for

from .aic import Inputs

API_VERSION = "nvidia.com/v1beta1"
CRD = "nvidia.com_dynamographdeploymentrequests.yaml"


def _sku_names() -> list[str]:
    crd = load_crd(CRD)
    spec = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta1")["schema"]["openAPIV3Schema"]
    sku = spec["properties"]["spec"]["properties"]["hardware"]["properties"]["gpuSku"]
    return sku["allOf"][0]["enum"] if "allOf" in sku else sku.get("enum", [])


def render(inputs: Inputs, *, name: str, namespace: str | None = None, dynamo_version: str | None = None,
           auto_apply: bool = False) -> dict[str, Any]:
    """The DGDR for ``inputs``. ``auto_apply`` off by default, as dgdr_apply and the API apply it:
    a preview is the object that would be applied (the control plane adopts the chosen DGD)."""
    release = DynamoVersion.parse(dynamo_version or LATEST)
    hardware: dict[str, Any] = {"totalGpus": inputs.total_gpus}
    if inputs.system in _sku_names():
        hardware["gpuSku"] = inputs.system
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": API_VERSION, "kind": "DynamoGraphDeploymentRequest", "metadata": metadata,
        "spec": {
            "model": inputs.model, "backend": inputs.backend, "searchStrategy": "rapid", "autoApply": auto_apply,
            "image": f"nvcr.io/nvidia/ai-dynamo/dynamo-planner:{release}",
            "hardware": hardware, "sla": {"ttft": inputs.ttft, "itl": inputs.tpot},
            "workload": {"isl": inputs.isl, "osl": inputs.osl},
        },
    }


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """The DGDR CRD's structural errors for ``obj``: ``path: message``, empty when it is valid."""
    validator = validator_for(API_VERSION, CRD)
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]
