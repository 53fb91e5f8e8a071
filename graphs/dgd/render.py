"""Render a typed GraphSpec as a DynamoGraphDeployment object. Pure functions.

``render(spec, api_version)`` builds the DGD for nvidia.com/v1alpha1 (``spec.services``, a
map keyed by service name: the seed article's shape) or nvidia.com/v1beta1
(``spec.components``, a list: the storage version since Dynamo 1.4). parse.py reads either
shape back. No database, no network."""

from __future__ import annotations

import copy
from typing import Any

from ..spec import GraphSpec, Service
from .commandline import translate_role_flag
from .versions import EXAMPLES_WORKDIR_SINCE, DynamoVersion, version_from_image

GROUP = "nvidia.com"
KIND = "DynamoGraphDeployment"
V1ALPHA1 = "nvidia.com/v1alpha1"
V1BETA1 = "nvidia.com/v1beta1"
API_VERSIONS = (V1BETA1, V1ALPHA1)
MAIN_CONTAINER = "main"
GPU_RESOURCE = "nvidia.com/gpu"

def normalise_api_version(value: str | None) -> str:
    """Accept ``v1beta1``, ``nvidia.com/v1beta1`` (any case); default to v1beta1."""
    if not value:
        return V1BETA1
    text = value.strip().lower()
    if not text.startswith(GROUP + "/"):
        text = f"{GROUP}/{text}"
    if text not in API_VERSIONS:
        raise ValueError(f"unknown apiVersion {value!r}: use {V1BETA1} or {V1ALPHA1}")
    return text


# ---------------------------------------------------------------------------------- render


def retag_image(image: str, source: DynamoVersion, target: DynamoVersion) -> str:
    """An NVIDIA runtime image tagged with the graph's own release follows a change of
    release; any other image (a custom build, a digest) is left alone."""
    if source == target or "@" in image or not image.startswith("nvcr.io/nvidia/ai-dynamo/"):
        return image
    if version_from_image(image) == source and image.endswith(f":{source}"):
        return image[: -len(str(source))] + str(target)
    return image


def move_workdir(path: str, target: DynamoVersion) -> str:
    """Images moved the backends from /workspace/components to /workspace/examples."""
    old, new = "/workspace/components/backends/", "/workspace/examples/backends/"
    if target >= EXAMPLES_WORKDIR_SINCE and path.startswith(old):
        return new + path[len(old):]
    if target < EXAMPLES_WORKDIR_SINCE and path.startswith(new):
        return old + path[len(new):]
    return path


def render(spec: GraphSpec, api_version: str = V1BETA1, dynamo_version: str | None = None) -> dict[str, Any]:
    """The DGD object for ``spec`` in ``api_version``, with command lines for
    ``dynamo_version`` (default: the spec's own)."""
    api_version = normalise_api_version(api_version)
    version = DynamoVersion.parse(dynamo_version or spec.dynamo_version)
    metadata: dict[str, Any] = {"name": spec.name}
    if spec.namespace:
        metadata["namespace"] = spec.namespace
    metadata.update(copy.deepcopy(spec.metadata_extra))

    body: dict[str, Any] = copy.deepcopy(spec.extra)
    if api_version == V1ALPHA1:
        body.update(copy.deepcopy(spec.extra_v1alpha1))
        if spec.env:
            body["envs"] = copy.deepcopy(spec.env)
        body["services"] = {s.name: _render_alpha_service(s, spec, version) for s in spec.services}
    else:
        body.update(copy.deepcopy(spec.extra_v1beta1))
        if spec.env:
            body["env"] = copy.deepcopy(spec.env)
        body["components"] = [_render_beta_component(s, spec, version) for s in spec.services]
    return {"apiVersion": api_version, "kind": KIND, "metadata": metadata, "spec": body}


def _container(service: Service, spec: GraphSpec, version: DynamoVersion, *, beta: bool) -> dict[str, Any]:
    container: dict[str, Any] = {}
    if beta:
        container["name"] = MAIN_CONTAINER
    source = spec.version
    if service.image is not None:
        container["image"] = retag_image(service.image, source, version)
    if service.working_dir is not None:
        container["workingDir"] = move_workdir(service.working_dir, version)
    command, args = translate_role_flag(
        service.command, service.args, role=service.role, engine=spec.backend, version=version,
        source_version=source,
    )
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    extra = copy.deepcopy(service.container_extra)
    if beta:
        if service.env:
            container["env"] = copy.deepcopy(service.env)
        env_from = extra.pop("envFrom", [])
        if service.hf_token_secret:
            env_from = [{"secretRef": {"name": service.hf_token_secret}}, *env_from]
        if env_from:
            container["envFrom"] = env_from
        resources = extra.pop("resources", {})
        if service.gpus is not None:
            resources.setdefault("limits", {})[GPU_RESOURCE] = _quantity(service, "gpus", service.gpus)
        if resources:
            container["resources"] = resources
    container.update(extra)
    return container


def _render_alpha_service(service: Service, spec: GraphSpec, version: DynamoVersion) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(service.extra)
    out.update(copy.deepcopy(service.extra_v1alpha1))
    role_type = out.pop("componentType", None)
    if service.role in ("prefill", "decode"):
        # worker + subComponentType is what 0.5.x operators understand; newer operators
        # promote it to type prefill/decode (api/v1alpha1/shared_spec_conversion.go).
        out["componentType"] = role_type or "worker"
        if out["componentType"] == "worker":
            out["subComponentType"] = service.role
    elif service.role == "other":
        if role_type is not None:
            out["componentType"] = role_type
    else:
        out["componentType"] = service.role
    if service.hf_token_secret:
        out["envFromSecret"] = service.hf_token_secret
    if service.env:
        out["envs"] = copy.deepcopy(service.env)
    if service.replicas is not None:
        out["replicas"] = service.replicas
    resources = out.pop("resources", {})
    if service.gpus is not None:
        resources.setdefault("limits", {})["gpu"] = _quantity(service, "gpus", service.gpus)
    if resources:
        out["resources"] = resources
    if service.shared_memory is not None:
        out["sharedMemory"] = _alpha_shm(service.shared_memory, out.pop("sharedMemory", None))
        if "size" in out["sharedMemory"]:
            out["sharedMemory"]["size"] = _quantity(service, "shared_memory", service.shared_memory)
    if service.scaling_adapter:
        out["scalingAdapter"] = {"enabled": True}
    pod = copy.deepcopy(service.pod_extra)
    pod.pop("containers", None)
    container = _container(service, spec, version, beta=False)
    if container:
        pod["mainContainer"] = container
    if pod:
        out["extraPodSpec"] = pod
    if service.pod_metadata:
        out["extraPodMetadata"] = copy.deepcopy(service.pod_metadata)
    return out


def _quantity(service: Service, field: str, value: Any) -> Any:
    if field in service.int_quantities and str(value).isdigit():
        return int(value)
    return str(value)


def _alpha_shm(size: str, original: Any) -> dict[str, Any]:
    if str(size) == "0":
        return original if isinstance(original, dict) and original.get("disabled") else {"disabled": True}
    return {"size": size}


def _render_beta_component(service: Service, spec: GraphSpec, version: DynamoVersion) -> dict[str, Any]:
    out: dict[str, Any] = {"name": service.name}
    out.update(copy.deepcopy(service.extra))
    out.update(copy.deepcopy(service.extra_v1beta1))
    if service.role != "other":
        out["type"] = service.role
    if service.replicas is not None:
        out["replicas"] = service.replicas
    if service.shared_memory is not None:
        out["sharedMemorySize"] = _quantity(service, "shared_memory", service.shared_memory)
    if service.scaling_adapter:
        out.setdefault("scalingAdapter", {})
    pod_spec = copy.deepcopy(service.pod_extra)
    containers = list(pod_spec.pop("containers", []))
    if service.main_container_index is not None:
        index = min(service.main_container_index, len(containers))
        containers.insert(index, _container(service, spec, version, beta=True))
    pod_spec["containers"] = containers
    template: dict[str, Any] = {}
    if service.pod_metadata:
        template["metadata"] = copy.deepcopy(service.pod_metadata)
    template["spec"] = pod_spec
    out["podTemplate"] = template
    return out


# ---------------------------------------------------------------------------------- import
