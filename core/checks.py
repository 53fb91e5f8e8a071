"""Operational checks: what the schema accepts but Dynamo operators trip over. Each check
reads the manifest as written (so paths point at the user's own lines) through the spec
imported from it, and returns findings with a severity, a path and a fix."""

from __future__ import annotations

from typing import Any

from core.dgd.commandline import (
    NIXL_KV_TRANSFER_CONFIG,
    ROUTER_FLAGS,
    UNKNOWN_ROLE,
    engine_of,
    has_kv_transfer_config,
    router_flag_problem,
    router_flags,
    served_model,
    tokens,
)
from core.dgd.parse import import_manifest
from core.dgd.pod_checks import drain_findings, gpu_count, other_containers_ask_for_gpus, shm_findings
from core.dgd.render import V1ALPHA1, conversion_losses
from core.dgd.shell import expand, literal_env
from core.dgd.topology_checks import pool_findings, serves_api, worker_role
from core.facts import (
    DISAGGREGATION_MODE_SINCE,
    ENGINES,
    EXAMPLES_WORKDIR_SINCE,
    KV_TRANSFER_CONFIG_REQUIRED_SINCE,
    LEGACY_ROLE_FLAGS_REMOVED,
    ROUTER_MODE_ENV,
    V1BETA1_SINCE,
    V1BETA1_STORAGE_SINCE,
    DynamoVersion,
    uses_disaggregation_mode,
    version_from_image,
)
from core.findings import Finding, Severity
from core.planner_config import PlannerSettingsError, config_arg, settings_from_config, unknown_keys
from core.spec import MAX_REPLICAS, GraphSpec, Service


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
    out += pool_findings(spec, paths.alpha)
    for service in spec.services:
        out += _check_replicas(service, paths, spec)
        out += shm_findings(service, paths, target)
        if service.is_worker:
            out += _check_role_flag(service, paths, spec, target)
            out += _check_gpus(service, paths)
            out += _check_token(service, paths, spec)
            out += drain_findings(service, f"{paths.pod(service)}.terminationGracePeriodSeconds")
        if service.role == "frontend":
            out += _check_router(service, paths, spec, target)
        if service.role == "planner":
            out += _check_planner(service, paths)
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


def _check_planner(service: Service, paths: _Paths) -> list[Finding]:
    """The Planner's --config against what 1.6.1's PlannerConfig accepts (core/planner_config.py)."""
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


def _check_replicas(service: Service, paths: _Paths, spec: GraphSpec) -> list[Finding]:
    path = f"{paths.service(service)}.replicas"
    if service.replicas is not None and service.replicas > MAX_REPLICAS:
        return [_f(Severity.ERROR, "replicas_absurd", path,
                   f"{service.replicas} replicas is more than this control plane allows ({MAX_REPLICAS})",
                   "check for a typo")]
    serves = service.role == "frontend" or any(serves_api(s) for s in spec.services)
    if service.replicas == 0 and service.role in ("frontend", "prefill", "decode", "worker") and serves \
            and not _makes_its_own_checkpoint(service):
        what = "nothing serves the API" if service.role == "frontend" else (
            "the frontend drops the model from /v1/models while no worker is up (ai-dynamo/dynamo#10753)")
        return [_f(Severity.WARNING, "replicas_zero", path, f"{service.name} has 0 replicas: {what}",
                   "keep at least 1 replica")]
    return []


def _makes_its_own_checkpoint(service: Service) -> bool:
    """A worker with a DGD-managed checkpoint (enabled, no checkpointRef) starts at 0 replicas by
    design: the DGD controller creates its DynamoCheckpoint and checkpoint Job whatever the
    replicas (deploy/operator/internal/controller/dgd_checkpoints_reconciler.go:89-178@2a6da14c),
    and the worker is scaled up once the checkpoint is Ready, as upstream's
    recipes/gpt-oss-120b/vllm/agg-snapshot-gms/README.md tells ("Apply the manifest with the
    worker replica count unchanged at zero")."""
    config = service.extra_v1alpha1.get("checkpoint")
    if config is None:
        experimental = service.extra_v1beta1.get("experimental")
        config = experimental.get("checkpoint") if isinstance(experimental, dict) else None
    return isinstance(config, dict) and config.get("enabled") is True and not config.get("checkpointRef")


def _check_role_flag(service: Service, paths: _Paths, spec: GraphSpec, target: DynamoVersion) -> list[Finding]:
    engine, declared = worker_role(service, spec)
    if engine is None:
        return []
    argv = tokens(service.command, service.args)
    path = paths.args(service)
    out = []
    new_style = uses_disaggregation_mode(target, engine)
    if service.role == "prefill" and declared not in ("prefill", UNKNOWN_ROLE):
        flag = "--disaggregation-mode prefill" if new_style else "--is-prefill-worker"
        # No flag means aggregated: components/src/dynamo/vllm/backend_args.py:646-647@2a6da14c.
        out.append(_f(Severity.ERROR, "prefill_role_missing", path,
                      f"{service.name} is a prefill worker but its command does not say so: it will run as a "
                      f"{'decode/aggregated' if declared in (None, 'decode', 'agg') else declared} worker",
                      f"add {flag} to its command"))
    if service.role == "decode" and declared == "prefill":
        out.append(_f(Severity.ERROR, "decode_role_wrong", path,
                      f"{service.name} is a decode worker but its command declares prefill", "remove the prefill flag"))
    # A decode-typed worker without a decode flag is aggregated; that is how a Planner in agg mode
    # finds its workers (components/src/dynamo/planner/monitoring/dgd_services.py:296-331@2a6da14c),
    # so it is a mistake only beside a prefill pool.
    if service.role == "decode" and declared is None and new_style and spec.pools("prefill"):
        out.append(_f(Severity.WARNING, "decode_role_missing", path,
                      f"{service.name} is a decode worker beside a prefill pool, but its command does not declare "
                      f"it: on Dynamo {target} a worker without --disaggregation-mode runs aggregated",
                      "add --disaggregation-mode decode"))
    legacy = [t for t in argv if t in ("--is-prefill-worker", "--is-decode-worker")]
    if engine == "vllm" and legacy and target >= LEGACY_ROLE_FLAGS_REMOVED:
        out.append(_f(Severity.ERROR, "flag_removed", path,
                      f"{legacy[0]} was removed from dynamo.vllm in {LEGACY_ROLE_FLAGS_REMOVED} "
                      f"(ai-dynamo/dynamo#12089); Dynamo {target} refuses to start with it",
                      f"replace it with --disaggregation-mode {'prefill' if 'prefill' in legacy[0] else 'decode'} "
                      "(render for this version does it)"))
    if engine in ("vllm", "mocker") and not new_style and any(t.startswith("--disaggregation-mode") for t in argv):
        out.append(_f(Severity.ERROR, "flag_too_new", path,
                      f"{ENGINES[engine]['module']} {target} does not know --disaggregation-mode; it appeared in "
                      f"{DISAGGREGATION_MODE_SINCE} (ai-dynamo/dynamo#6483)",
                      "use --is-prefill-worker on prefill workers and no flag on decode workers"))
    prefill = declared == "prefill" or (service.role == "prefill" and declared is None)
    if engine == "vllm" and prefill and target >= KV_TRANSFER_CONFIG_REQUIRED_SINCE \
            and has_kv_transfer_config(service.command, service.args) is False:
        # components/src/dynamo/vllm/args.py:230-246@2a6da14c raises ValueError at start.
        out.append(_f(Severity.ERROR, "kv_transfer_config_missing", path,
                      f"{service.name} is a vLLM prefill worker without --kv-transfer-config: dynamo.vllm "
                      f"{target} refuses to start a prefill worker without an explicit KV connector (since "
                      f"{KV_TRANSFER_CONFIG_REQUIRED_SINCE}, ai-dynamo/dynamo#6450)",
                      f"add --kv-transfer-config '{NIXL_KV_TRANSFER_CONFIG}'"))
    return out


def _check_gpus(service: Service, paths: _Paths) -> list[Finding]:
    """An engine that needs a GPU, on a main container the operator counts none for."""
    engine = engine_of(service.command, service.args)
    if engine not in ENGINES or not ENGINES[engine]["gpu"]:
        return []
    count = gpu_count(service, paths.alpha)
    if count != 0 or other_containers_ask_for_gpus(service):
        return []  # GPUs, DRA claims (counted from their template at reconcile), or a GPU sidecar
    return [_f(Severity.ERROR, "no_gpu", paths.gpu(service),
               f"{service.name} runs {ENGINES[engine]['module']} but asks for "
               f"{'zero' if service.gpus == 0 else 'no'} GPUs: the engine cannot start without one",
               "request at least 1 GPU per replica" + (" (resources.limits.gpu: \"1\")" if paths.alpha else ""))]

def _looks_like_hub_id(model: str) -> bool:
    return "/" in model and not model.startswith(("/", ".", "~", "s3://", "gs://", "pvc://"))


def _check_token(service: Service, paths: _Paths, spec: GraphSpec) -> list[Finding]:
    """A Hugging Face model id without a token: gated models need one, public ones do not, so
    this is a note. Skipped when the worker reads models offline (HF_HUB_OFFLINE)."""
    env = literal_env([*spec.env, *service.env])
    if any(env.get(name, "").strip().lower() in ("1", "true", "yes", "on")
           for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return []
    model = served_model(service.command, service.args)
    argv = tokens(service.command, service.args)
    # The model to download is --model / --model-path, not the served name.
    for flag in ("--model", "--model-path"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            model = argv[argv.index(flag) + 1]
    model = expand(model, env) if model else None
    has_env_token = any(isinstance(e, dict) and e.get("name") in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
                        for e in [*spec.env, *service.env])
    if model and _looks_like_hub_id(model) and not service.hf_token_secret and not has_env_token:
        return [_f(Severity.INFO, "hf_token_missing", paths.secret(service),
                   f"{service.name} downloads {model} from Hugging Face without a token Secret: a gated model "
                   "fails to download, and anonymous downloads are rate-limited",
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
        # Images copy the repository to /workspace (container/templates/dynamo_runtime.Dockerfile:170@2a6da14c)
        # and components/backends moved to examples/backends (#3849); the runtime creates a missing
        # workingDir empty, so only relative paths in the command break.
        out.append(_f(Severity.INFO, "workdir_moved", f"{paths.container(service)}.workingDir",
                      f"{wd} no longer exists in Dynamo {target} images: the container starts in an empty "
                      "directory, and relative paths in its command do not resolve",
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
        if target < V1BETA1_SINCE:
            return []  # the only version these operators serve
        # The advice holds only where the conversion loses nothing (dgd/convert.py).
        lost = [path for path, _why in conversion_losses(spec, "nvidia.com/v1beta1")]
        fix = ("export this graph as nvidia.com/v1beta1" if not lost else
               "to move it to nvidia.com/v1beta1, first remove what v1beta1 has no place for: " + ", ".join(lost))
        # deploy/operator/api/v1alpha1/dynamographdeployment_types.go:346@2a6da14c: the API server
        # answers every v1alpha1 request with a deprecation warning; conversion keeps it working.
        stored = (f"; v1beta1 is the storage version from {V1BETA1_STORAGE_SINCE}" if target >= V1BETA1_STORAGE_SINCE
                  else "")
        return [_f(Severity.INFO, "v1alpha1_deprecated", "apiVersion",
                   f"nvidia.com/v1alpha1 is deprecated since Dynamo {V1BETA1_SINCE}: the operator converts it to "
                   f"nvidia.com/v1beta1{stored}", fix)]
    if target < V1BETA1_SINCE:
        return [_f(Severity.ERROR, "v1beta1_unserved", "apiVersion",
                   f"operators of Dynamo {target} serve only nvidia.com/v1alpha1 (v1beta1 is served from "
                   f"{V1BETA1_SINCE}, ai-dynamo/dynamo#8647)",
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
            # Beside a prefill pool the KV router routes on the prefill workers' caches; decode
            # workers publish no KV events (#3819; deprecations.mdx:152@2a6da14c).
            routed = worker.role != "decode" or not spec.pools("prefill")
            if worker.is_worker and routed and "--no-enable-prefix-caching" in tokens(worker.command, worker.args):
                out.append(_f(Severity.WARNING, "kv_router_without_prefix_cache", paths.args(worker),
                              f"{worker.name} disables prefix caching: it keeps no prefixes to reuse, so the KV "
                              "router has nothing to route on and the hit rate stays 0",
                              "remove --no-enable-prefix-caching"))
    return out
