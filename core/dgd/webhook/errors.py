"""A field error as apimachinery's ``field.Error`` prints it (kubernetes/apimachinery
``pkg/util/validation/field/errors.go``, ``Error()`` and ``ErrorBody()``), and the small helpers the
rules share to read a v1beta1 DGD as the operator's Go types do."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# The Dynamo operator's consts (deploy/operator/internal/consts/consts.go@2a6da14c, lines 43-237).
ENABLE_GROVE = "nvidia.com/enable-grove"
WORKLOAD_PROVIDER = "nvidia.com/workload-provider"
PROVIDER_COMPONENT, PROVIDER_GROVE = "component", "grove"
GROVE_UPDATE_STRATEGY = "nvidia.com/grove-update-strategy"
DISCOVERY_MODE = "nvidia.com/dynamo-kube-discovery-mode"
GPU_POWER_LIMIT = "dynamo.nvidia.com/gpu-power-limit"
GPU_RESOURCE = "nvidia.com/gpu"
ORIGIN_VERSION = "nvidia.com/dynamo-operator-origin-version"
VLLM_EXECUTOR_BACKEND = "nvidia.com/vllm-distributed-executor-backend"
MAIN = "main"
FRONTEND_SIDECAR_CONTAINER = "sidecar-frontend"
GROVE_API_VERSION = "grove.io/v1alpha1"  # internal/provideroverride/registry.go@2a6da14c:54
IMMUTABLE = "field is immutable"  # apimachinery api/validation.FieldImmutableErrorMsg
NO_VALUE = object()

_REASONS = {"Invalid": "FieldValueInvalid", "Required": "FieldValueRequired", "Forbidden": "FieldValueForbidden",
            "NotSupported": "FieldValueNotSupported", "Duplicate": "FieldValueDuplicate"}
_TYPES = {"Invalid": "Invalid value", "Required": "Required value", "Forbidden": "Forbidden",
          "NotSupported": "Unsupported value", "Duplicate": "Duplicate value"}


def go_value(value: Any) -> str:
    """How ``ErrorBody`` prints a bad value: a string quoted (%q), a number or bool as is, nil as
    ``null``, anything else as JSON."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class FieldError:
    """One error of the operator's ``field.ErrorList``. ``rule`` names the rule family (the
    pre-check's finding code is ``webhook_<rule>``); ``update`` marks the rules that only an update
    runs (``validateDynamoGraphDeploymentUpdate``): deleting and recreating the DGD avoids those."""

    path: str
    kind: str
    detail: str = ""
    value: Any = NO_VALUE
    supported: tuple[str, ...] = ()
    rule: str = ""
    update: bool = field(default=False, compare=False)

    @property
    def body(self) -> str:
        head = _TYPES[self.kind]
        if self.kind in ("Required", "Forbidden"):
            return f"{head}: {self.detail}" if self.detail else head
        text = f"{head}: {go_value(None if self.value is NO_VALUE else self.value)}"
        if self.kind == "NotSupported":
            return text + ": supported values: " + ", ".join(json.dumps(s) for s in self.supported)
        return f"{text}: {self.detail}" if self.detail else text

    @property
    def reason(self) -> str:
        return _REASONS[self.kind]

    @property
    def message(self) -> str:
        return self.body

    def __str__(self) -> str:
        return f"{self.path}: {self.body}"


def invalid(path: str, value: Any, detail: str, rule: str) -> FieldError:
    return FieldError(path, "Invalid", detail, value, rule=rule)


def required(path: str, detail: str, rule: str) -> FieldError:
    return FieldError(path, "Required", detail, rule=rule)


def forbidden(path: str, detail: str, rule: str) -> FieldError:
    return FieldError(path, "Forbidden", detail, rule=rule)


def not_supported(path: str, value: Any, supported: list[str], rule: str) -> FieldError:
    return FieldError(path, "NotSupported", "", value, tuple(supported), rule=rule)


# -- reading a v1beta1 component as the Go helpers do ------------------------------------------------


def obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def nodes(component: dict[str, Any]) -> int:
    """``GetNumberOfNodes``: ``multinode.nodeCount`` (the CRD defaults it to 2), 1 without multinode."""
    multinode = component.get("multinode")
    if not isinstance(multinode, dict):
        return 1
    return int(multinode.get("nodeCount", 2) or 0)


def experimental(component: dict[str, Any]) -> dict[str, Any] | None:
    value = component.get("experimental")
    return value if isinstance(value, dict) else None


def gms(component_or_experimental: dict[str, Any] | None, *, of_experimental: bool = False):
    exp = component_or_experimental if of_experimental else experimental(component_or_experimental or {})
    value = (exp or {}).get("gpuMemoryService")
    return value if isinstance(value, dict) else None


def failover(exp: dict[str, Any] | None) -> dict[str, Any] | None:
    value = (exp or {}).get("failover")
    return value if isinstance(value, dict) else None


def grove(exp: dict[str, Any] | None) -> dict[str, Any] | None:
    value = (exp or {}).get("grove")
    return value if isinstance(value, dict) else None


def mode(section: dict[str, Any] | None) -> str:
    """``effectiveGMSMode``: an empty mode is IntraPod."""
    return (section or {}).get("mode") or "IntraPod"


def inter_pod(section: dict[str, Any] | None) -> bool:
    return section is not None and mode(section) == "InterPod"


def force_scaling_group(exp: dict[str, Any] | None) -> bool:
    return bool((grove(exp) or {}).get("forceScalingGroup"))


def uses_pcsg(component: dict[str, Any]) -> bool:
    """``UsesPCSG`` (api/v1beta1/dynamocomponentdeployment_types.go@2a6da14c:344)."""
    exp = experimental(component)
    return nodes(component) > 1 or (gms(exp, of_experimental=True) or {}).get("mode") == "InterPod" \
        or force_scaling_group(exp)


def containers(component: dict[str, Any], key: str = "containers") -> list[dict[str, Any]]:
    spec = obj(obj(component.get("podTemplate")).get("spec"))
    return [c if isinstance(c, dict) else {} for c in spec.get(key) or []]


def main_index(component: dict[str, Any]) -> int:
    return next((i for i, c in enumerate(containers(component)) if c.get("name") == MAIN), -1)


def main_resources(component: dict[str, Any]) -> dict[str, Any]:
    index = main_index(component)
    return obj(containers(component)[index].get("resources")) if index >= 0 else {}


def _gpu_name(name: str) -> bool:
    low = name.lower()
    return low == GPU_RESOURCE or low == "gpu" or low.endswith("/gpu") or "/mig-" in low or low.startswith("gpu.")


def gpu_count(resources: dict[str, Any]) -> tuple[int, str | None]:
    """``dra.ExtractGPUCountFromResourceRequirements``: the first GPU resource of the limits, else of
    the requests; (count, error)."""
    from core.cel import Quantity

    for section in ("limits", "requests"):
        names = sorted(n for n in obj(resources.get(section)) if _gpu_name(n))
        if names:
            raw = resources[section][names[0]]
            try:
                value = Quantity(str(raw)).value
            except ValueError:
                return 0, f'GPU resource "{names[0]}" quantity "{raw}" is not a quantity'
            if value.denominator != 1:
                return 0, f'GPU resource "{names[0]}" quantity "{raw}" must be a whole number'
            return int(value), None
    return 0, None
