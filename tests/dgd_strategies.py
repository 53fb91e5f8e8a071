"""Hypothesis strategies that build DynamoGraphDeployments from the real CRD schema.

The generator walks the openAPIV3Schema of core/crds/ for the requested API version, the
same schema the product validates against, so every field the CRD defines can turn up. On
top of the structural schema it keeps the rules the API server and the operator enforce and
a structural check cannot see, each written down below with where it comes from:

* list-type ``map`` lists have unique keys and ``set`` lists unique items (apiserver);
* component names are unique ignoring case (CEL on spec.components; the operator names
  child resources ``<dgd>-<lower(name)>``, so v1alpha1 map keys obey the same rule);
* a v1beta1 container other than ``main`` has an image (CEL), an init container always;
* ``minAvailable <= replicas`` unless replicas is 0 (CEL), at most one ``epp`` component and
  ``eppConfig`` only on it (CEL), v1alpha1 ``sharedMemory`` is disabled or has a size > 0 (CEL);
* quantities the operator parses as counts (GPUs) are whole numbers; shared-memory sizes
  are non-negative; Secret and ConfigMap names (envFromSecret, envFrom refs) are DNS
  subdomains, as the kubelet requires of a pod's env sources.

Fields guarded by CEL rules that span several sub-fields (``gpuMemoryService``,
``checkpoint``, ``experimental.kvTransferPolicy``) are not generated; the product copies
them verbatim like any other field it does not model.

Generation is biased towards the fields the typed spec models (roles, replicas, resources,
shared memory, the main container, env/envFrom, pod metadata), where a lossy import would
hide; elsewhere it draws a few optional fields per object with a depth budget."""

from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

from hypothesis import strategies as st

from core.schema import load_crd

V1ALPHA1 = "nvidia.com/v1alpha1"
V1BETA1 = "nvidia.com/v1beta1"

# Keys drawn with high probability wherever they appear: the paths the spec models.
FOCUS = {
    "componentType", "subComponentType", "type", "replicas", "resources", "limits", "requests", "sharedMemory",
    "sharedMemorySize", "envFromSecret", "envs", "env", "extraPodSpec", "mainContainer", "extraPodMetadata",
    "scalingAdapter", "podTemplate", "spec", "metadata", "containers", "image", "command", "args", "workingDir",
    "envFrom", "name", "labels", "annotations", "configMapRef", "secretRef", "prefix", "gpu", "multinode",
    "tolerations", "nodeSelector", "volumes", "volumeMounts", "pvcs", "minAvailable", "disabled", "size",
}
SKIP = {"gpuMemoryService", "checkpoint", "kvTransferPolicy", "status"}
MAX_DEPTH = 14

_NAME = st.from_regex(r"\A[a-z]([-a-z0-9]{0,10}[a-z0-9])?\Z")
_COMPONENT = st.from_regex(r"\A[A-Za-z][-A-Za-z0-9]{0,12}[A-Za-z0-9]\Z")
_LABEL_KEY = st.from_regex(r"\A([a-z0-9]([-a-z0-9.]{0,8}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z")
_TEXT = st.text(alphabet="abcXYZ019 -_./:=$\"'é", max_size=10)
_GPU_COUNT = st.one_of(st.integers(0, 8).map(str), st.sampled_from(["01", "08", "0"]))
_SHM = st.one_of(
    st.from_regex(r"\A[1-9][0-9]{0,3}(Ki|Mi|Gi|M|G)?\Z"), st.integers(1, 2**36), st.sampled_from(["1.5Gi", "16Gi"])
)
# A Secret's name is a DNS-1123 subdomain (the API server refuses any other Secret).
_SECRET = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,5}[a-z0-9])?)?\Z")
# Images and command lines as Dynamo's templates write them, in both release eras and both
# forms (exec and sh -c), with the role flags each release spells differently.
_IMAGE = st.one_of(
    st.sampled_from([
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.5.1", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1",
        "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.6.1", "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.6.1",
        "registry.example.com/team/vllm:custom", "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "a" * 64,
    ]),
    _TEXT,
)
_MODULE = st.sampled_from(["dynamo.vllm", "dynamo.mocker", "dynamo.sglang", "dynamo.frontend", "dynamo.trtllm"])
_FLAGS = st.lists(st.sampled_from([
    "--model", "Qwen/Qwen3-0.6B", "--is-prefill-worker", "--is-decode-worker", "--disaggregation-mode", "prefill",
    "decode", "--disaggregation-mode=prefill", "--router-mode", "kv", "--tensor-parallel-size", "2", "--x=$(Y)",
]), max_size=6)


@st.composite
def _command_line(draw) -> dict[str, list[str]]:
    module, flags = draw(_MODULE), draw(_FLAGS)
    form = draw(st.sampled_from(["exec", "module-in-args", "sh-args", "sh-command"]))
    script = " ".join(["python3", "-m", module, *flags]) + draw(st.sampled_from(["", " && echo done", " 2>&1 | tee x"]))
    if form == "exec":
        return {"command": ["python3", "-m", module], "args": flags}
    if form == "module-in-args":
        return {"command": ["python3"], "args": ["-m", module, *flags]}
    if form == "sh-args":
        return {"command": ["/bin/sh", "-c"], "args": [script]}
    return {"command": ["sh", "-c", script]}


_ENV_FROM = st.lists(st.one_of(
    st.builds(lambda n: {"secretRef": {"name": n}}, _SECRET),
    st.builds(lambda n: {"configMapRef": {"name": n}}, _SECRET),
    st.builds(lambda n, p: {"prefix": p, "secretRef": {"name": n, "optional": True}}, _SECRET, _NAME),
), max_size=3)


@cache
def _regex(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True)


def component_schema(api_version: str) -> dict[str, Any]:
    spec = _version_schema(api_version)["properties"]["spec"]
    if api_version == V1ALPHA1:
        return spec["properties"]["services"]["additionalProperties"]
    return spec["properties"]["components"]["items"]


def _version_schema(api_version: str) -> dict[str, Any]:
    name = api_version.split("/")[1]
    for entry in load_crd()["spec"]["versions"]:
        if entry["name"] == name:
            return entry["schema"]["openAPIV3Schema"]
    raise KeyError(api_version)


def _gen(draw, node: dict[str, Any], path: tuple[str, ...], depth: int) -> Any:
    special = _special(draw, node, path, depth)
    if special is not _NONE:
        return special
    if node.get("nullable") and draw(st.integers(0, 30)) == 0:
        return None
    if node.get("x-kubernetes-int-or-string") or node.get("anyOf"):
        if draw(st.booleans()):
            return draw(st.integers(0, 10**6))
        return draw(_regex(node["pattern"])) if "pattern" in node else draw(_TEXT)
    if "enum" in node:
        return draw(st.sampled_from(node["enum"]))
    kind = node.get("type")
    if kind == "string":
        if "pattern" in node:
            return draw(_regex(node["pattern"]))
        lo, hi = node.get("minLength", 0), min(node.get("maxLength", 12), 12)
        return draw(st.text(alphabet="abcXYZ019 -_./:=é", min_size=lo, max_size=max(lo, hi)))
    if kind == "integer":
        lo = node.get("minimum", -(2**31))
        hi = node.get("maximum", 2**31 - 1)
        return draw(st.integers(max(lo, -1000), min(hi, 10**6)))
    if kind == "number":
        return draw(st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "array":
        return _array(draw, node, path, depth)
    if kind == "object" or "properties" in node:
        return _object(draw, node, path, depth)
    # No type: x-kubernetes-preserve-unknown-fields with anything in it.
    return draw(_json)


_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), _TEXT),
    lambda children: st.one_of(st.lists(children, max_size=2), st.dictionaries(_TEXT, children, max_size=2)),
    max_leaves=4,
)


def _array(draw, node, path, depth):
    items = node.get("items") or {}
    lo = node.get("minItems", 0)
    hi = max(lo, min(node.get("maxItems", 2), 2 if depth < 8 else 1))
    size = draw(st.integers(lo, hi))
    keys = node.get("x-kubernetes-list-map-keys")
    out, seen = [], set()
    for _ in range(size * 3):
        if len(out) == size:
            break
        item = _gen(draw, items, (*path, "[]"), depth + 1)
        if keys:
            if not isinstance(item, dict) or any(k not in item for k in keys):
                continue
            ident = tuple(repr(item[k]) for k in keys)
        elif node.get("x-kubernetes-list-type") == "set":
            ident = repr(item)
        else:
            ident = object()
        if ident in seen:
            continue
        seen.add(ident)
        out.append(item)
    return out


def _object(draw, node, path, depth):
    props = node.get("properties")
    if props:
        required = list(node.get("required", []))
        optional = [k for k in props if k not in required and k not in SKIP]
        chosen = list(required)
        if depth < MAX_DEPTH:
            for key in optional:
                if key in FOCUS and draw(st.integers(0, 9)) < 5:
                    chosen.append(key)
            budget = max(0, 2 - depth // 4)
            others = [k for k in optional if k not in chosen]
            if others and budget:
                chosen += draw(st.lists(st.sampled_from(others), max_size=budget, unique=True))
        return {k: _gen(draw, props[k], (*path, k), depth + 1) for k in chosen}
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        keys = draw(st.lists(_LABEL_KEY, max_size=2 if depth < 10 else 1, unique=True))
        return {k: _gen(draw, extra, (*path, k), depth + 1) for k in keys}
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return draw(st.dictionaries(_TEXT, _json, max_size=2))
    return {}


_NONE = object()
_MAIN_CONTAINER = r"spec/(services/[^/]+/extraPodSpec/mainContainer|components/\[\]/podTemplate/spec/containers/\[\])"


def _special(draw, node, path, depth):
    """The rules beyond the structural schema (see the module docstring), by path."""
    where = "/".join(path)
    last = path[-1] if path else ""
    if re.fullmatch(r"spec/services/[^/]+/resources/limits/gpu", where):
        return draw(_GPU_COUNT)
    if re.fullmatch(r"spec/components/\[\]/podTemplate/spec/containers/\[\]/resources/limits", where):
        keys = draw(st.lists(st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "example.com/fpga"]), max_size=3,
                             unique=True))
        return {k: draw(st.one_of(st.integers(0, 8), _GPU_COUNT)) if k == "nvidia.com/gpu"
                else _gen(draw, node["additionalProperties"], (*path, k), depth + 1) for k in keys}
    if re.fullmatch(r"spec/services/[^/]+/sharedMemory", where):
        size = draw(_SHM)
        return draw(st.sampled_from([{"disabled": True}, {"size": size}, {"disabled": False, "size": size},
                                     {"disabled": True, "size": size}]))
    if where == "spec/components/[]/sharedMemorySize":
        return draw(st.one_of(_SHM, st.just("0"), st.just(0)))
    if where.startswith("spec/services/") and last in ("componentType", "subComponentType") and len(path) == 4:
        known = ["frontend", "worker", "prefill", "decode", "planner", "epp", "default"]
        return draw(st.one_of(st.sampled_from(known if last == "componentType" else ["prefill", "decode"]), _TEXT))
    if last == "envFromSecret" or (last == "name" and len(path) > 1 and path[-2] in ("secretRef", "configMapRef")):
        return draw(_SECRET)
    if where == "spec/components/[]/podTemplate/spec/containers":
        return _containers(draw, node, path, depth)
    if re.fullmatch(_MAIN_CONTAINER, where):
        container = _object(draw, node, path, depth)
        if draw(st.integers(0, 3)) > 0:
            container.pop("command", None)
            container.pop("args", None)
            container.update(draw(_command_line()))
        if "image" in container and draw(st.booleans()):
            container["image"] = draw(_IMAGE)
        if "envFrom" in container and draw(st.integers(0, 3)) > 0:
            container["envFrom"] = draw(_ENV_FROM)
        return container
    if last == "initContainers" and node.get("type") == "array":
        items = _array(draw, node, path, depth)
        for item in items:
            item["image"] = item.get("image") or "busybox:1.36"
        return items
    return _NONE


def _containers(draw, node, path, depth):
    names = draw(st.lists(_NAME.filter(lambda n: n != "main"), max_size=2, unique=True))
    if draw(st.integers(0, 4)) > 0:
        names.insert(draw(st.integers(0, len(names))), "main")
    out = []
    for name in names:
        container = _gen(draw, node["items"], (*path, "[]"), depth + 1)
        container["name"] = name
        if name != "main" and not container.get("image"):
            container["image"] = "nvcr.io/example/sidecar:1"
        out.append(container)
    return out


def _components(draw, api_version: str) -> list[tuple[str, dict[str, Any]]]:
    names = draw(st.lists(_COMPONENT, min_size=1, max_size=3, unique_by=str.lower))
    schema = component_schema(api_version)
    base = ("spec", "services", "x") if api_version == V1ALPHA1 else ("spec", "components", "[]")
    out = []
    seen_epp = False
    for name in names:
        component = _gen(draw, schema, base, 2)
        component.pop("name", None)
        if api_version == V1BETA1:
            if component.get("type") == "epp":
                if seen_epp:
                    component["type"] = "worker"
                seen_epp = True
            if component.get("type") != "epp":
                component.pop("eppConfig", None)
        if "minAvailable" in component:
            replicas = component.get("replicas", 1)
            if replicas != 0 and component["minAvailable"] > replicas:
                component["minAvailable"] = replicas
        out.append((name, component))
    return out


@st.composite
def manifests(draw, api_version: str) -> dict[str, Any]:
    """A DynamoGraphDeployment that the CRD (and the API server's rules above) accepts."""
    schema = _version_schema(api_version)["properties"]["spec"]
    props = {k: v for k, v in schema["properties"].items() if k not in ("services", "components")}
    body = _object(draw, {"type": "object", "properties": props}, ("spec",), 1)
    components = _components(draw, api_version)
    if api_version == V1ALPHA1:
        body["services"] = dict(components)
    else:
        body["components"] = [{"name": name, **component} for name, component in components]
    metadata: dict[str, Any] = {"name": draw(_NAME)}
    if draw(st.booleans()):
        metadata["namespace"] = draw(_NAME)
    for key in ("labels", "annotations"):
        if draw(st.booleans()):
            metadata[key] = draw(st.dictionaries(_LABEL_KEY, _TEXT, max_size=2))
    return {"apiVersion": api_version, "kind": "DynamoGraphDeployment", "metadata": metadata,
            "spec": copy.deepcopy(body)}
