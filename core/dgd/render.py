"""Render a typed GraphSpec as a DynamoGraphDeployment object. Pure functions.

``render(spec, api_version)`` builds the DGD for nvidia.com/v1alpha1 (``spec.services``, a
map keyed by service name: the shape of Dynamo's first releases) or nvidia.com/v1beta1
(``spec.components``, a list: the storage version since Dynamo 1.4). parse.py reads either
shape back. No database, no network."""

from __future__ import annotations

import copy
from typing import Any

from core.dgd.commandline import translate_role_flag
from core.dgd.convert import merge_envs, sole_secret, to_beta
from core.dgd.convert_alpha import to_alpha
from core.facts import EXAMPLES_WORKDIR_SINCE, V1BETA1_SINCE, DynamoVersion, version_from_image
from core.spec import GraphSpec, Service

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


def default_api_version(spec: GraphSpec, source: str = "") -> str:
    """The API version a graph is edited, exported and applied in unless the user picks one:
    the one it was imported (or last edited) in, else the one its Dynamo release stores
    (v1alpha1 before nvidia.com/v1beta1 was served)."""
    if source:
        try:
            return normalise_api_version(source)
        except ValueError:
            pass
    return V1BETA1 if spec.version >= V1BETA1_SINCE else V1ALPHA1


def served_api_versions(spec: GraphSpec) -> tuple[str, ...]:
    """The DGD API versions the operator of the graph's release serves."""
    return API_VERSIONS if spec.version >= V1BETA1_SINCE else (V1ALPHA1,)


# ---------------------------------------------------------------------------------- render


def retag_image(image: str, source: DynamoVersion, target: DynamoVersion) -> str:
    """An NVIDIA runtime image tagged with the graph's own release follows a change of
    release; any other image (a custom build, a digest) is left alone."""
    if source == target or "@" in image or not image.startswith("nvcr.io/nvidia/ai-dynamo/"):
        return image
    if version_from_image(image) == source and image.endswith(f":{source}"):
        return image[: -len(str(source))] + str(target)
    return image


def move_workdir(path: str, source: DynamoVersion, target: DynamoVersion) -> str:
    """Images moved the backends from /workspace/components to /workspace/examples (1.0.0): a
    graph moved across that release follows them. Within one side of it the path is the
    user's: upstream's own 1.x TensorRT-LLM recipes still write /workspace/components/backends
    (recipes/qwen3-235b-a22b-fp8/trtllm/agg/hopper/deploy.yaml at 2a6da14c), and an export in
    the graph's own release rewrites nothing."""
    old, new = "/workspace/components/backends/", "/workspace/examples/backends/"
    if (source >= EXAMPLES_WORKDIR_SINCE) == (target >= EXAMPLES_WORKDIR_SINCE):
        return path
    if target >= EXAMPLES_WORKDIR_SINCE and path.startswith(old):
        return new + path[len(old):]
    if target < EXAMPLES_WORKDIR_SINCE and path.startswith(new):
        return old + path[len(new):]
    return path


def render(spec: GraphSpec, api_version: str = V1BETA1, dynamo_version: str | None = None) -> dict[str, Any]:
    """The DGD object for ``spec`` in ``api_version``, with command lines for
    ``dynamo_version`` (default: the spec's own). Fields only the other API version knows are
    converted as the operator converts them (convert.py); what has no place is dropped, so
    callers ask ``conversion_losses`` first."""
    return render_with_losses(spec, api_version, dynamo_version)[0]


def render_with_losses(spec: GraphSpec, api_version: str = V1BETA1,
                       dynamo_version: str | None = None) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``render``'s object and the fields it could not carry into ``api_version``."""
    api_version = normalise_api_version(api_version)
    version = DynamoVersion.parse(dynamo_version or spec.dynamo_version)
    metadata: dict[str, Any] = {"name": spec.dgd_name or spec.name}
    if spec.namespace:
        metadata["namespace"] = spec.namespace
    metadata.update(copy.deepcopy(spec.metadata_extra))

    body: dict[str, Any] = copy.deepcopy(spec.extra)
    if api_version == V1ALPHA1:
        body.update(copy.deepcopy(spec.extra_v1alpha1))
        if spec.env or "env" in spec.written_empty:
            body["envs"] = copy.deepcopy(spec.env)
        body["services"] = {s.name: _render_alpha_service(s, spec, version) for s in spec.services}
    else:
        body.update(copy.deepcopy(spec.extra_v1beta1))
        if spec.env or "env" in spec.written_empty:
            body["env"] = copy.deepcopy(spec.env)
        body["components"] = [_render_beta_component(s, spec, version) for s in spec.services]
    obj = {"apiVersion": api_version, "kind": KIND, "metadata": metadata, "spec": body}
    if api_version == V1ALPHA1:
        # The v1beta1 components, as v1beta1 writes them, for the podTemplate shape the payload keeps.
        written = {s.name: _render_beta_component(s, spec, version) for s in spec.services
                   if s.pod_template_keys is not None}
        losses = to_alpha(spec, obj, written)
    else:
        # The v1alpha1 services, as v1alpha1 writes them, for what their conversion keeps.
        written = {s.name: _render_alpha_service(s, spec, version) for s in spec.services if _alpha_origin(s)}
        losses = to_beta(spec, obj, written)
    return obj, losses


def _alpha_origin(service: Service) -> bool:
    # Only a v1alpha1 import leaves these: v1beta1 has no mainContainer name or extraPodSpec, and
    # its env and sole Secret are modelled.
    return bool(service.extra_v1alpha1 or service.main_container_name or "env" in service.container_extra
                or {"pod", "container"} & set(service.written_empty)
                or sole_secret(service.container_extra.get("envFrom")))


def _container(service: Service, spec: GraphSpec, version: DynamoVersion, *, beta: bool) -> dict[str, Any]:
    container: dict[str, Any] = {}
    if beta:
        container["name"] = MAIN_CONTAINER
    elif service.main_container_name is not None:
        container["name"] = service.main_container_name
    source = spec.version
    if service.image is not None:
        container["image"] = retag_image(service.image, source, version)
    if service.working_dir is not None:
        container["workingDir"] = move_workdir(service.working_dir, source, version)
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
        if "env" in extra:
            # v1alpha1 envs and extraPodSpec.mainContainer.env make one env, the latter winning
            # by name (mergeExtraPodSpecMainContainer, shared_spec_conversion.go:1494 at 2a6da14c).
            extra["env"] = merge_envs(service.env, extra["env"])
        empty = service.written_empty
        if service.env or "env" in empty:
            container["env"] = copy.deepcopy(service.env)
        env_from = list(extra.pop("envFrom", []))
        if service.hf_token_secret:
            # Back where it was written: a later source wins for a key both define.
            env_from.insert(min(service.hf_token_secret_index or 0, len(env_from)),
                            {"secretRef": {"name": service.hf_token_secret}})
        if env_from or "envFrom" in empty:
            container["envFrom"] = env_from
        resources = extra.pop("resources", {})
        if service.gpus is not None:
            resources.setdefault("limits", {})[GPU_RESOURCE] = _quantity(service, "gpus", service.gpus)
        if resources or "resources" in empty:
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
    # A v1beta1 Secret among other envFrom sources stays in that list, as the operator keeps it
    # (restoreDedicatedFieldsFromMain has no envFromSecret, shared_spec_conversion.go at 2a6da14c):
    # beside mainContainer.envFrom an envFromSecret would be replaced (mergo WithOverride, :1482-1504).
    in_list = service.pod_template_keys is not None and bool(service.container_extra.get("envFrom"))
    if service.hf_token_secret and not in_list:
        out["envFromSecret"] = service.hf_token_secret
    empty = service.written_empty
    if service.env or "env" in empty:
        out["envs"] = copy.deepcopy(service.env)
    if service.replicas is not None:
        out["replicas"] = service.replicas
    resources = out.pop("resources", {})
    if service.gpus is not None:
        # v1alpha1's gpu is a string (its schema); a v1beta1 count written as a number becomes one.
        resources.setdefault("limits", {})["gpu"] = str(_quantity(service, "gpus", service.gpus))
    if resources or "resources" in empty:
        out["resources"] = resources
    if service.shared_memory is not None:
        out["sharedMemory"] = _alpha_shm(service, out.pop("sharedMemory", None))
    if service.scaling_adapter:
        out["scalingAdapter"] = {"enabled": True}
    # extraPodSpec is a whole PodSpec: its own containers (sidecars) stay beside mainContainer.
    pod = copy.deepcopy(service.pod_extra)
    container = _container(service, spec, version, beta=False)
    if service.hf_token_secret and in_list:
        env_from = list(container.get("envFrom", []))
        env_from.insert(min(service.hf_token_secret_index or 0, len(env_from)),
                        {"secretRef": {"name": service.hf_token_secret}})
        container["envFrom"] = env_from
    if container or "container" in empty:
        pod["mainContainer"] = container
    if pod or "pod" in empty:
        out["extraPodSpec"] = pod
    if service.pod_metadata or "pod_metadata" in empty:
        out["extraPodMetadata"] = copy.deepcopy(service.pod_metadata)
    return out


def _quantity(service: Service, field: str, value: Any) -> Any:
    """A modelled quantity as the manifest spelled it while its value is unchanged."""
    written = service.spelled.get(field)
    if written is not None and _same_quantity(field, written, value):
        return written
    if field in service.int_quantities and str(value).isdigit():
        return int(value)
    return str(value)


def _same_quantity(field: str, written: Any, value: Any) -> bool:
    if field == "gpus":
        try:
            return int(str(written)) == value
        except ValueError:
            return False
    return str(written) == str(value)


def _alpha_shm(service: Service, original: Any) -> dict[str, Any]:
    """sharedMemory {disabled, size} for the modelled size, keeping what else was written."""
    original = original if isinstance(original, dict) else {}
    if str(service.shared_memory) == "0":
        return original if original.get("disabled") else {"disabled": True}
    out = {k: v for k, v in original.items() if k != "size" and not (k == "disabled" and v)}
    out["size"] = _quantity(service, "shared_memory", service.shared_memory)
    return out


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
    # An imported component renders the podTemplate keys it was written with (and any that an
    # edit filled in); a spec built here always has podTemplate.spec.
    keys = service.pod_template_keys
    template: dict[str, Any] = {}
    if service.pod_metadata or (keys is not None and "metadata" in keys):
        template["metadata"] = copy.deepcopy(service.pod_metadata)
    if keys is None or "spec" in keys or pod_spec != {"containers": []}:
        template["spec"] = pod_spec
    if template or keys is None or "podTemplate" in keys:
        out["podTemplate"] = template
    return out


# ---------------------------------------------------------------------------------- import


def conversion_losses(spec: GraphSpec, api_version: str) -> list[tuple[str, str]]:
    """(path in the source manifest, why) for every field that rendering ``spec`` in
    ``api_version`` would drop. Empty when nothing is lost (the usual case)."""
    return render_with_losses(spec, api_version)[1]


def losses_message(spec: GraphSpec, api_version: str, losses: list[tuple[str, str]]) -> str:
    listed = "; ".join(f"{path} ({why})" for path, why in losses)
    other = V1ALPHA1 if api_version == V1BETA1 else V1BETA1
    return (f"{spec.name} cannot be converted to {api_version} without losing {len(losses)} field"
            f"{'s' if len(losses) != 1 else ''}: {listed}. Keep it in {other}, or remove those fields first.")
