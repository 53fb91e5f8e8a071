"""Operational checks: what the schema accepts but Dynamo operators trip over. Each check
reads the manifest as written (so paths point at the user's own lines) through the spec
imported from it, and returns findings with a severity, a path and a fix."""

from __future__ import annotations

import re
from typing import Any

from core.dgd.commandline import (
    ROUTER_FLAGS,
    declared_role,
    engine_of,
    router_flag_problem,
    router_flags,
    served_model,
    tokens,
)
from core.dgd.convert import conversion_losses
from core.dgd.parse import import_manifest
from core.dgd.render import V1ALPHA1
from core.facts import (
    DISAGGREGATION_MODE_SINCE,
    ENGINES,
    EXAMPLES_WORKDIR_SINCE,
    ROUTER_MODE_ENV,
    V1BETA1_SINCE,
    DynamoVersion,
    uses_disaggregation_mode,
    version_from_image,
)
from core.findings import Finding, Severity
from core.planner import PlannerSettingsError, config_arg, settings_from_config, unknown_keys
from core.spec import MAX_REPLICAS, GraphSpec, Service, quantity_bytes

GI = 2**30
# NIXL prepares KV-transfer metadata through /dev/shm; below this it stalls or dies.
MIN_SHM_BYTES = 1 * GI
RECOMMENDED_SHM = "16Gi"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class _Paths:
    """Manifest paths for one service, in the manifest's own API version."""

    def __init__(self, obj: dict[str, Any], alpha: bool):
        self.alpha = alpha
        self.index = {}
        if not alpha:
            for i, c in enumerate(obj.get("spec", {}).get("components") or []):
                if isinstance(c, dict):
                    self.index[c.get("name")] = i

    def service(self, s: Service) -> str:
        return f"spec.services.{s.name}" if self.alpha else f"spec.components[{self.index.get(s.name, '?')}]"

    def container(self, s: Service) -> str:
        if self.alpha:
            return f"{self.service(s)}.extraPodSpec.mainContainer"
        return f"{self.service(s)}.podTemplate.spec.containers[main]"

    def pod(self, s: Service) -> str:
        return f"{self.service(s)}.extraPodSpec" if self.alpha else f"{self.service(s)}.podTemplate.spec"

    def shm(self, s: Service) -> str:
        return f"{self.service(s)}.sharedMemory.size" if self.alpha else f"{self.service(s)}.sharedMemorySize"

    def gpu(self, s: Service) -> str:
        if self.alpha:
            return f"{self.service(s)}.resources.limits.gpu"
        return f"{self.container(s)}.resources.limits.nvidia.com/gpu"

    def args(self, s: Service) -> str:
        return f"{self.container(s)}.args"

    def secret(self, s: Service) -> str:
        return f"{self.service(s)}.envFromSecret" if self.alpha else f"{self.container(s)}.envFrom"


def operational_findings(obj: dict[str, Any], *, dynamo_version: str | None = None,
                         spec: GraphSpec | None = None) -> list[Finding]:
    spec = spec or import_manifest(obj)
    target = DynamoVersion.parse(dynamo_version or spec.dynamo_version)
    alpha = obj.get("apiVersion") == V1ALPHA1
    paths = _Paths(obj, alpha)
    out: list[Finding] = []
    out += _check_names(spec, paths)
    out += _check_pools(spec, paths)
    for service in spec.services:
        out += _check_replicas(service, paths)
        if service.is_worker:
            out += _check_shm(service, paths, spec)
            out += _check_role_flag(service, paths, spec, target)
            out += _check_gpus(service, paths, spec)
            out += _check_token(service, paths)
        if service.role == "frontend":
            out += _check_router(service, paths, spec, target)
        if service.role == "planner":
            out += _check_planner(service, paths)
        out += _check_emptydir(service, paths)
        out += _check_version_drift(service, paths, spec, target)
    out += _check_api_version(obj, spec, target, paths)
    return out


def _f(sev: Severity, code: str, path: str, message: str, fix: str = "") -> Finding:
    return Finding(sev, code, path, message, fix)


def _check_names(spec: GraphSpec, paths: _Paths) -> list[Finding]:
    out = []
    for service in spec.services:
        child = f"{spec.name}-{service.name.lower()}"
        if len(child) > 63:
            out.append(_f(Severity.ERROR, "child_name_too_long", f"{paths.service(service)}.name" if not paths.alpha
                          else paths.service(service),
                          f"the operator names this component's resources {child!r} ({len(child)} characters); "
                          "Kubernetes refuses names over 63",
                          "shorten the graph name or the component name"))
    return out


def _check_pools(spec: GraphSpec, paths: _Paths) -> list[Finding]:
    prefill, decode = spec.pools("prefill"), spec.pools("decode")
    out = []
    where = "spec.services" if paths.alpha else "spec.components"
    if prefill and not decode:
        out.append(_f(Severity.ERROR, "prefill_without_decode", where,
                      "the graph has a prefill pool but no decode pool: prefilled requests have nowhere to decode",
                      "add a decode worker (componentType worker, subComponentType decode), "
                      "or make the worker aggregated"))
    if decode and not prefill:
        out.append(_f(Severity.ERROR, "decode_without_prefill", where,
                      "the graph has a decode pool but no prefill pool: disaggregated decode workers wait for "
                      "KV caches that no one produces",
                      "add a prefill worker, or make the decode worker aggregated (type worker)"))
    if not spec.pools("frontend"):
        out.append(_f(Severity.WARNING, "no_frontend", where,
                      "the graph has no frontend: nothing serves the OpenAI-compatible API",
                      "add a Frontend component (componentType frontend)"))
    if spec.pools("planner"):
        out.append(_f(Severity.INFO, "planner_managed", where,
                      "a Planner manages this graph's worker replicas: manual scaling will be undone by it",
                      "change the Planner's limits instead of the replicas, or remove the planner"))
    return out


def _check_planner(service: Service, paths: _Paths) -> list[Finding]:
    """The Planner's --config against what 1.6.1's PlannerConfig accepts (graphs/planner/settings.py)."""
    path = f"{paths.container(service)}.args"
    try:
        arg = config_arg(service.command, service.args)
        if arg.present and arg.inline is None:
            return [_f(Severity.INFO, "planner_config_file", path,
                       f"the Planner reads its settings from {arg.text!r}, which this control plane cannot check",
                       "write the settings inline (--config '{...}') to have them checked and shown")]
        settings_from_config(arg.inline or {})
    except PlannerSettingsError as exc:
        return [_f(Severity.ERROR, "planner_config_invalid", path,
                   f"Dynamo's Planner would refuse its --config: {exc}",
                   "fix the setting in the graph form or in the --config JSON")]
    return [_f(Severity.WARNING, "planner_config_unknown_key", path,
               f"the Planner does not know the setting {key!r} and ignores it", "check its spelling")
            for key in unknown_keys(arg.inline or {})]


def _check_replicas(service: Service, paths: _Paths) -> list[Finding]:
    path = f"{paths.service(service)}.replicas"
    if service.replicas is not None and service.replicas > MAX_REPLICAS:
        return [_f(Severity.ERROR, "replicas_absurd", path,
                   f"{service.replicas} replicas is more than this control plane allows ({MAX_REPLICAS})",
                   "check for a typo")]
    if service.replicas == 0 and service.role in ("frontend", "prefill", "decode", "worker"):
        what = "nothing serves the API" if service.role == "frontend" else (
            "the frontend drops the model from /v1/models while no worker is up (ai-dynamo/dynamo#10753)")
        return [_f(Severity.WARNING, "replicas_zero", path, f"{service.name} has 0 replicas: {what}",
                   "keep at least 1 replica")]
    return []


def _check_shm(service: Service, paths: _Paths, spec: GraphSpec) -> list[Finding]:
    path = paths.shm(service)
    size = service.shared_memory
    disagg = service.role in ("prefill", "decode")
    if size is None:
        return [_f(Severity.WARNING, "shm_unset", path,
                   f"{service.name} does not set its shared memory: it relies on the operator's default, and a "
                   "pod without the operator's volume gets Kubernetes' 64 MB /dev/shm, on which NIXL KV "
                   "transfer stalls at init or the worker dies",
                   f"set {'sharedMemory.size' if paths.alpha else 'sharedMemorySize'}: {RECOMMENDED_SHM}")]
    try:
        amount = quantity_bytes(size)
    except ValueError:
        return []  # the schema check reports the format
    if amount == 0:
        sev = Severity.ERROR if disagg else Severity.WARNING
        return [_f(sev, "shm_disabled", path,
                   f"{service.name} disables shared memory: /dev/shm falls back to 64 MB and NIXL KV transfer "
                   "between prefill and decode fails",
                   f"set {'sharedMemory.size' if paths.alpha else 'sharedMemorySize'}: {RECOMMENDED_SHM}")]
    if amount < MIN_SHM_BYTES:
        return [_f(Severity.ERROR, "shm_too_small", path,
                   f"{service.name} gets only {size} of /dev/shm: NIXL needs at least 1Gi, and tensor-parallel "
                   "NCCL runs out of space on small /dev/shm (ai-dynamo/dynamo#1408)",
                   f"set it to {RECOMMENDED_SHM}")]
    return []


def _check_emptydir(service: Service, paths: _Paths) -> list[Finding]:
    out = []
    volumes = service.pod_extra.get("volumes") or []
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        empty = volume.get("emptyDir") if isinstance(volume, dict) else None
        if isinstance(empty, dict) and empty.get("medium") == "Memory":
            out.append(_f(Severity.WARNING, "shm_emptydir_workaround", f"{paths.pod(service)}.volumes[{i}].emptyDir",
                          f"{service.name} mounts an emptyDir with medium Memory as a /dev/shm workaround: the "
                          "Dynamo operator does not apply it to /dev/shm, so the worker still starts with 64 MB",
                          f"remove the volume and set {'sharedMemory.size' if paths.alpha else 'sharedMemorySize'}: "
                          f"{RECOMMENDED_SHM} on the component"))
    mounts = service.container_extra.get("volumeMounts") or []
    for i, mount in enumerate(mounts if isinstance(mounts, list) else []):
        if isinstance(mount, dict) and mount.get("mountPath") == "/dev/shm":
            out.append(_f(Severity.WARNING, "shm_manual_mount", f"{paths.container(service)}.volumeMounts[{i}]",
                          f"{service.name} mounts its own volume at /dev/shm; the operator manages /dev/shm",
                          f"remove the mount and set the component's shared memory to {RECOMMENDED_SHM}"))
    return out


def _check_role_flag(service: Service, paths: _Paths, spec: GraphSpec, target: DynamoVersion) -> list[Finding]:
    if service.role == "worker" and not service.command and not service.args:
        return []
    engine = engine_of(service.command, service.args) or spec.backend
    declared = declared_role(service.command, service.args)
    argv = tokens(service.command, service.args)
    path = paths.args(service)
    out = []
    new_style = uses_disaggregation_mode(target, engine)
    if service.role == "prefill" and declared != "prefill":
        flag = "--disaggregation-mode prefill" if new_style else "--is-prefill-worker"
        out.append(_f(Severity.ERROR, "prefill_role_missing", path,
                      f"{service.name} is a prefill worker but its command does not say so: it will run as a "
                      f"{'decode/aggregated' if declared in (None, 'decode') else declared} worker",
                      f"add {flag} to its command"))
    if service.role == "decode" and declared == "prefill":
        out.append(_f(Severity.ERROR, "decode_role_wrong", path,
                      f"{service.name} is a decode worker but its command declares prefill", "remove the prefill flag"))
    if service.role == "decode" and declared is None and new_style and engine in ENGINES:
        out.append(_f(Severity.WARNING, "decode_role_missing", path,
                      f"{service.name} is a decode worker but its command does not declare it: on Dynamo {target} "
                      "a worker without --disaggregation-mode runs aggregated",
                      "add --disaggregation-mode decode"))
    if engine in ("vllm", "mocker"):
        if "--is-prefill-worker" in argv and new_style and engine == "vllm":
            out.append(_f(Severity.ERROR, "flag_removed", path,
                          f"--is-prefill-worker was removed from dynamo.vllm in {DISAGGREGATION_MODE_SINCE} "
                          f"(ai-dynamo/dynamo#12089); Dynamo {target} refuses to start with it",
                          "replace it with --disaggregation-mode prefill (render for this version does it)"))
        if any(t.startswith("--disaggregation-mode") for t in argv) and not new_style and engine == "vllm":
            out.append(_f(Severity.ERROR, "flag_too_new", path,
                          f"dynamo.vllm {target} does not know --disaggregation-mode; it appeared in "
                          f"{DISAGGREGATION_MODE_SINCE}",
                          "use --is-prefill-worker on prefill workers and no flag on decode workers"))
    return out


def _check_gpus(service: Service, paths: _Paths, spec: GraphSpec) -> list[Finding]:
    engine = engine_of(service.command, service.args) or spec.backend
    if engine not in ENGINES or not ENGINES[engine]["gpu"]:
        return []
    if not service.gpus:
        return [_f(Severity.ERROR, "no_gpu", paths.gpu(service),
                   f"{service.name} runs {ENGINES[engine]['module']} but asks for "
                   f"{'zero' if service.gpus == 0 else 'no'} GPUs: the engine cannot start without one",
                   "request at least 1 GPU per replica" + (" (resources.limits.gpu: \"1\")" if paths.alpha else ""))]
    return []


def _looks_like_hub_id(model: str) -> bool:
    return "/" in model and not model.startswith(("/", ".", "~", "s3://", "gs://", "pvc://"))


def _check_token(service: Service, paths: _Paths) -> list[Finding]:
    model = served_model(service.command, service.args)
    argv = tokens(service.command, service.args)
    # The model to download is --model / --model-path, not the served name.
    for flag in ("--model", "--model-path"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            model = argv[argv.index(flag) + 1]
    has_env_token = any(isinstance(e, dict) and e.get("name") in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
                        for e in service.env)
    if model and _looks_like_hub_id(model) and not service.hf_token_secret and not has_env_token:
        return [_f(Severity.WARNING, "hf_token_missing", paths.secret(service),
                   f"{service.name} downloads {model} from Hugging Face without a token Secret: gated models "
                   "fail to download and anonymous downloads are rate-limited",
                   "create the Secret hf-token-secret with key HF_TOKEN and reference it "
                   + ("with envFromSecret: hf-token-secret" if paths.alpha else "in envFrom"))]
    return []


def _check_version_drift(service: Service, paths: _Paths, spec: GraphSpec, target: DynamoVersion) -> list[Finding]:
    out = []
    tag = version_from_image(service.image)
    if tag is not None and tag != target:
        out.append(_f(Severity.WARNING, "image_version_mismatch", f"{paths.container(service)}.image",
                      f"{service.name}'s image is Dynamo {tag} but the graph targets {target}: command-line flags "
                      "and paths differ between releases",
                      f"use the {target} image, or target {tag}"))
    wd = service.working_dir or ""
    if target >= EXAMPLES_WORKDIR_SINCE and wd.startswith("/workspace/components/backends/"):
        out.append(_f(Severity.WARNING, "workdir_moved", f"{paths.container(service)}.workingDir",
                      f"{wd} no longer exists in Dynamo {target} images",
                      "use " + wd.replace("/workspace/components/", "/workspace/examples/")))
    if paths.alpha and "dynamoNamespace" in service.extra_v1alpha1:
        out.append(_f(Severity.INFO, "dynamo_namespace_ignored", f"{paths.service(service)}.dynamoNamespace",
                      "dynamoNamespace is deprecated and ignored: the runtime namespace is always "
                      f"<k8s namespace>-{spec.name}", "remove it"))
    if paths.alpha and "autoscaling" in service.extra_v1alpha1:
        out.append(_f(Severity.WARNING, "autoscaling_ignored", f"{paths.service(service)}.autoscaling",
                      "autoscaling is deprecated and ignored by the operator",
                      "enable scalingAdapter and drive the DynamoGraphDeploymentScalingAdapter instead"))
    return out


def _check_api_version(obj: dict[str, Any], spec: GraphSpec, target: DynamoVersion, paths: _Paths) -> list[Finding]:
    if paths.alpha:
        sev = Severity.WARNING if target >= DynamoVersion(1, 5, 0) else Severity.INFO
        # The advice holds only where the conversion loses nothing (dgd/convert.py).
        lost = [path for path, _why in conversion_losses(spec, "nvidia.com/v1beta1")]
        fix = ("export this graph as nvidia.com/v1beta1" if not lost else
               "to move it to nvidia.com/v1beta1, first remove what v1beta1 has no place for: " + ", ".join(lost))
        return [_f(sev, "v1alpha1_deprecated", "apiVersion",
                   "nvidia.com/v1alpha1 is deprecated; nvidia.com/v1beta1 is the storage version since Dynamo 1.4"
                   + (" and admission webhooks check only v1beta1 from 1.5" if sev == Severity.WARNING else ""),
                   fix)]
    if target < V1BETA1_SINCE:
        return [_f(Severity.ERROR, "v1beta1_unserved", "apiVersion",
                   f"operators of Dynamo {target} serve only nvidia.com/v1alpha1",
                   "export this graph as nvidia.com/v1alpha1")]
    return []


# The router flags table is dynamo.frontend 1.6.1's; older frontends are checked for the mode only.
ROUTER_FLAGS_SINCE = DynamoVersion(1, 6, 0)


def _check_router(service: Service, paths: _Paths, spec: GraphSpec, target: DynamoVersion) -> list[Finding]:
    """The Frontend's --router-mode and router flags, as dynamo.frontend 1.6.1 parses them: a
    value it refuses stops the frontend at start; a KV-router flag without --router-mode kv
    is silently unused."""
    out: list[Finding] = []
    path = paths.args(service)
    argv = tokens(service.command, service.args)
    flags = router_flags(argv)
    env_mode = next((e.get("value") for e in service.env if isinstance(e, dict)
                     and e.get("name") == ROUTER_MODE_ENV), None)
    if env_mode is not None and not any(flag == "--router-mode" for flag, _ in flags):
        flags.append(("--router-mode", str(env_mode)))
    for flag, value in flags:
        if flag != "--router-mode" and target < ROUTER_FLAGS_SINCE:
            continue
        problem = router_flag_problem(flag, value)
        if problem:
            out.append(_f(Severity.ERROR, "router_flag_invalid", path, f"{service.name}: {problem}",
                          "use --router-mode kv, round-robin or random, and only the router flags of "
                          f"dynamo.frontend {target}"))
    mode = spec.router_mode
    kv_only = sorted({flag for flag, _ in flags if ROUTER_FLAGS.get(flag, ("", (), False))[2]})
    if kv_only and mode != "kv" and target >= ROUTER_FLAGS_SINCE:
        out.append(_f(Severity.WARNING, "router_flag_unused", path,
                      f"{service.name} sets {', '.join(kv_only)}, which only the KV router reads, but routes "
                      f"{mode}: the flags do nothing", "add --router-mode kv, or remove the flags"))
    if mode == "kv":
        for worker in spec.services:
            if worker.is_worker and "--no-enable-prefix-caching" in tokens(worker.command, worker.args):
                out.append(_f(Severity.WARNING, "kv_router_without_prefix_cache", paths.args(worker),
                              f"{worker.name} disables prefix caching: it keeps no prefixes to reuse, so the KV "
                              "router has nothing to route on and the hit rate stays 0",
                              "remove --no-enable-prefix-caching"))
    return out
