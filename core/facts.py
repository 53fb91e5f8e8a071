"""The facts about Dynamo that everything else is built on: its releases and what changes between
them, its engines, and its Frontend's router modes. The lowest module of the core: it imports nothing
of ours.

Only facts that change what we render or what we warn about live here. Thresholds are the
first release that behaves the new way."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_SEMVER = re.compile(r"^(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:[-.+].*)?$")

# The releases the form offers: the newest patch of each release line. Where a release is chosen
# (the create form and its API, an import's target release) it must be known (known_release).
KNOWN_RELEASES = ["1.6.1", "1.5.1", "1.4.2", "1.3.1", "1.2.1", "1.1.1", "1.0.2", "0.9.1", "0.8.1", "0.7.1", "0.5.1"]
LATEST = KNOWN_RELEASES[0]


@total_ordering
@dataclass(frozen=True)
class DynamoVersion:
    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> DynamoVersion:
        match = _SEMVER.match(str(text).strip().lstrip("v"))
        if not match:
            raise ValueError(f"{text!r} is not a Dynamo version: expected MAJOR.MINOR.PATCH, e.g. {LATEST}")
        return cls(*(int(g) for g in match.groups()))

    def __lt__(self, other: DynamoVersion) -> bool:
        return (self.major, self.minor, self.patch) < (other.major, other.minor, other.patch)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def known_release(text: str) -> str:
    """``text`` as a Dynamo release this control plane knows: a listed release line, at or below
    its newest listed patch (1.6.0 and 1.6.1 are; 9.9.9 and 1.6.7 are not, and their images do
    not exist, so a cluster would pull nothing). Raises ValueError naming the known releases."""
    version = DynamoVersion.parse(text)
    for known in map(DynamoVersion.parse, KNOWN_RELEASES):
        if (known.major, known.minor) == (version.major, version.minor) and version.patch <= known.patch:
            return str(version)
    raise ValueError(f"{version} is not a known Dynamo release: the known releases are {', '.join(KNOWN_RELEASES)}")


def known_release_pattern() -> str:
    """A regular expression of exactly the releases known_release accepts (for API schemas)."""
    lines = []
    for known in map(DynamoVersion.parse, KNOWN_RELEASES):
        patches = "|".join(str(p) for p in range(known.patch + 1))
        lines.append(rf"{known.major}\.{known.minor}\.(?:{patches})")
    return "^v?(?:" + "|".join(lines) + ")$"


def _v(text: str) -> DynamoVersion:
    return DynamoVersion.parse(text)


# Upstream evidence below is cited as <file>:<line>@2a6da14c (github.com/ai-dynamo/dynamo, 2026-08-21).

# dynamo.vllm and dynamo.mocker accept --disaggregation-mode prefill|decode|agg since 1.0.0
# (ai-dynamo/dynamo#6483, merged 2026-02-23, in the v1.0.0 release notes); --is-prefill-worker and
# --is-decode-worker stayed as deprecated aliases until dynamo.vllm 1.4.0 removed them (#12089,
# merged 2026-07-24). components/src/dynamo/vllm/backend_args.py:80-89@2a6da14c.
DISAGGREGATION_MODE_SINCE = _v("1.0.0")
LEGACY_ROLE_FLAGS_REMOVED = _v("1.4.0")
# From 1.0.0 a vLLM prefill worker refuses to start without --kv-transfer-config (#6450 removed
# --connector, merged 2026-02-24): components/src/dynamo/vllm/args.py:230-246@2a6da14c.
KV_TRANSFER_CONFIG_REQUIRED_SINCE = _v("1.0.0")
# DGD nvidia.com/v1beta1 is served from 1.2.0 (#8647, which also marks v1alpha1 deprecated:
# deploy/operator/api/v1alpha1/dynamographdeployment_types.go:346@2a6da14c) and is the storage
# version from 1.5.0 (#11904: deploy/operator/api/v1beta1/dynamographdeployment_types.go:177@2a6da14c).
V1BETA1_SINCE = _v("1.2.0")
V1BETA1_STORAGE_SINCE = _v("1.5.0")
# The operator mounts a Memory emptyDir at /dev/shm on every component, 8Gi unless
# sharedMemorySize says otherwise, none when it is 0 (#2616, merged 2025-08-24, first cut into
# 0.5.0): deploy/operator/internal/dynamo/shared_memory.go:27-51@2a6da14c and
# deploy/operator/internal/consts/consts.go:203-205@2a6da14c. Before it, the size came from the
# container's memory limit, 64Mi without one.
SHM_DEFAULT_SINCE = _v("0.5.0")
OPERATOR_DEFAULT_SHM_BYTES = 8 * 2**30
OPERATOR_DEFAULT_SHM = "8Gi"
# Since 1.1.0 (#7309, merged 2026-03-18) the operator drops a user's own /dev/shm mount on the
# main container and mounts its own (shared_memory.go:53-74@2a6da14c); before, both mounts were
# kept and Kubernetes refused the pod ("mountPath must be unique").
SHM_MOUNT_REPLACED_SINCE = _v("1.1.0")
# Images moved the backends from /workspace/components/backends to /workspace/examples/backends
# (#3849, merged 2025-10-31 after the 0.6.1 branch, first in 0.7.0).
EXAMPLES_WORKDIR_SINCE = _v("0.7.0")
# Engines whose Dynamo wrapper took --is-prefill-worker before DISAGGREGATION_MODE_SINCE.
# SGLang and TensorRT-LLM always used --disaggregation-mode (their engines' own flag).
LEGACY_PREFILL_FLAG_ENGINES = {"vllm", "mocker"}
# Environment variables that set a worker's role like its flag does (the flag wins):
# components/src/dynamo/vllm/backend_args.py:83@2a6da14c, components/src/dynamo/trtllm/backend_args.py:215@2a6da14c;
# DYN_VLLM_IS_PREFILL_WORKER / DYN_VLLM_IS_DECODE_WORKER from 1.0.0 until #12089 (1.4.0).
ROLE_ENV = {"vllm": "DYN_VLLM_DISAGGREGATION_MODE", "trtllm": "DYN_TRTLLM_DISAGGREGATION_MODE"}
LEGACY_ROLE_ENV = {"DYN_VLLM_IS_PREFILL_WORKER": "prefill", "DYN_VLLM_IS_DECODE_WORKER": "decode"}

# The engines a worker runs, each declared once: the create form's and the API's backend choices
# are these keys (core.spec.Engine names the same ones as a type; tests/graphs/test_pydantic_fields.py).
ENGINES = {
    "vllm": {"module": "dynamo.vllm", "image": "vllm-runtime", "gpu": True, "model_flag": "--model",
             "title": "vLLM"},
    "sglang": {"module": "dynamo.sglang", "image": "sglang-runtime", "gpu": True, "model_flag": "--model-path",
               "title": "SGLang"},
    "trtllm": {"module": "dynamo.trtllm", "image": "tensorrtllm-runtime", "gpu": True, "model_flag": "--model-path",
               "title": "TensorRT-LLM"},
    "mocker": {"module": "dynamo.mocker", "image": "dynamo-planner", "gpu": False, "model_flag": "--model-path",
               "title": "Mocker (no GPU)"},
}


# The Frontend's router (dynamo.frontend --router-mode, or env DYN_ROUTER_MODE). Its choices are
# dynamo.frontend 1.6.1's, read from the wheel's
# RouterArgGroup and KvRouterArgGroup (tests/core/test_router_mode.py holds them to the installed
# wheel). "kv" routes a prompt to the worker whose KV cache holds most of its prefix.
ROUTER_MODES = ("round-robin", "random", "power-of-two", "kv", "direct", "least-loaded", "device-aware-weighted")
DEFAULT_ROUTER_MODE = "round-robin"
ROUTER_MODE_ENV = "DYN_ROUTER_MODE"


def uses_disaggregation_mode(version: DynamoVersion, engine: str) -> bool:
    return engine not in LEGACY_PREFILL_FLAG_ENGINES or version >= DISAGGREGATION_MODE_SINCE


def default_image(engine: str, version: DynamoVersion) -> str:
    return f"nvcr.io/nvidia/ai-dynamo/{ENGINES[engine]['image']}:{version}"


def default_workdir(engine: str, version: DynamoVersion) -> str:
    if engine == "mocker":
        return "/workspace"
    base = "examples" if version >= EXAMPLES_WORKDIR_SINCE else "components"
    return f"/workspace/{base}/backends/{engine}"


_TAG = re.compile(r":v?(\d{1,4}\.\d{1,4}\.\d{1,4})(?:[-.+][\w.]*)?$")


def version_from_image(image: str | None) -> DynamoVersion | None:
    """The Dynamo release an image tag names, if it names one (``vllm-runtime:0.5.1``)."""
    if not image:
        return None
    match = _TAG.search(image.split("@")[0])
    return DynamoVersion.parse(match.group(1)) if match else None
