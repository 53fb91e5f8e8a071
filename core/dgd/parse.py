"""Parse a DynamoGraphDeployment object of either API version into a typed GraphSpec.

``import_manifest`` parses either shape (render.py writes them) back into a spec, keeping every
field the spec does not model, so that import then render gives the same object back. No database, no network."""

from __future__ import annotations

import copy
from typing import Any

from core.dgd.paths import _manifest_finding, raw_names
from core.dgd.render import API_VERSIONS, GPU_RESOURCE, KIND, MAIN_CONTAINER, V1ALPHA1, V1BETA1
from core.errors import ManifestError
from core.facts import LATEST, version_from_image
from core.spec import GraphSpec

# Component fields spelled the same in both versions and not modelled: kept in Service.extra.
_COMMON_COMPONENT_FIELDS = {
    "eppConfig", "globalDynamoNamespace", "minAvailable", "modelRef", "multinode",
    "providerOverride", "runtimeVersionOverride", "topologyConstraint",
}
_MODELLED_ALPHA = {
    "componentType", "subComponentType", "replicas", "resources", "sharedMemory", "envFromSecret", "envs",
    "extraPodSpec", "extraPodMetadata", "scalingAdapter",
}
_MODELLED_BETA = {"name", "type", "replicas", "sharedMemorySize", "podTemplate", "scalingAdapter"}
_MODELLED_CONTAINER = {"image", "command", "args", "workingDir", "env", "envFrom", "resources", "name"}
_BETA_TYPES = {"frontend", "worker", "prefill", "decode", "planner", "epp"}



def import_manifest(obj: Any, *, dynamo_version: str | None = None) -> GraphSpec:
    """A GraphSpec from a DGD object of either API version. Raises ManifestError naming the
    path of the first structural problem (the schema check reports all of them)."""
    if not isinstance(obj, dict):
        raise ManifestError.single("", f"a manifest must be a mapping, not {_kind(obj)}", "not_a_mapping")
    api_version = obj.get("apiVersion")
    if api_version not in API_VERSIONS:
        raise ManifestError.single(
            "apiVersion", f"apiVersion must be {V1BETA1} or {V1ALPHA1}, not {api_version!r}", "api_version"
        )
    if obj.get("kind") != KIND:
        raise ManifestError.single("kind", f"kind must be {KIND}, not {obj.get('kind')!r}", "kind")
    metadata = _mapping(obj.get("metadata"), "metadata")
    body = _mapping(obj.get("spec"), "spec")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError.single("metadata.name", "metadata.name is required", "name_required")
    alpha = api_version == V1ALPHA1
    if alpha:
        raw_services = _mapping(body.get("services"), "spec.services", hint="a map keyed by service name")
        services = [_import_alpha(n, _mapping(s, f"spec.services.{n}"), n) for n, s in raw_services.items()]
        env_key = "envs"
    else:
        raw = body.get("components")
        if not isinstance(raw, list):
            raise ManifestError.single(
                "spec.components", f"spec.components must be a list of components, not {_kind(raw)}", "type"
            )
        services = [_import_beta(_mapping(c, f"spec.components[{i}]"), i) for i, c in enumerate(raw)]
        env_key = "env"
    env = body.get(env_key) or []
    extra = {k: v for k, v in body.items() if k not in ("services", "components", "envs", "env")}
    # topologyConstraint is spelled differently in each version (topologyProfile vs
    # clusterTopologyName, dynamographdeployment_conversion.go:632-648 at 2a6da14c).
    common, only = _split_extra(extra, alpha_only={"pvcs", "topologyConstraint"} if alpha else set(),
                                beta_only=set() if alpha else {"topologyConstraint"})
    backend = _infer_backend(services, body)
    version = dynamo_version or _infer_version(services) or LATEST
    # A DGD name may have dots; a graph's may not: the graph takes the name with dots turned to
    # "-" (as the operator's NormalizeKubeResourceName does for the DGD's Services) and keeps the
    # DGD's own name, so that rendering gives the same object back.
    graph_name = name.replace(".", "-") if "." in name else name
    data = {
        "name": graph_name,
        **({"dgd_name": name} if graph_name != name else {}),
        "namespace": metadata.get("namespace"),
        "model": _infer_model(services),
        "backend": backend,
        "dynamo_version": version,
        "services": services,
        "env": copy.deepcopy(env),
        "written_empty": ["env"] if body.get(env_key, None) == [] else [],
        "metadata_extra": {k: copy.deepcopy(v) for k, v in metadata.items() if k not in ("name", "namespace")},
        "extra": common,
        "extra_v1alpha1": only if alpha else {},
        "extra_v1beta1": {} if alpha else only,
    }
    from core.specio import spec_from_data

    try:
        return spec_from_data(data)
    except ManifestError as exc:
        findings = [_manifest_finding(f, alpha, raw_names(body, alpha)) for f in exc.findings]
        raise ManifestError(_as_written(findings, name, graph_name)) from None


def _as_written(findings: list, name: str, graph_name: str) -> list:
    """Name problems in the words the user wrote: the graph name is made from metadata.name
    (dots turned to '-'), so a finding about it says so, and where the written name is itself
    invalid that one finding (at metadata.name) is the only one."""
    import dataclasses

    if graph_name == name:
        return findings
    written = [f for f in findings if f.path == "dgd_name"]
    rest = [f for f in findings if f.path != "dgd_name"]
    if written:
        return [dataclasses.replace(written[0], path="metadata.name"),
                *[f for f in rest if f.path != "metadata.name"]]
    return [dataclasses.replace(f, message=f.message.replace(
        f"graph name {graph_name!r}", f"graph name {graph_name!r} (made from metadata.name {name!r}: dots become "
                                      "'-')")) if f.path == "metadata.name" else f for f in rest]


def _import_alpha(name: str, raw: dict[str, Any], path: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    ctype = raw.pop("componentType", None)
    sub = raw.pop("subComponentType", None)
    extra_alpha: dict[str, Any] = {}
    if ctype == "worker" and sub in ("prefill", "decode"):
        role = sub
    elif ctype in ("frontend", "worker", "planner", "epp"):
        role = ctype
        if sub is not None:
            extra_alpha["subComponentType"] = sub
    elif ctype in ("prefill", "decode"):
        role = ctype
        extra_alpha["componentType"] = ctype
        if sub is not None:
            extra_alpha["subComponentType"] = sub
    else:
        role = "other"
        if ctype is not None:
            extra_alpha["componentType"] = ctype
        if sub is not None:
            extra_alpha["subComponentType"] = sub
    written_empty = [field for field, key in (("env", "envs"), ("resources", "resources"), ("pod", "extraPodSpec"),
                                              ("pod_metadata", "extraPodMetadata")) if raw.get(key, None) in ([], {})]
    resources = _mapping(raw.pop("resources", {}) or {}, f"spec.services.{path}.resources")
    shm_raw = raw.get("sharedMemory")
    shm_size = shm_raw.get("size") if isinstance(shm_raw, dict) and not shm_raw.get("disabled") else None
    gpu_raw = (resources.get("limits") or {}).get("gpu") if isinstance(resources.get("limits"), dict) else None
    int_quantities = _int_quantities(gpu_raw, shm_size)
    gpus = _pop_gpu(resources, "gpu", f"spec.services.{path}.resources.limits.gpu")
    if resources:
        extra_alpha["resources"] = resources
    shm = raw.pop("sharedMemory", None)
    shared_memory = None
    if isinstance(shm, dict):
        if shm.get("disabled"):
            shared_memory = "0"
            if set(shm) != {"disabled"}:
                extra_alpha["sharedMemory"] = shm
        elif "size" in shm:
            shared_memory = str(shm["size"])
            if set(shm) != {"size"}:
                extra_alpha["sharedMemory"] = {k: v for k, v in shm.items() if k != "size"}
        else:
            extra_alpha["sharedMemory"] = shm
    elif shm is not None:
        extra_alpha["sharedMemory"] = shm
    adapter = raw.pop("scalingAdapter", None)
    scaling_adapter = isinstance(adapter, dict) and adapter.get("enabled") is True and len(adapter) == 1
    if adapter is not None and not scaling_adapter:
        extra_alpha["scalingAdapter"] = adapter
    pod = _mapping(raw.pop("extraPodSpec", {}) or {}, f"spec.services.{path}.extraPodSpec")
    if pod.get("mainContainer", None) == {}:
        written_empty.append("container")
    container = _mapping(pod.pop("mainContainer", {}) or {}, f"spec.services.{path}.extraPodSpec.mainContainer")
    service = {
        "name": name,
        "role": role,
        "replicas": raw.pop("replicas", None),
        "gpus": gpus,
        "shared_memory": shared_memory,
        "hf_token_secret": raw.pop("envFromSecret", None),
        "env": raw.pop("envs", None) or [],
        "scaling_adapter": scaling_adapter,
        "int_quantities": int_quantities,
        "spelled": _spelled(gpu_raw, shm_size),
        "main_container_name": container.get("name"),
        "written_empty": written_empty,
        "pod_extra": pod,
        "pod_metadata": raw.pop("extraPodMetadata", None) or {},
        **_import_container(container),
    }
    common = {k: raw.pop(k) for k in list(raw) if k in _COMMON_COMPONENT_FIELDS}
    extra_alpha.update(raw)
    service["extra"] = common
    service["extra_v1alpha1"] = extra_alpha
    return service


def _import_beta(raw: dict[str, Any], index: int) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    path = f"spec.components[{index}]"
    name = raw.pop("name", None)
    if not isinstance(name, str):
        raise ManifestError.single(f"{path}.name", "every component needs a name", "name_required")
    ctype = raw.pop("type", None)
    extra_beta: dict[str, Any] = {}
    if ctype in _BETA_TYPES:
        role = ctype
    else:
        role = "other"
        if ctype is not None:
            extra_beta["type"] = ctype
    adapter = raw.pop("scalingAdapter", None)
    scaling_adapter = adapter == {}
    if adapter is not None and not scaling_adapter:
        extra_beta["scalingAdapter"] = adapter
    shm = raw.pop("sharedMemorySize", None)
    template_raw = raw.pop("podTemplate", None)
    template = _mapping(copy.deepcopy(template_raw) or {}, f"{path}.podTemplate")
    pod_template_keys = [] if template_raw is None else ["podTemplate", *(k for k in ("metadata", "spec")
                                                                         if k in template)]
    pod_metadata = template.pop("metadata", None) or {}
    pod = _mapping(template.pop("spec", {}) or {}, f"{path}.podTemplate.spec")
    if template:
        extra_beta["podTemplate"] = template
    containers = pod.pop("containers", None) or []
    if not isinstance(containers, list):
        raise ManifestError.single(f"{path}.podTemplate.spec.containers", "containers must be a list", "type")
    main_index = next(
        (i for i, c in enumerate(containers) if isinstance(c, dict) and c.get("name") == MAIN_CONTAINER), None
    )
    main_container_index = main_index
    container: dict[str, Any] = {}
    if main_index is not None:
        container = copy.deepcopy(containers[main_index])
        others = containers[:main_index] + containers[main_index + 1 :]
        if others:
            pod["containers"] = others
    elif containers:
        pod["containers"] = containers
    container.pop("name", None)
    written_empty = [key for key in ("env", "envFrom", "resources") if container.get(key, None) in ([], {})]
    env_from = container.pop("envFrom", None) or []
    secret, secret_index = None, None
    rest = []
    for i, entry in enumerate(env_from):
        ref = entry.get("secretRef") if isinstance(entry, dict) else None
        if secret is None and isinstance(ref, dict) and set(entry) == {"secretRef"} and set(ref) == {"name"}:
            secret, secret_index = ref["name"], i
        else:
            rest.append(entry)
    resources = _mapping(container.pop("resources", {}) or {}, f"{path}.podTemplate.spec.containers[main].resources")
    limits = resources.get("limits")
    gpu_raw = limits.get(GPU_RESOURCE) if isinstance(limits, dict) else None
    int_quantities = _int_quantities(gpu_raw, shm)
    gpus = _pop_gpu(resources, GPU_RESOURCE, f"{path}.podTemplate.spec.containers[main].resources.limits")
    fields = _import_container(container, take_env=True)
    extra_container = fields.pop("container_extra")
    if rest:
        extra_container["envFrom"] = rest
    if resources:
        extra_container["resources"] = resources
    replicas = raw.pop("replicas", None)
    common = {k: raw.pop(k) for k in list(raw) if k in _COMMON_COMPONENT_FIELDS}
    extra_beta.update(raw)
    return {
        "name": name,
        "role": role,
        "replicas": replicas,
        "gpus": gpus,
        "shared_memory": None if shm is None else str(shm),
        "hf_token_secret": secret,
        "hf_token_secret_index": secret_index or None,
        "scaling_adapter": scaling_adapter,
        "main_container_index": main_container_index,
        "int_quantities": int_quantities,
        "spelled": _spelled(gpu_raw, shm),
        "written_empty": written_empty,
        "pod_template_keys": pod_template_keys,
        "pod_extra": pod,
        "pod_metadata": pod_metadata,
        "container_extra": extra_container,
        "extra": common,
        "extra_v1beta1": extra_beta,
        **fields,
    }


def _import_container(container: dict[str, Any], *, take_env: bool = False) -> dict[str, Any]:
    container = copy.deepcopy(container)
    fields = {
        "image": container.pop("image", None),
        "command": container.pop("command", None),
        "args": container.pop("args", None),
        "working_dir": container.pop("workingDir", None),
    }
    if take_env and "env" in container:
        fields["env"] = container.pop("env") or []
    container.pop("name", None)
    fields["container_extra"] = container
    return fields


def _spelled(gpu: Any, shm: Any) -> dict[str, Any]:
    return {k: v for k, v in (("gpus", gpu), ("shared_memory", shm)) if isinstance(v, (str, int))
            and not isinstance(v, bool)}


def _int_quantities(gpu: Any, shm: Any) -> list[str]:
    out = []
    if isinstance(gpu, int) and not isinstance(gpu, bool):
        out.append("gpus")
    if isinstance(shm, int) and not isinstance(shm, bool):
        out.append("shared_memory")
    return out


def _pop_gpu(resources: dict[str, Any], key: str, path: str) -> int | None:
    limits = resources.get("limits")
    if not isinstance(limits, dict) or key not in limits:
        return None
    value = limits.pop(key)
    if not limits:
        resources.pop("limits")
    try:
        count = int(str(value))
    except ValueError:
        raise ManifestError.single(path, f"GPU count must be a whole number, not {value!r}", "gpu_count") from None
    return count


def _split_extra(extra: dict[str, Any], *, alpha_only: set[str], beta_only: set[str]):
    common = {k: v for k, v in extra.items() if k not in alpha_only | beta_only}
    only = {k: v for k, v in extra.items() if k in alpha_only | beta_only}
    return copy.deepcopy(common), copy.deepcopy(only)


def _mapping(value: Any, path: str, hint: str = "a mapping") -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestError.single(path, f"{path} must be {hint}, not {_kind(value)}", "type")
    return value


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "empty"}.get(type(value), type(value).__name__)


def _infer_backend(services: list[dict[str, Any]], body: dict[str, Any]) -> str:
    from core.dgd.commandline import engine_of

    for service in services:
        engine = engine_of(service.get("command"), service.get("args"))
        if engine and engine != "frontend" and engine != "planner":
            return engine
    framework = body.get("backendFramework")
    return framework if framework in ("vllm", "sglang", "trtllm") else "vllm"


def _infer_version(services: list[dict[str, Any]]) -> str | None:
    for service in services:
        override = (service.get("extra") or {}).get("runtimeVersionOverride")
        if override:
            return str(override)
        version = version_from_image(service.get("image"))
        if version:
            return str(version)
    return None


def _infer_model(services: list[dict[str, Any]]) -> str | None:
    from core.dgd.commandline import served_model

    for service in services:
        if service["role"] in ("prefill", "decode", "worker"):
            model = served_model(service.get("command"), service.get("args"))
            if model:
                return model
    return None
