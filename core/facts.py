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

# The releases the form offers. Any MAJOR.MINOR.PATCH is accepted through the API.
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


def _v(text: str) -> DynamoVersion:
    return DynamoVersion.parse(text)


# dynamo.vllm dropped --is-prefill-worker for --disaggregation-mode prefill|decode
# (ai-dynamo/dynamo#12089, merged 2026-07-24, first shipped in 1.4.0).
DISAGGREGATION_MODE_SINCE = _v("1.4.0")
# DGD nvidia.com/v1beta1 is served from 1.3 and the storage version from 1.4 (#8647, #11904).
V1BETA1_SINCE = _v("1.3.0")
# Images moved the backends from /workspace/components/backends to /workspace/examples/backends.
EXAMPLES_WORKDIR_SINCE = _v("1.0.0")
# Engines whose Dynamo wrapper took --is-prefill-worker before DISAGGREGATION_MODE_SINCE.
# SGLang and TensorRT-LLM always used --disaggregation-mode (their engines' own flag).
LEGACY_PREFILL_FLAG_ENGINES = {"vllm", "mocker"}

ENGINES = {
    "vllm": {"module": "dynamo.vllm", "image": "vllm-runtime", "gpu": True, "model_flag": "--model"},
    "sglang": {"module": "dynamo.sglang", "image": "sglang-runtime", "gpu": True, "model_flag": "--model-path"},
    "trtllm": {"module": "dynamo.trtllm", "image": "tensorrtllm-runtime", "gpu": True, "model_flag": "--model-path"},
    "mocker": {"module": "dynamo.mocker", "image": "dynamo-planner", "gpu": False, "model_flag": "--model-path"},
}


# The Frontend's router (dynamo.frontend --router-mode, or env DYN_ROUTER_MODE). Its choices are
# dynamo.frontend 1.6.1's, read from the wheel's
# RouterArgGroup and KvRouterArgGroup (tests/test_router_mode.py holds them to the installed
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
