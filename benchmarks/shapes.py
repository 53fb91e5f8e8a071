"""Graph shapes for sizing: how many prefill and decode replicas (or aggregated workers) a
graph runs, what that costs in GPUs, and the variants of a graph with another shape. Pure.

A shape is written ``p2d1`` (two prefill replicas, one decode) or ``agg3`` (three aggregated
workers). GPUs count every worker replica's GPUs; a worker that asks none (the mocker, which
stands in for a one-GPU engine on hosts without GPUs) counts as one, so that A/B studies and
tokens per GPU mean the same on this host as on a cluster."""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.dgd.commandline import role_flag
from core.spec import MAX_REPLICAS, GraphSpec, Service

SHAPE_RE = re.compile(r"^(?:p(\d{1,3})d(\d{1,3})|agg(\d{1,3}))$")
# The same, as the API's schema states it (either case; parse_shape reads it in lower case).
SHAPE_WRITTEN = r"^(?:[pP][0-9]{1,3}[dD][0-9]{1,3}|[aA][gG][gG][0-9]{1,3})$"
# Flags that give a worker its role: stripped when a worker changes role in a variant.
ROLE_FLAGS = {"--disaggregation-mode": 1, "--is-prefill-worker": 0, "--is-decode-worker": 0}
MAX_ARMS = 6


@dataclass(frozen=True, order=True)
class Shape:
    prefill: int = 0
    decode: int = 0
    workers: int = 0

    @property
    def aggregated(self) -> bool:
        return self.workers > 0

    def __str__(self) -> str:
        return f"agg{self.workers}" if self.aggregated else f"p{self.prefill}d{self.decode}"

    def label(self) -> str:
        if self.aggregated:
            return f"{self.workers} aggregated"
        return f"{self.prefill} prefill : {self.decode} decode"


def parse_shape(text: str) -> Shape:
    """``p2d1`` or ``agg3``. Raises ValueError."""
    match = SHAPE_RE.match(str(text).strip().lower())
    if not match:
        raise ValueError(f"{text!r} is not a shape: write p<prefill>d<decode> (p2d1) or agg<workers> (agg2)")
    p, d, w = (int(g) if g else 0 for g in match.groups())
    shape = Shape(workers=w) if match.group(3) else Shape(prefill=p, decode=d)
    counts = [shape.workers] if shape.aggregated else [shape.prefill, shape.decode]
    if any(not 1 <= c <= MAX_REPLICAS for c in counts):
        raise ValueError(f"{text!r}: every pool needs 1 to {MAX_REPLICAS} replicas")
    return shape


def gpus_per_replica(service: Service) -> int:
    return service.gpus or 1


def _pool(spec: GraphSpec, role: str) -> Service | None:
    pools = spec.pools(role)
    return pools[0] if pools else None


def shape_of(spec: GraphSpec, replicas: dict[str, int] | None = None) -> Shape:
    """The shape of ``spec`` with ``replicas`` (service name -> count) overriding its own."""
    counts = {s.name: s.effective_replicas for s in spec.services}
    counts.update(replicas or {})

    def total(role: str) -> int:
        return sum(counts.get(s.name, 0) for s in spec.pools(role))

    if spec.pools("worker") and not spec.pools("prefill"):
        return Shape(workers=total("worker"))
    return Shape(prefill=total("prefill"), decode=total("decode"))


def gpu_count(spec: GraphSpec, replicas: dict[str, int] | None = None) -> int:
    counts = {s.name: s.effective_replicas for s in spec.services}
    counts.update(replicas or {})
    return sum(gpus_per_replica(s) * counts.get(s.name, 0) for s in spec.services if s.is_worker)


def shape_gpus(spec: GraphSpec, shape: Shape) -> int:
    """What ``shape`` would cost in GPUs with ``spec``'s GPUs per replica."""
    prefill, decode = _pool(spec, "prefill"), _pool(spec, "decode")
    worker = _pool(spec, "worker") or decode or prefill
    if shape.aggregated:
        return shape.workers * (gpus_per_replica(worker) if worker else 1)
    template = worker
    return (shape.prefill * gpus_per_replica(prefill or template) +
            shape.decode * gpus_per_replica(decode or template)) if template else shape.prefill + shape.decode


def same_budget_shapes(spec: GraphSpec, replicas: dict[str, int] | None = None) -> list[Shape]:
    """Every shape with the GPUs the graph has now: the aggregated one, then each
    prefill:decode split, the graph's own shape included; at most MAX_ARMS."""
    budget = gpu_count(spec, replicas)
    own = shape_of(spec, replicas)
    out: list[Shape] = []
    for workers in range(1, budget + 1):
        if shape_gpus(spec, Shape(workers=workers)) == budget:
            out.append(Shape(workers=workers))
            break
    for prefill in range(1, budget):
        for decode in range(1, budget):
            shape = Shape(prefill=prefill, decode=decode)
            if shape_gpus(spec, shape) == budget:
                out.append(shape)
    if own not in out:
        out.append(own)
    # Keep the graph's own shape and the ones nearest to it when there are many.
    if len(out) > MAX_ARMS:
        out.sort(key=lambda s: (s != own, abs(s.prefill - own.prefill) + abs(s.decode - own.decode)))
        out = sorted(out[:MAX_ARMS])
    return out


def _strip_role(args: list[str]) -> list[str]:
    out, skip = [], 0
    for token in args:
        if skip:
            skip -= 1
            continue
        name = token.split("=", 1)[0]
        if name in ROLE_FLAGS:
            skip = ROLE_FLAGS[name] if "=" not in token else 0
            continue
        out.append(token)
    return out


def _as_role(service: Service, role: str, name: str, replicas: int, spec: GraphSpec) -> dict:
    data = service.model_dump(mode="json")
    data.update(name=name, role=role, replicas=replicas, scaling_adapter=service.scaling_adapter)
    args = _strip_role(list(service.args or []))
    data["args"] = args + role_flag(role, spec.backend, spec.version) if service.args is not None else None
    return data


def variant_spec(spec: GraphSpec, *, name: str, shape: Shape) -> GraphSpec:
    """``spec`` renamed to ``name`` and reshaped: replica counts changed, or its workers
    turned aggregated or disaggregated (the decode pool, or the worker pool, is the template
    of a new pool: same image, GPUs, shared memory, engine arguments)."""
    prefill, decode, worker = _pool(spec, "prefill"), _pool(spec, "decode"), _pool(spec, "worker")
    others = [s.model_dump(mode="json") for s in spec.services if s.role not in ("prefill", "decode", "worker")]
    template = decode or worker or prefill
    if template is None:
        raise ValueError(f"{spec.name} has no worker pool to reshape")
    if shape.aggregated:
        pools = [_as_role(worker or template, "worker", (worker.name if worker else "worker"), shape.workers, spec)]
    else:
        pools = [
            _as_role(prefill or template, "prefill", prefill.name if prefill else "prefill", shape.prefill, spec),
            _as_role(decode or template, "decode", decode.name if decode else "decode", shape.decode, spec),
        ]
    data = spec.model_dump(mode="json")
    data.update(name=name, services=others + pools)
    return GraphSpec.model_validate(data)


def variant_name(source: str, study_id: int, shape: Shape) -> str:
    suffix = f"-ab{study_id}-{shape}"
    return source[: 63 - len(suffix)].rstrip("-") + suffix
