"""Graph templates: the starting points the create form offers. Each builds a typed spec
from a few operator-facing fields; command lines come from the chosen Dynamo version."""

from __future__ import annotations

from dataclasses import dataclass

from core.dgd.commandline import build_frontend_command, build_worker_command
from core.facts import ENGINES, LATEST, DynamoVersion, default_image, default_workdir
from core.planner_config import PlannerSettings, graph_mode, planner_args
from core.pool import PoolFields, split_engine_args
from core.spec import GraphSpec, Service
from core.specio import spec_from_data


@dataclass(frozen=True)
class Template:
    key: str
    title: str
    description: str
    backend: str
    disaggregated: bool
    model: str
    gpus: int
    router_mode: str | None = None  # None: Dynamo's default (round-robin), no flag written
    worker_replicas: int = 1


TEMPLATES = {
    t.key: t
    for t in [
        Template("vllm-disagg", "Disaggregated vLLM (Dynamo's recipe)",
                 "A Frontend, a prefill pool and a decode pool of vLLM workers, one GPU each, with 16Gi of "
                 "/dev/shm for NIXL (without it the first KV-cache transfer between the pools fails). Dynamo's "
                 "recipe runs 2 prefill + 2 decode; set the replicas here or scale each pool later.",
                 "vllm", True, "Qwen/Qwen3-0.6B", 1),
        Template("vllm-agg", "Aggregated vLLM",
                 "A Frontend and one pool of vLLM workers doing prefill and decode together.",
                 "vllm", False, "Qwen/Qwen3-0.6B", 1),
        Template("sglang-disagg", "Disaggregated SGLang", "Frontend, prefill and decode pools of SGLang workers.",
                 "sglang", True, "Qwen/Qwen3-0.6B", 1),
        Template("trtllm-disagg", "Disaggregated TensorRT-LLM",
                 "Frontend, prefill and decode pools of TensorRT-LLM workers.", "trtllm", True, "Qwen/Qwen3-0.6B", 1),
        Template("vllm-agg-kv", "Aggregated vLLM with KV-aware routing",
                 "A Frontend with the KV router (--router-mode kv) in front of two vLLM workers: a prompt goes to "
                 "the worker whose KV cache already holds its prefix.", "vllm", False, "Qwen/Qwen3-0.6B", 1,
                 router_mode="kv", worker_replicas=2),
        Template("mocker-agg-kv", "KV-routed mocker (no GPU)",
                 "The KV router in front of two aggregated mocker workers, which publish the KV events it needs: "
                 "repeated prompts hit the cache, and the graph page shows the hit rate.", "mocker", False,
                 "Qwen/Qwen3-0.6B", 0, router_mode="kv", worker_replicas=2),
        Template("mocker-disagg", "Disaggregated mocker (no GPU)",
                 "Dynamo's GPU-free mocker engine in prefill and decode pools: runs on this host with the "
                 "local runtime, with vLLM-like timing.", "mocker", True, "Qwen/Qwen3-0.6B", 0),
    ]
}


def build_spec(
    *,
    template: str,
    name: str,
    namespace: str = "",
    model: str = "",
    backend: str = "",
    dynamo_version: str = LATEST,
    prefill: PoolFields | None = None,
    decode: PoolFields | None = None,
    frontend_image: str = "",
    router_mode: str | None = None,
    planner: PlannerSettings | None = None,
) -> GraphSpec:
    """A spec from the create form. Raises ManifestError (paths into the spec) or ValueError."""
    tpl = TEMPLATES[template]
    backend = backend or tpl.backend
    version = DynamoVersion.parse(dynamo_version)
    model = model or tpl.model
    prefill = prefill or PoolFields(gpus=tpl.gpus)
    decode = decode or PoolFields(gpus=tpl.gpus, replicas=tpl.worker_replicas)
    if backend not in ENGINES:
        raise ValueError(f"unknown backend {backend!r}")
    frontend_command, frontend_args = build_frontend_command(router_mode or tpl.router_mode)
    services: list[dict] = [
        {
            "name": "Frontend",
            "role": "frontend",
            "replicas": 1,
            "image": frontend_image or default_image(backend, version),
            "command": frontend_command,
            "args": frontend_args,
        }
    ]
    pools = [("prefill", prefill), ("decode", decode)] if tpl.disaggregated else [("worker", decode)]
    for role, fields in pools:
        command, args = build_worker_command(
            engine=backend, version=version, role=role, model=model,
            engine_args=split_engine_args(fields.engine_args),
        )
        services.append(
            {
                "name": role,
                "role": role,
                "replicas": fields.replicas,
                "gpus": fields.gpus if ENGINES[backend]["gpu"] or fields.gpus else None,
                "shared_memory": fields.shared_memory or None,
                "image": fields.image or default_image(backend, version),
                "working_dir": default_workdir(backend, version),
                "command": command,
                "args": args,
                "hf_token_secret": fields.hf_token_secret or None,
            }
        )
    if planner is not None:
        # Dynamo's Planner as a component of the graph, its settings in its --config.
        services.append({"name": "Planner", "role": "planner", "replicas": 1,
                         "image": frontend_image or default_image(backend, version),
                         "command": ["python3", "-m", "dynamo.planner"],
                         "args": planner_args(planner, mode=graph_mode({role for role, _ in pools}))})
    return spec_from_data(
        {
            "name": name,
            "namespace": namespace or None,
            "model": model,
            "backend": backend,
            "dynamo_version": str(version),
            "services": services,
        }
    )


def pool_of(spec: GraphSpec, role: str) -> Service | None:
    pools = spec.pools(role)
    return pools[0] if pools else None
