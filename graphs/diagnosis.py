"""Plain-language diagnosis of a deployed graph, from the status cache only: what is stuck
and the fix. Shared by the local and Kubernetes runtimes (they report pods the same way)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.dgd.pod_checks import expected_shm_bytes

from .runtimes.local.hostlimits import (
    INOTIFY_PER_FRONTEND,
    INOTIFY_RAISE,
    explains_too_many_open_files,
    inotify_in_use,
    inotify_limit,
)
from .runtimes.registry import on_cluster, on_this_host

SHM_DEFAULT_BYTES = 64 * 2**20
_GPU_SHORTAGE = re.compile(r"(\d+)/(\d+) nodes are available.*Insufficient nvidia\.com/gpu")


@dataclass
class Diagnosis:
    severity: str  # error or warning
    title: str
    detail: str
    fix: str = ""
    log: str = ""


def _free_gpus(deployment) -> int | None:
    """Free GPUs on the deployment's cluster as its watcher last saw them (None: unknown)."""
    if not on_cluster(deployment) or not deployment.cluster_name:
        return None
    return deployment.cluster.gpu_free


def _size(n: int) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n} B"


def _expected_shm(spec, service_name: str) -> int | None:
    """What the target release's operator mounts at /dev/shm for the service (core/dgd/pod_checks.py):
    its size, 8Gi when unset since Dynamo 0.5.0; None when it mounts none or sizes it from the
    memory limit (older operators)."""
    service = next((s for s in spec.services if s.name == service_name), None) if spec else None
    return expected_shm_bytes(service, spec.version) if service is not None else None


def _shm(deployment, pod, spec) -> list[Diagnosis]:
    """/dev/shm as the worker sees it against what the operator mounts for its spec."""
    requested = _expected_shm(spec, pod.service)
    measured = pod.shm_bytes
    disagg = pod.role in ("prefill", "decode")
    where = f" ({pod.shm_source})" if getattr(pod, "shm_source", "") else ""
    local = on_this_host(deployment)
    if requested and measured < requested * 0.99:  # tmpfs sizes round to pages
        title = (f"{pod.name} runs on the 64 MB default /dev/shm" if measured <= SHM_DEFAULT_BYTES
                 else f"{pod.name} has less /dev/shm than its spec asks")
        detail = (f"Its spec asks for {_size(requested)} of /dev/shm; the worker sees {_size(measured)}{where}. "
                  "NIXL and NCCL stage KV-transfer buffers in /dev/shm. " + (
                      "This host's /dev/shm is smaller than the spec asks." if local else
                      "The Dynamo operator mounts a memory-backed emptyDir of the spec's size at /dev/shm (8Gi when "
                      "unset, since Dynamo 0.5.0) and replaces a /dev/shm mount of the container's own, so this pod "
                      "was not made from this spec by such an operator: it predates the spec, or the cluster runs "
                      "an older operator."))
        fix = ("Give this host a larger /dev/shm (mount -o remount,size=16G /dev/shm, or docker run --shm-size=16g) "
               "or lower the spec's shared memory to what it has." if local else
               "Apply again so the pods are recreated, and check the operator's version. Set the size with "
               "sharedMemory.size (v1alpha1) or sharedMemorySize (v1beta1), not with a volume of your own: the "
               "operator replaces a /dev/shm mount of the main container's own.")
        return [Diagnosis("error" if disagg else "warning", title, detail, fix)]
    if disagg and measured <= SHM_DEFAULT_BYTES:
        return [Diagnosis("warning", f"{pod.name} runs on the 64 MB default /dev/shm",
                          "NIXL and NCCL stage KV-transfer buffers in /dev/shm; 64 MB is too little for them.",
                          "Set sharedMemory.size (v1alpha1) or sharedMemorySize (v1beta1) to 16Gi.")]
    return []


def _too_many_open_files(deployment, pod) -> Diagnosis:
    """"Too many open files" from a Dynamo process is, far more often than the descriptor limit,
    the kernel's per-user inotify limit: file discovery watches through inotify."""
    local = on_this_host(deployment)
    where = "this host" if local else "its node"
    limit = inotify_limit() if local else None
    known = f" ({limit} on this host, {inotify_in_use()} in use)" if limit is not None else ""
    return Diagnosis(
        "error", f"{pod.name} hit {where}'s inotify limit (fs.inotify.max_user_instances)",
        f"It exits with \"Too many open files\". Each Dynamo frontend with file discovery holds about "
        f"{INOTIFY_PER_FRONTEND} inotify instances, and the kernel allows fs.inotify.max_user_instances per user"
        f"{known}; at the default of 128 a host runs about 12 graphs. The descriptor limit (ulimit -n) is rarely the "
        "cause.", ("On this host, " if local else "On the node, ") + INOTIFY_RAISE + ", or delete another graph.",
        pod.last_log)


# What a real engine's log names (graphs/runtimes/local/observe.py LOG_SIGNATURES sets the pod's
# reason), as a finding and its fix.
ENGINE_FAILURES = {
    "NoKVTransferConfig": (
        "error", "{pod} is a prefill worker without its KV-transfer configuration",
        "dynamo.vllm refuses --disaggregation-mode prefill without --kv-transfer-config (the NIXL default is gone "
        "since Dynamo 1.4), so the worker exits at start.",
        "Add --kv-transfer-config '{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_producer\"}}' to the "
        "prefill worker's args, then apply."),
    "NoKVConnector": (
        "error", "{pod} never receives a KV transfer",
        "It is a decode worker without a KV connector: vLLM logs \"Got kv_transfer_params, but no KVConnector "
        "found\" for each request, recomputes the whole prompt instead of taking the prefill worker's KV cache over "
        "NIXL, and the prefill worker holds its blocks until NIXL's abort timeout.",
        "Give the decode worker --kv-transfer-config '{{\"kv_connector\":\"NixlConnector\",\"kv_role\":"
        "\"kv_consumer\"}}' (or kv_both), then apply."),
    "NotEnoughMemory": (
        "error", "{pod} cannot get its memory",
        "vLLM on CPU could not reserve its KV cache: the host's available memory is below what the worker asks "
        "(VLLM_CPU_KVCACHE_SPACE, or --gpu-memory-utilization x RAM without it).",
        "Stop what holds the memory or lower the graph's worker replicas; each vLLM-on-CPU worker needs about "
        "3.4 GB."),
    "NoCoreOfItsOwn": (
        "error", "{pod} cannot get a CPU core of its own",
        "With a KV connector vLLM reserves one core for NIXL, and this host has too few: the worker runs its "
        "threads on every core, shared with the other workers, and a prefill/decode pair becomes unusably slow.",
        "Give each worker its own core (VLLM_CPU_OMP_THREADS_BIND, which the local runtime sets), or run fewer "
        "workers on this host."),
    "OutOfMemory": (
        "error", "{pod} ran out of memory", "The engine's process could not allocate memory.",
        "Lower the graph's worker replicas or stop what holds the host's memory."),
}


def _engine_failure(pod) -> Diagnosis | None:
    found = ENGINE_FAILURES.get(pod.reason)
    if found is None:
        return None
    severity, title, detail, fix = found
    return Diagnosis(severity, title.format(pod=pod.name), detail, fix, pod.last_log)


def _crash_loop(pod) -> Diagnosis:
    """What the restarts say: a signal that killed it is named as the cause; flags the local runtime
    ignored are never passed to the process, so they are not offered as one; log lines are
    promised only when there are some."""
    message, _, ignored = (pod.message or "").partition("ignored on the local runtime:")
    signal = re.search(r"killed by (SIG[A-Z]+)", message)
    detail = f"It exited and was restarted {pod.restarts} times"
    if signal:
        detail += (f"; it was killed by {signal.group(1)}, not an exit of its own"
                   + (": the kernel's out-of-memory killer, or a kill from outside the runtime"
                      if signal.group(1) == "SIGKILL" else ""))
    detail += f". {message.strip()}".rstrip(". ") + "."
    if ignored.strip():
        detail += f" (Not the cause: {ignored.strip()} was never passed to it, the local runtime ignores it.)"
    if signal and signal.group(1) == "SIGKILL":
        fix = "Check the host's memory (dmesg names the OOM killer's victims) and what else sends signals; then apply."
    else:
        fix = "Fix the command line or resources, then apply."
    fix = ("Read its last log lines below. " if pod.last_log.strip() else "Its log has no lines yet. ") + fix
    return Diagnosis("error", f"{pod.name} is crash-looping", detail, fix, pod.last_log)


def diagnose(deployment, pods) -> list[Diagnosis]:
    out: list[Diagnosis] = []
    revision = getattr(deployment, "revision", None)
    spec = revision.graph_spec if revision is not None else None
    if getattr(deployment, "state", "") == "failed" and deployment.message.startswith("not enough GPUs on this host"):
        out.append(Diagnosis("error", "Not enough GPUs on this host", deployment.message,
                             "Lower the GPU workers' replicas or GPUs per replica, or delete another local graph "
                             "that holds GPUs."))
    free_gpus = _free_gpus(deployment) if any(p.phase == "Pending" for p in pods) else None
    frontends = [p for p in pods if p.role == "frontend"]
    if getattr(deployment, "state", "") == "failed" and deployment.message.startswith(
            ("not enough CPU cores for vLLM on CPU", "not enough memory for vLLM on CPU")):
        what = "CPU cores" if "cores" in deployment.message.split(":")[0] else "memory"
        out.append(Diagnosis("error", f"Not enough {what} on this host for vLLM on CPU", deployment.message,
                             "Lower the graph's worker replicas, or delete another local vLLM graph; each "
                             "vLLM-on-CPU worker needs a core of its own and about 3.4 GB of memory."))
    if getattr(deployment, "state", "") == "failed" and "inotify" in deployment.message:
        out.append(Diagnosis("error", "The host's inotify instances are used up", deployment.message,
                             INOTIFY_RAISE[0].upper() + INOTIFY_RAISE[1:] + "."))
    for pod in pods:
        crashing = pod.phase == "CrashLoopBackOff" or (pod.restarts >= 3 and not pod.ready)
        engine_failure = _engine_failure(pod)
        if engine_failure is not None:
            out.append(engine_failure)
        elif crashing and explains_too_many_open_files(f"{pod.last_log}\n{pod.message}"):
            out.append(_too_many_open_files(deployment, pod))
        elif crashing:
            out.append(_crash_loop(pod))
        elif pod.phase == "Pending" and "Insufficient nvidia.com/gpu" in (pod.message or ""):
            detail = (f"It asks for {pod.gpus} GPU(s) and no node has them free. {pod.message}" if free_gpus is None
                      else f"It asks for {pod.gpus} GPUs, the nodes have {free_gpus} free: lower the replicas or "
                           f"add GPU nodes. {pod.message}")
            out.append(Diagnosis("error", f"{pod.name} cannot be scheduled: not enough GPUs", detail,
                                 "Lower this pool's replicas, or add GPU nodes."))
        elif pod.reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
            out.append(Diagnosis("error", f"{pod.name} cannot pull its image", pod.message,
                                 "Check the image name and tag, and the registry credentials (imagePullSecrets)."))
        elif pod.reason == "OOMKilled":
            out.append(Diagnosis("error", f"{pod.name} ran out of memory",
                                 "The container was killed for exceeding its memory limit; /dev/shm counts against it.",
                                 "Raise the memory limit or lower the shared memory size."))
        if pod.role in ("prefill", "decode", "worker") and pod.shm_bytes is not None:
            out += _shm(deployment, pod, spec)
    if frontends and all(p.ready for p in frontends) and deployment.message.startswith("frontend serves no model"):
        out.append(Diagnosis("warning", "The frontend is up but serves no model",
                             "No worker has registered with it yet, or every worker is down: /v1/models is empty.",
                             "Check that the decode (or aggregated) pool has ready workers."))
    elif not frontends and pods:
        out.append(Diagnosis("warning", "No frontend pod",
                             "Nothing serves the OpenAI-compatible API for this graph.", "Add a Frontend component."))
    return out
