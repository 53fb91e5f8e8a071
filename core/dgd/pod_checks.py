"""What the Dynamo operator puts in a component's pod that a manifest can get wrong: the
/dev/shm it mounts and the GPUs it counts. Each rule follows the operator's code at
ai-dynamo/dynamo 2a6da14c (cited as file:line@2a6da14c) and the release that brought it
(core/facts.py)."""

from __future__ import annotations

from typing import Any

from core.dgd.commandline import engine_of
from core.facts import (
    ENGINES,
    OPERATOR_DEFAULT_SHM,
    OPERATOR_DEFAULT_SHM_BYTES,
    SHM_DEFAULT_SINCE,
    SHM_MOUNT_REPLACED_SINCE,
    DynamoVersion,
)
from core.findings import Finding, Severity
from core.spec import Service, quantity_bytes

GI = 2**30
SHM_MOUNT = "/dev/shm"  # deploy/operator/internal/consts/consts.go:204@2a6da14c
# Tensor-parallel NCCL and NIXL stage buffers in /dev/shm; below this they run out of room
# (ai-dynamo/dynamo#1408).
MIN_SHM_BYTES = 1 * GI
RECOMMENDED_SHM = "16Gi"
# The size containerd and Docker give /dev/shm when nothing is mounted there.
RUNTIME_DEFAULT_SHM = "64Mi"


def shm_field(alpha: bool) -> str:
    return "sharedMemory.size" if alpha else "sharedMemorySize"


def _disabled(service: Service) -> bool:
    try:
        return service.shared_memory is not None and quantity_bytes(service.shared_memory) == 0
    except ValueError:
        return False


def expected_shm_bytes(service: Service, version: DynamoVersion) -> int | None:
    """The /dev/shm the operator of ``version`` mounts for ``service``: its size, 8Gi when unset
    (shared_memory.go:28@2a6da14c, since SHM_DEFAULT_SINCE); None when it mounts none (size 0,
    shared_memory.go:30-31@2a6da14c), when an older operator sized it from the memory limit, or
    when the size does not parse."""
    if service.shared_memory is None:
        return OPERATOR_DEFAULT_SHM_BYTES if version >= SHM_DEFAULT_SINCE else None
    try:
        amount = int(quantity_bytes(service.shared_memory))
    except ValueError:
        return None
    return amount or None


def _shm_mount(service: Service) -> tuple[int, dict[str, Any]] | None:
    """(index, mount) of the main container's own volumeMount at /dev/shm."""
    mounts = service.container_extra.get("volumeMounts") or []
    for i, mount in enumerate(mounts if isinstance(mounts, list) else []):
        if isinstance(mount, dict) and str(mount.get("mountPath", "")).rstrip("/") == SHM_MOUNT:
            return i, mount
    return None


def _volume(service: Service, name: Any) -> dict[str, Any]:
    volumes = service.pod_extra.get("volumes") or []
    return next((v for v in volumes if isinstance(v, dict) and v.get("name") == name), {}) \
        if isinstance(volumes, list) else {}


def shm_findings(service: Service, paths, target: DynamoVersion) -> list[Finding]:
    """/dev/shm as the target release's operator mounts it, for any component."""
    field = shm_field(paths.alpha)
    out = _shm_size(service, paths, target, field) if service.is_worker else []
    mounted = _shm_mount(service)
    if mounted is None or _disabled(service):
        # sharedMemorySize 0: the operator mounts nothing and leaves the user's own /dev/shm
        # mount in place (shared_memory.go:53-57@2a6da14c): that is how to bring one's own volume.
        return out
    index, mount = mounted
    path = f"{paths.container(service)}.volumeMounts[{index}]"
    size = service.shared_memory or OPERATOR_DEFAULT_SHM
    if target < SHM_MOUNT_REPLACED_SINCE:
        out.append(Finding(
            Severity.ERROR, "shm_mount_conflict", path,
            f"{service.name} mounts its own volume at /dev/shm, and the Dynamo {target} operator adds its "
            "shared-memory volume at the same path: Kubernetes refuses the pod (mountPath must be unique)",
            f"remove the mount and set {field}: {size}, or set {field}: 0 to keep your own volume"))
        return out
    empty = _volume(service, mount.get("name")).get("emptyDir")
    limit = empty.get("sizeLimit") if isinstance(empty, dict) else None
    try:
        larger = limit is not None and quantity_bytes(limit) > quantity_bytes(size)
    except ValueError:
        larger = False
    if larger:
        out.append(Finding(
            Severity.WARNING, "shm_mount_replaced", path,
            f"{service.name} mounts a {limit} volume at /dev/shm, but the operator replaces a container's "
            f"own /dev/shm mount with its shared-memory volume: the worker gets {size}, not {limit}",
            f"set {field}: {limit} and remove the volume and its mount"))
    else:
        out.append(Finding(
            Severity.INFO, "shm_mount_replaced", path,
            f"the operator replaces {service.name}'s own /dev/shm mount with its shared-memory volume "
            f"({size}); the volume is unused",
            f"remove the volume and its mount; {field} sets the size"))
    return out


def _shm_size(service: Service, paths, target: DynamoVersion, field: str) -> list[Finding]:
    path = paths.shm(service)
    size = service.shared_memory
    if size is None:
        if target >= SHM_DEFAULT_SINCE:
            return []  # the operator's 8Gi (shared_memory.go:28@2a6da14c)
        return [Finding(
            Severity.WARNING, "shm_unset", path,
            f"{service.name} does not set its shared memory: operators before Dynamo {SHM_DEFAULT_SINCE} size "
            "/dev/shm from the container's memory limit, 64Mi without one, too little for NCCL and NIXL",
            f"set {field}: {RECOMMENDED_SHM}")]
    try:
        amount = quantity_bytes(size)
    except ValueError:
        return []  # the schema check reports the format
    if not _transfers_through_shm(service):
        return []
    if amount == 0:
        if _shm_mount(service) is not None:
            return []  # the container's own volume is /dev/shm
        disagg = service.role in ("prefill", "decode")
        return [Finding(
            Severity.ERROR if disagg else Severity.WARNING, "shm_disabled", path,
            f"{service.name} turns the operator's shared memory off and mounts nothing at /dev/shm: it gets the "
            f"container runtime's {RUNTIME_DEFAULT_SHM}, on which NCCL and NIXL KV transfer run out of room",
            f"set {field}: {RECOMMENDED_SHM}")]
    if amount < MIN_SHM_BYTES:
        return [Finding(
            Severity.ERROR, "shm_too_small", path,
            f"{service.name} gets only {size} of /dev/shm: NIXL needs at least 1Gi, and tensor-parallel "
            "NCCL runs out of space on small /dev/shm (ai-dynamo/dynamo#1408)",
            f"set it to {RECOMMENDED_SHM}")]
    return []


def _transfers_through_shm(service: Service) -> bool:
    """Whether the worker's engine stages NIXL KV transfer or tensor-parallel NCCL in /dev/shm.
    An engine that runs without GPUs (the ENGINES table: Dynamo's mocker) does neither: it only
    simulates the KV transfer's latency (--kv-transfer-bandwidth, dynamo/mocker/args.py:573-585 of
    the ai-dynamo 1.6.1 wheel), so a small /dev/shm costs it nothing. An engine not recognised
    from the command line is held to the rule."""
    engine = engine_of(service.command, service.args)
    return engine is None or bool(ENGINES.get(engine, {}).get("gpu", True))


# ------------------------------------------------------------------------------------ GPUs


def is_gpu_resource(name: str) -> bool:
    """deploy/operator/internal/dra/dra.go:387-393@2a6da14c (isGPUResourceName)."""
    name = str(name).lower()
    return name in ("nvidia.com/gpu", "gpu") or name.endswith("/gpu") or "/mig-" in name or name.startswith("gpu.")


def _alpha_list(part: Any) -> dict[str, Any]:
    """A v1alpha1 ResourceItem (cpu, memory, gpu, custom) as a Kubernetes resource list."""
    if not isinstance(part, dict):
        return {}
    out = {k: v for k, v in (part.get("custom") or {}).items()} if isinstance(part.get("custom"), dict) else {}
    if "gpu" in part:
        out["nvidia.com/gpu"] = part["gpu"]
    return out


def main_container_resources(service: Service, alpha: bool) -> tuple[dict, dict, list]:
    """(limits, requests, claims) of the main container as the operator builds it: v1alpha1's
    resources first, extraPodSpec.mainContainer.resources merged over them key by key
    (deploy/operator/api/v1alpha1/shared_spec_conversion.go:1482-1503,1545-1548@2a6da14c)."""
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    claims: list = []
    if alpha:
        dedicated = service.extra_v1alpha1.get("resources") or {}
        limits.update(_alpha_list(dedicated.get("limits")))
        requests.update(_alpha_list(dedicated.get("requests")))
        claims += dedicated.get("claims") or []
    if service.gpus is not None:
        limits["nvidia.com/gpu"] = service.gpus
    main = service.container_extra.get("resources") or {}
    if isinstance(main, dict):
        limits.update(main.get("limits") or {})
        requests.update(main.get("requests") or {})
        claims += main.get("claims") or []
    return limits, requests, claims


def gpu_count(service: Service, alpha: bool) -> int | None:
    """The GPUs the operator counts for the main container: a GPU resource in its limits, else
    in its requests (dra.go:103-111@2a6da14c); None when it asks for devices through DRA
    ResourceClaims, resolved from a ResourceClaimTemplate this manifest does not hold
    (dra.go:116-170@2a6da14c), or when the count does not parse."""
    limits, requests, claims = main_container_resources(service, alpha)
    for resources in (limits, requests):
        names = sorted(k for k in resources if is_gpu_resource(k))
        if names:
            try:
                return int(str(resources[names[0]]))
            except ValueError:
                return None
    return None if claims else 0


def other_containers_ask_for_gpus(service: Service) -> bool:
    """An engine in a sidecar (an init container with restartPolicy Always, or a second
    container) that holds the pod's GPUs, as upstream's lib/sidecar deployments do."""
    pod = service.pod_extra
    for key in ("containers", "initContainers"):
        for container in pod.get(key) or []:
            resources = (container or {}).get("resources") or {} if isinstance(container, dict) else {}
            lists = [resources.get("limits") or {}, resources.get("requests") or {}]
            if any(is_gpu_resource(k) for part in lists if isinstance(part, dict) for k in part) or \
                    resources.get("claims"):
                return True
    return False


# deploy/operator/internal/dynamo/component_common.go:82@2a6da14c: every component's pod gets
# terminationGracePeriodSeconds 60 unless its pod template says otherwise.
OPERATOR_GRACE_SECONDS = 60
# lib/runtime/src/config.rs:36-60@2a6da14c (WorkerConfig, env prefix DYN_WORKER_): on SIGTERM a
# worker leaves discovery, then waits up to this long for its in-flight requests (release build).
WORKER_SHUTDOWN_SECONDS = 30
SHUTDOWN_ENV = "DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT"
# components/src/dynamo/common/utils/graceful_shutdown.py:15-18@2a6da14c: a vLLM or TensorRT-LLM
# worker (vllm/main.py:250, trtllm/main.py) waits this long after leaving discovery before it
# stops its endpoints and starts the wait above, so that frontends stop routing to it first.
GRACE_PERIOD_SECONDS = 5
GRACE_PERIOD_ENV = "DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS"
GRACE_PERIOD_ENGINES = ("vllm", "trtllm")


def _whole_seconds(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def drain_findings(service: Service, path: str) -> list[Finding]:
    """A worker stopped by a scale-down or a rollout is SIGKILLed when its pod's grace period ends,
    whatever its own shutdown still waits for: the requests it serves then end in errors
    (ai-dynamo/dynamo#13559). Compared: the pod's grace period and the worker's shutdown budget
    (its engine's grace period, then its wait for in-flight requests)."""
    grace = _whole_seconds(service.pod_extra.get("terminationGracePeriodSeconds", OPERATOR_GRACE_SECONDS))
    values = {e.get("name"): e.get("value") for e in service.env if isinstance(e, dict)}
    written = values.get(SHUTDOWN_ENV)
    budget = _whole_seconds(written) if written is not None else WORKER_SHUTDOWN_SECONDS
    pause = 0
    if engine_of(service.command, service.args) in GRACE_PERIOD_ENGINES:
        pause = _whole_seconds(values.get(GRACE_PERIOD_ENV, GRACE_PERIOD_SECONDS))
        pause = GRACE_PERIOD_SECONDS if pause is None else max(0, pause)
    if grace is None or budget is None or grace > budget + pause:
        return []
    waits = f"up to {budget} s" if not pause else f"{pause} s ({GRACE_PERIOD_ENV}) and then up to {budget} s"
    where = "terminationGracePeriodSeconds" if "terminationGracePeriodSeconds" in service.pod_extra else \
        f"terminationGracePeriodSeconds (the operator's default, {OPERATOR_GRACE_SECONDS})"
    return [Finding(
        Severity.WARNING, "drain_cut", path,
        f"a {service.name} worker stopped by a scale-down or a rollout is killed {grace} s after SIGTERM "
        f"({where}), while its own shutdown waits {waits} for the requests it serves "
        f"({SHUTDOWN_ENV}{'' if written is not None else ', default'}): a request still running at {grace} s "
        "is cut with an error",
        f"give the pod a terminationGracePeriodSeconds above {budget + pause} (for example {budget + pause + 30}), "
        f"or lower {SHUTDOWN_ENV} below {grace - pause}")]
