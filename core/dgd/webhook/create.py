"""The stateless rules of the Dynamo operator's DGD validating webhook (``Validate``), on a v1beta1
object: every rule cites ai-dynamo/dynamo ``deploy/operator/internal/webhook/validation/<file>:<line>``
at commit 2a6da14c (2026-08-21). The webhook runs them on every create, and on every update before
the update rules (``dynamographdeployment_handler.go@2a6da14c:104``, runtime-version rules off)."""

from __future__ import annotations

import re
from typing import Any

from core.cel import Quantity

from . import errors as e
from .errors import FieldError, forbidden, invalid, not_supported, obj, required
from .experimental import experimental
from .provider import validate_provider_override

_MAX_NAME = 45  # consts.MaxCombinedGroveResourceNameLength (internal/consts/consts.go@2a6da14c:231)
# Masterminds semver.NewVersion's loose SemVerRegex (what "must be valid semver" accepts).
_SEMVER = re.compile(r"^v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?(-([0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*))?"
                     r"(\+([0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*))?$")
# runtimeversion.imageTagPattern (internal/runtimeversion/runtimeversion.go@2a6da14c:17).
_IMAGE_TAG = re.compile(r"^[vV]?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-]"
                        r"[0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?(?:\+([0-9A-Za-z-]+"
                        r"(?:\.[0-9A-Za-z-]+)*))?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RUNTIME_VERSION = "is required when the specified main container image has no parseable semantic-version tag"


def image_tag(image: str) -> str:
    """``runtimeversion.imageTag`` (runtimeversion.go@2a6da14c:84-95)."""
    ref = image.strip().split("@", 1)[0]
    slash, colon = ref.rfind("/"), ref.rfind(":")
    return "" if colon <= slash else ref[colon + 1:]


def override_required(image: str, override: str) -> bool:
    """``runtimeVersionOverrideRequired`` (shared_helpers.go@2a6da14c:117): no override and the image
    tag is no semantic version (``ParseImageVersion``, runtimeversion.go@2a6da14c:51)."""
    return not override and not _IMAGE_TAG.match(image_tag(image).strip())


def grove_pathway(annotations: dict[str, Any], grove_enabled: bool) -> tuple[bool, str]:
    """``grovePathwayForDynamoGraphDeployment`` (dynamographdeployment_helpers.go@2a6da14c:136-173)."""
    if e.WORKLOAD_PROVIDER in annotations:
        provider = annotations[e.WORKLOAD_PROVIDER]
        if provider == e.PROVIDER_GROVE:
            return True, ""
        if provider == e.PROVIDER_COMPONENT:
            return False, f'requires the Grove pathway, but workload provider "{provider}" is selected'
        return False, (f'requires the Grove pathway, but annotation "{e.WORKLOAD_PROVIDER}" has unsupported value '
                       f'"{provider}"')
    if not grove_enabled:
        return False, "requires the Grove pathway, but Grove is disabled in the operator configuration"
    if str(annotations.get(e.ENABLE_GROVE, "")).lower() == "false":
        return False, (f'requires the Grove pathway; remove or unset annotation "{e.ENABLE_GROVE}" (currently '
                       f'"{annotations[e.ENABLE_GROVE]}")')
    return True, ""


def validate(dgd: dict[str, Any], cluster, *, runtime_versions: bool) -> list[FieldError]:
    """``validateDynamoGraphDeployment`` (dynamographdeployment.go@2a6da14c:134-157)."""
    meta, spec = obj(dgd.get("metadata")), obj(dgd.get("spec"))
    annotations = obj(meta.get("annotations"))
    comps = [c if isinstance(c, dict) else {} for c in spec.get("components") or []]
    found = _object_meta(annotations, any(mode_of_failover(c) == "IntraPod" for c in comps))
    pathway, why = grove_pathway(annotations, cluster.grove)
    found += _spec(spec, comps, str(meta.get("name", "")), int(meta.get("generation") or 0), cluster,
                   annotations.get(e.WORKLOAD_PROVIDER, ""), pathway, why, runtime_versions)
    return found


def mode_of_failover(component: dict[str, Any]) -> str | None:
    section = e.failover(e.experimental(component))
    return e.mode(section) if section is not None else None


def _object_meta(annotations: dict[str, Any], intra_pod_failover: bool) -> list[FieldError]:
    """``validateObjectMeta`` (dynamographdeployment.go@2a6da14c:160-222)."""
    out, at = [], "metadata.annotations"
    if e.ORIGIN_VERSION in annotations and not _SEMVER.match(str(annotations[e.ORIGIN_VERSION])):  # :167
        out.append(invalid(f"{at}[{e.ORIGIN_VERSION}]", annotations[e.ORIGIN_VERSION], "must be valid semver",
                           "origin_version"))
    backend = annotations.get(e.VLLM_EXECUTOR_BACKEND)
    if backend is not None and str(backend).lower() not in ("mp", "ray"):  # :176
        out.append(invalid(f"{at}[{e.VLLM_EXECUTOR_BACKEND}]", backend, 'must be "mp" or "ray"', "vllm_backend"))
    strategy = annotations.get(e.GROVE_UPDATE_STRATEGY)
    if strategy is not None and strategy not in ("RollingRecreate", "OnDelete"):  # :183
        out.append(not_supported(f"{at}[{e.GROVE_UPDATE_STRATEGY}]", strategy, ["RollingRecreate", "OnDelete"],
                                 "grove_update_strategy"))
    discovery = annotations.get(e.DISCOVERY_MODE)
    if discovery is not None and discovery not in ("pod", "container"):  # :195
        out.append(not_supported(f"{at}[{e.DISCOVERY_MODE}]", discovery, ["pod", "container"], "discovery_mode"))
    provider = annotations.get(e.WORKLOAD_PROVIDER)
    if provider is not None and provider not in (e.PROVIDER_COMPONENT, e.PROVIDER_GROVE):  # :204
        out.append(not_supported(f"{at}[{e.WORKLOAD_PROVIDER}]", provider, [e.PROVIDER_COMPONENT, e.PROVIDER_GROVE],
                                 "workload_provider"))
    if intra_pod_failover and annotations.get(e.DISCOVERY_MODE) != "container":  # :213
        out.append(invalid(f"{at}[{e.DISCOVERY_MODE}]", annotations.get(e.DISCOVERY_MODE, ""),
                           'must be "container" when intra-pod failover is configured', "discovery_mode"))
    return out


def _spec(spec, comps, name, generation, cluster, provider, pathway, why, runtime_versions) -> list[FieldError]:
    """``validateDynamoGraphDeploymentSpec`` (dynamographdeployment.go@2a6da14c:225-397)."""
    out: list[FieldError] = []
    if isinstance(spec.get("providerOverride"), dict):  # :235
        out += validate_provider_override(spec["providerOverride"], "spec.providerOverride", provider, "root", None)
    if spec.get("priorityClassName") and not pathway:  # :247
        out.append(forbidden("spec.priorityClassName", why, "grove_pathway"))
    if not comps:  # :252
        out.append(required("spec.components", "must have at least one component", "components_required"))
    backend = spec.get("backendFramework") or ""
    for i, comp in enumerate(comps):
        at = f"spec.components[{i}]"
        if pathway:  # :260 combined Grove resource name length
            length, detail = _name_length(name, comps, comp)
            if length > _MAX_NAME:
                out.append(invalid(f"{at}.name", comp.get("name", ""), (
                    f"combined resource name length {length} exceeds the {_MAX_NAME}-character pod-name limit "
                    f'({detail}); shorten DynamoGraphDeployment name "{name}" or component name '
                    f'"{comp.get("name", "")}"'), "grove_name_length"))
        gms = e.gms(comp)
        if gms is not None and e.mode(gms) == "InterPod":  # :278
            where = f"{at}.experimental.gpuMemoryService.mode"
            if not pathway:
                out.append(forbidden(where, why, "grove_pathway"))
            if backend != "vllm":
                out.append(invalid(where, gms.get("mode", ""), "the inter-pod GMS layout is currently supported only "
                                   f"for vLLM (detected backend: {backend or '<unset>'})", "inter_pod_gms_backend"))
        out += _power_annotation(comp, at)  # :298
        out += _elastic_ep(backend, comp, at)  # :300
        out += _shared_spec(comp, at, pathway, provider, cluster, runtime_versions)  # :302
    restart = spec.get("restart")
    if isinstance(restart, dict) and isinstance(restart.get("strategy"), dict):  # :314
        out += _restart_strategy(restart["strategy"], {c.get("name") for c in comps})
    out += _topology(spec, comps, generation, pathway, cluster)  # :318
    policy = obj(obj(spec.get("experimental")).get("kvTransferPolicy"))
    if policy.get("clusterTopologyName"):  # :386 -> :554-597
        out += _kv_transfer_policy(policy, generation, pathway, why, cluster)
    return out


def _name_length(name: str, comps: list[dict[str, Any]], comp: dict[str, Any]) -> tuple[int, str]:
    """``dgdComponentResourceNameLength`` (dynamographdeployment_helpers.go@2a6da14c:175-191) with
    ``dynamo.PCSNameForDGD`` (internal/dynamo/graph.go@2a6da14c:1398): the PodCliqueSet name is the DGD
    name cut to what the longest component leaves (at least 8 characters)."""
    budget = 0
    for other in comps:
        low = str(other.get("name", "")).lower()
        budget = max(budget, len(low) + len(_longest_clique(other)) if e.uses_pcsg(other) else len(low))
    pcs = min(len(name), max(8, _MAX_NAME - budget))
    length, detail = pcs + len(str(comp.get("name", "")).lower()), "PCS name + component name"
    if e.uses_pcsg(comp):
        longest = _longest_clique(comp)
        length += len(longest)
        detail = f'PCS name + PCSG name + longest PodClique name "{longest}"'
    return length, detail


def _longest_clique(comp: dict[str, Any]) -> str:
    """``LongestPodCliqueNameForDGDComponent`` (internal/dynamo/graph.go@2a6da14c:1373-1394)."""
    name, count = str(comp.get("name", "")), e.nodes(comp)
    inter_pod = (e.gms(comp) or {}).get("mode") == "InterPod"
    if count > 1 and inter_pod:
        roles = [f"{name}-gms-{r}" for r in range(count)] + [f"{name}-ldr"]
        roles += [f"{name}-wkr-{r}" for r in range(1, count)]
    elif count > 1:
        roles = [f"{name}-ldr", f"{name}-wkr"]
    elif inter_pod:
        roles = [f"{name}-gms-0", name]
    else:
        roles = [name]
    return max([name.lower()] + [r.lower() for r in roles], key=len)


def _power_annotation(comp: dict[str, Any], at: str) -> list[FieldError]:
    """``validateDGDComponentPowerAnnotation`` (dynamographdeployment.go@2a6da14c:880-903)."""
    annotations = obj(obj(obj(comp.get("podTemplate")).get("metadata")).get("annotations"))
    if not isinstance(comp.get("podTemplate"), dict) or e.GPU_POWER_LIMIT not in annotations:
        return []
    value, out = annotations[e.GPU_POWER_LIMIT], []
    where = f"{at}.podTemplate.metadata.annotations[{e.GPU_POWER_LIMIT}]"
    if not re.fullmatch(r"[+-]?[0-9]+", str(value)):  # validateDGDPowerLimitValue, helpers.go@2a6da14c:226
        out.append(invalid(where, value, "must be a decimal integer", "gpu_power_limit"))
    elif int(value) <= 0:
        out.append(invalid(where, value, "must be greater than zero", "gpu_power_limit"))
    dra = dra_path(comp, at)
    if dra:
        out.append(forbidden(dra, f'cannot be combined with annotation "{e.GPU_POWER_LIMIT}": power-aware planning '
                                  "does not support DRA-backed device allocation", "gpu_power_limit"))
    return out


def dra_path(comp: dict[str, Any], at: str) -> str | None:
    """``dgdDRAPath`` (dynamographdeployment_helpers.go@2a6da14c:237-262)."""
    if e.gms(comp) is not None:
        return f"{at}.experimental.gpuMemoryService"
    for key in ("containers", "initContainers"):
        for i, container in enumerate(e.containers(comp, key)):
            if obj(container.get("resources")).get("claims"):
                return f"{at}.podTemplate.spec.{key}[{i}].resources.claims"
    return None


def _elastic_ep(backend: str, comp: dict[str, Any], at: str) -> list[FieldError]:
    """``validateElasticEPRequiresCommand`` (shared_helpers.go@2a6da14c:179-205) with
    ``dynamo.IsElasticEPRayLaunch`` (internal/dynamo/backend_vllm.go@2a6da14c:569, utils.go:105)."""
    index = e.main_index(comp)
    if backend != "vllm" or index < 0:
        return []
    main = e.containers(comp)[index]
    if main.get("command"):
        return []
    words = [w for arg in (main.get("args") or []) for w in str(arg).split()]
    ray = any(_has_arg(words, flag, "ray") for flag in ("--data-parallel-backend", "-dpb"))
    if "--enable-elastic-ep" not in words or not ray:
        return []
    return [required(f"{at}.podTemplate.spec.containers[{index}].command", (
        "elastic expert parallelism (--enable-elastic-ep with --data-parallel-backend ray) requires an explicit "
        "container command; the operator starts the single-pod Ray head by wrapping that command and cannot "
        "start it from the image ENTRYPOINT"), "elastic_ep_command")]


def _has_arg(words: list[str], flag: str, value: str) -> bool:
    return any(f"{flag} {value}" in w or f"{flag}={value}" in w or (w == flag and i + 1 < len(words)
               and words[i + 1] == value) for i, w in enumerate(words))


def _shared_spec(comp, at, pathway, provider, cluster, runtime_versions) -> list[FieldError]:
    """``validateDynamoComponentDeploymentSharedSpec`` (shared_v1beta1.go@2a6da14c:68-187)."""
    out: list[FieldError] = []
    if isinstance(comp.get("providerOverride"), dict):  # :76
        out += validate_provider_override(comp["providerOverride"], f"{at}.providerOverride", provider, "component",
                                          comp)
    if comp.get("minAvailable") is not None and not pathway:  # :90
        out.append(forbidden(f"{at}.minAvailable", "is currently supported only for Grove-backed "
                             "DynamoGraphDeployment components", "grove_pathway"))
    multinode = comp.get("multinode")
    for role in ("leader", "worker"):  # :98 -> :284-353
        override = obj(obj(obj(multinode).get(role)).get("providerOverride"))
        if override:
            out += validate_provider_override(override, f"{at}.multinode.{role}.providerOverride", provider,
                                              f"multinode.{role}", comp)
    shm = comp.get("sharedMemorySize")
    if shm is not None and _negative(shm):  # :109
        out.append(invalid(f"{at}.sharedMemorySize", str(shm), "must be non-negative", "shared_memory_size"))
    if comp.get("type") == "epp":  # :117
        if cluster.inference_pool is False:
            out.append(forbidden(f"{at}.type", "cannot deploy EPP component: InferencePool API group "
                                 "(inference.networking.k8s.io) is not available in the cluster; install the Gateway "
                                 "API Inference Extension before deploying EPP components", "epp"))
        if e.nodes(comp) > 1:
            out.append(forbidden(f"{at}.multinode", "EPP component cannot be multinode", "epp"))
        if comp.get("replicas") is not None and comp["replicas"] != 1:
            out.append(invalid(f"{at}.replicas", comp["replicas"], "EPP component must have exactly 1 replica", "epp"))
        if comp.get("eppConfig") is None:
            out.append(required(f"{at}.eppConfig", "is required for EPP components", "epp"))
    ref = obj(comp.get("eppConfig")).get("configMapRef")
    if isinstance(ref, dict) and not ref.get("name"):  # :137 -> :355-364
        out.append(required(f"{at}.eppConfig.configMapRef.name", "is required", "epp"))
    if comp.get("frontendSidecar") is not None:  # :141
        sidecar = comp["frontendSidecar"]
        if not isinstance(comp.get("podTemplate"), dict):
            out.append(required(f"{at}.podTemplate.spec.containers", "is required when frontendSidecar is set",
                                "frontend_sidecar"))
        elif sidecar == "":
            out.append(invalid(f"{at}.frontendSidecar", sidecar, "must not be empty", "frontend_sidecar"))
        elif not any(c.get("name") == sidecar for c in e.containers(comp)):
            out.append(invalid(f"{at}.frontendSidecar", sidecar, "must match a podTemplate.spec.containers name",
                               "frontend_sidecar"))
    exp = e.experimental(comp)
    if exp is not None:  # :159
        out += experimental(exp, f"{at}.experimental", comp, pathway, cluster)
    if runtime_versions:  # :173
        index = e.main_index(comp)
        image = str(e.containers(comp)[index].get("image") or "") if index >= 0 else ""
        where = f"{at}.podTemplate.spec.containers" + (f"[{index}].image" if index >= 0 else "")
        if not image:
            out.append(required(where, "is required", "main_image"))
        elif override_required(image, str(comp.get("runtimeVersionOverride") or "")):
            out.append(required(f"{at}.runtimeVersionOverride", RUNTIME_VERSION, "runtime_version"))
    return out


def _negative(value: Any) -> bool:
    try:
        return Quantity(str(value)).value < 0
    except ValueError:
        return False  # the schema's quantity pattern refuses it first


def _restart_strategy(strategy: dict[str, Any], names: set[Any]) -> list[FieldError]:
    """``validateRestartStrategy`` (dynamographdeployment.go@2a6da14c:479-511)."""
    order = list(strategy.get("order") or [])
    at = "spec.restart.strategy.order"
    if not order:
        return []
    if strategy.get("type") == "Parallel":
        return [forbidden(at, "cannot be specified when strategy is parallel", "restart_order")]
    out = []
    unique = list(dict.fromkeys(order))
    if len(unique) != len(order):
        out.append(invalid(at, order, "must be unique", "restart_order"))
    if len(unique) != len(names):
        out.append(invalid(at, order, "must have the same number of unique components as the deployment",
                           "restart_order"))
    for i, name in enumerate(order):
        if name not in names:
            out.append(not_supported(f"{at}[{i}]", name, sorted(str(n) for n in names), "restart_order"))
    return out


def _topology(spec, comps, generation, pathway, cluster) -> list[FieldError]:
    """The topology constraints (dynamographdeployment.go@2a6da14c:318-384, shared_v1beta1.go:368-399).
    The ClusterTopologyBinding look-ups run only where ``cluster.topologies`` says what the cluster has."""
    tc = spec.get("topologyConstraint")
    component_tc = [i for i, c in enumerate(comps) if c.get("topologyConstraint") is not None]
    if tc is None and not component_tc:
        return []
    if tc is None:
        return [required("spec.topologyConstraint", "is required when any component topology constraint is set",
                         "topology_constraint")]
    tc, out = obj(tc), []
    if not tc.get("packDomain") and not component_tc:
        out.append(required("spec.topologyConstraint.packDomain", "is required when no component topologyConstraint "
                            "is set", "topology_constraint"))
    name, levels = tc.get("clusterTopologyName"), None
    if name and generation <= 1 and pathway and cluster.topologies is not None:
        levels = cluster.topologies.get(name)
        if levels is None:
            out.append(invalid("spec.topologyConstraint.clusterTopologyName", name, "references a "
                               "ClusterTopologyBinding resource that was not found", "topology_constraint"))
    if levels is None:
        return out
    shown = "[" + " ".join(sorted(levels)) + "]"
    if tc.get("packDomain") and tc["packDomain"] not in levels:
        out.append(invalid("spec.topologyConstraint.packDomain", tc["packDomain"],
                           f'does not exist in ClusterTopologyBinding "{name}"; available domains: {shown}',
                           "topology_constraint"))
    for i in component_tc:
        domain = obj(comps[i].get("topologyConstraint")).get("packDomain")
        where = f"spec.components[{i}].topologyConstraint.packDomain"
        if domain not in levels:
            out.append(invalid(where, domain, f'does not exist in ClusterTopology "{name}"; available domains: '
                               f"{shown}", "topology_constraint"))
        elif tc.get("packDomain") in levels and levels.index(domain) < levels.index(tc["packDomain"]):
            out.append(invalid(where, domain, "must be equal to or narrower than the deployment-level domain "
                               f'"{tc["packDomain"]}"', "topology_constraint"))
    return out


def _kv_transfer_policy(policy, generation, pathway, why, cluster) -> list[FieldError]:
    """``validateKvTransferPolicy`` (dynamographdeployment.go@2a6da14c:554-597)."""
    name, at = policy["clusterTopologyName"], "spec.experimental.kvTransferPolicy.clusterTopologyName"
    out = []
    problems = []
    if len(name) > 253:
        problems.append("must be no more than 253 characters")
    if not _DNS1123.match(name):
        problems.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                        "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                        r"for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    if problems:
        out.append(invalid(at, name, "; ".join(problems), "kv_transfer_policy"))
    if not pathway:
        out.append(forbidden(at, why, "grove_pathway"))
    if out or generation > 1 or cluster.topologies is None:
        return out
    levels = cluster.topologies.get(name)
    if levels is None:
        return [invalid(at, name, "references a ClusterTopologyBinding resource that was not found",
                        "kv_transfer_policy")]
    if policy.get("domain") not in levels:
        return [invalid("spec.experimental.kvTransferPolicy.domain", policy.get("domain"), (
            f'does not exist in ClusterTopologyBinding "{name}"; available domains: [{" ".join(sorted(levels))}]'),
            "kv_transfer_policy")]
    return []
