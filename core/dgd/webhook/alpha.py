"""The webhook's rules on the v1alpha1 view of a DGD: the fields only v1alpha1 has (kept through
conversion) and, for a request sent as v1alpha1, the runtime version at the v1alpha1 paths
(dynamographdeployment_v1alpha1.go, shared_v1alpha1.go, dynamographdeployment_helpers.go:75-102,
all ai-dynamo/dynamo ``deploy/operator/internal/webhook/validation/`` at commit 2a6da14c)."""

from __future__ import annotations

from typing import Any

from . import errors as e
from .create import RUNTIME_VERSION, override_required
from .errors import FieldError, obj


def _services(spec: dict[str, Any]) -> dict[str, Any]:
    return obj(spec.get("services"))


def has_compatibility_fields(alpha: dict[str, Any]) -> bool:
    """``hasV1Alpha1CompatibilityFields`` (dynamographdeployment_helpers.go@2a6da14c:75-102)."""
    spec = obj(alpha.get("spec"))
    if spec.get("pvcs"):
        return True
    for service in _services(spec).values():
        if service is None:
            return True
        if not isinstance(service, dict):
            continue
        gms = service.get("gpuMemoryService")
        if any(service.get(k) is not None for k in ("ingress", "dynamoNamespace", "autoscaling", "sharedMemory",
                                                      "eppConfig", "frontendSidecar", "failover")) \
                or service.get("annotations") or service.get("volumeMounts") \
                or (isinstance(gms, dict) and not gms.get("enabled")):
            return True
    return False


def _image(service: dict[str, Any]) -> str:
    return str(obj(obj(service.get("extraPodSpec")).get("mainContainer")).get("image") or "")


def validate(alpha: dict[str, Any], *, runtime_versions: bool) -> list[FieldError]:
    """``validateDynamoGraphDeploymentV1alpha1`` (dynamographdeployment_v1alpha1.go@2a6da14c:26-66)."""
    if not has_compatibility_fields(alpha) and not runtime_versions:
        return []
    spec, out = obj(alpha.get("spec")), []
    for i, pvc in enumerate(spec.get("pvcs") or []):  # :92-102
        if not obj(pvc).get("name"):
            out.append(e.required(f"spec.pvcs[{i}].name", "is required", "pvc_name"))
    for name in sorted(_services(spec)):
        service, at = obj(_services(spec)[name]), f"spec.services[{name}]"
        out += _service(service, at, runtime_versions)
    return out


def _service(service: dict[str, Any], at: str, runtime_versions: bool) -> list[FieldError]:
    """``validateDynamoComponentDeploymentSharedSpecV1alpha1`` (shared_v1alpha1.go@2a6da14c:29-95)."""
    out = []
    backend = obj(service.get("annotations")).get(e.VLLM_EXECUTOR_BACKEND)
    if backend is not None and str(backend).lower() not in ("mp", "ray"):  # :35
        out.append(e.invalid(f"{at}.annotations[{e.VLLM_EXECUTOR_BACKEND}]", backend, 'must be "mp" or "ray"',
                             "vllm_backend"))
    for i, mount in enumerate(service.get("volumeMounts") or []):  # :59 -> :126-137
        mount = obj(mount)
        if not mount.get("useAsCompilationCache") and not mount.get("mountPoint"):
            out.append(e.required(f"{at}.volumeMounts[{i}].mountPoint", "is required when useAsCompilationCache is "
                                  "false", "volume_mount"))
    ingress = service.get("ingress")
    if isinstance(ingress, dict) and ingress.get("enabled") and not ingress.get("host"):  # :63 -> :140-148
        out.append(e.required(f"{at}.ingress.host", "is required when ingress is enabled", "ingress_host"))
    epp = service.get("eppConfig")
    if isinstance(epp, dict) and (epp.get("configMapRef") is None) == (epp.get("config") is None):  # :66 -> :151-162
        out.append(e.forbidden(f"{at}.eppConfig", "exactly one of configMapRef or config is required", "epp"))
    pod = obj(service.get("extraPodSpec"))  # ExtraPodSpec inlines its corev1.PodSpec
    names = {obj(c).get("name") for c in pod.get("containers") or []}
    if service.get("frontendSidecar") is not None and e.FRONTEND_SIDECAR_CONTAINER in names:  # :69
        out.append(e.forbidden(f"{at}.frontendSidecar", "cannot inject frontend sidecar: a container named "
                               f'"{e.FRONTEND_SIDECAR_CONTAINER}" already exists in extraPodSpec.containers',
                               "frontend_sidecar"))
    fail = service.get("failover")
    if isinstance(fail, dict) and fail.get("enabled") and fail.get("mode") == "intraPod" \
            and int(fail.get("numShadows") or 0) not in (0, 1):  # :76 -> :165-178
        out.append(e.invalid(f"{at}.failover.numShadows", int(fail["numShadows"]), 'is invalid for mode="intraPod": '
                             "intraPod uses a fixed 1 primary + 1 shadow sidecar; use failover.mode=\"interPod\" to "
                             "configure numShadows", "failover"))
    if runtime_versions:  # :81-92
        image = _image(service)
        if not image:
            out.append(e.required(f"{at}.extraPodSpec.mainContainer.image", "is required", "main_image"))
        elif override_required(image, str(service.get("runtimeVersionOverride") or "")):
            out.append(e.required(f"{at}.runtimeVersionOverride", RUNTIME_VERSION, "runtime_version"))
    return out


def validate_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """``validateDynamoGraphDeploymentSpecUpdateV1alpha1`` (dynamographdeployment_v1alpha1.go@2a6da14c:70-90)
    with ``validateDynamoComponentDeploymentSharedSpecUpdateV1alpha1`` (shared_v1alpha1.go@2a6da14c:99-123):
    the runtime-version ratchet at the v1alpha1 paths."""
    news, olds, out = _services(obj(new.get("spec"))), _services(obj(old.get("spec"))), []
    for name in sorted(news):
        if name not in olds:
            continue
        service, before, at = obj(news[name]), obj(olds[name]), f"spec.services[{name}]"
        image, old_image = _image(service), _image(before)
        override, old_override = service.get("runtimeVersionOverride") or "", before.get("runtimeVersionOverride") or ""
        if not image and old_image:
            out.append(e.required(f"{at}.extraPodSpec.mainContainer.image", "is required", "main_image"))
        elif override_required(image, override) and (image != old_image or override != old_override):
            out.append(e.required(f"{at}.runtimeVersionOverride", RUNTIME_VERSION, "runtime_version"))
    return out
