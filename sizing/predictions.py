"""Predicted against simulated: what AIConfigurator estimated for a configuration, beside what
a benchmark measured on the graph made from it (its mocker workers timed by the same model).

AIConfigurator's configuration describes the whole budget: ``replicas`` copies of one unit
(agg: a worker; disagg: xPyD), and the generated DGD holds all of them. So the prediction for
the graph is the cluster's: concurrency ``concurrency x replicas`` and output tokens/s
``tokens/s x replicas``; TTFT and TPOT (ITL) are per request. A benchmark is comparable when it
ran at that concurrency with the estimate's ISL and OSL: the result says when it did not."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from core.spec import GraphSpec
from graphs.engines import ESTIMATE_ANNOTATION, TIMING_ANNOTATION

from .models import Estimate

TOLERANCE = 0.25  # the goal: simulated TTFT and ITL within 25 % of the estimate


@dataclass(frozen=True)
class Prediction:
    estimate: int
    mode: str
    rank: int
    system: str
    timing: str
    isl: int
    osl: int
    concurrency: int  # the whole graph's
    ttft_ms: float
    itl_ms: float  # AIConfigurator's TPOT
    request_latency_ms: float
    output_tokens_per_s: float  # the whole graph's
    tokens_per_s_per_user: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def prediction(spec: GraphSpec) -> Prediction | None:
    """The estimate a graph was made from, as predicted numbers; None for any other graph."""
    annotations = spec.metadata_extra.get("annotations")
    if not isinstance(annotations, dict):
        return None
    try:
        estimate_id, mode, rank = str(annotations.get(ESTIMATE_ANNOTATION, "")).split("/")
        estimate = Estimate.objects.filter(pk=int(estimate_id), state="succeeded").first()
        rank_number = int(rank)
    except ValueError:
        return None
    configuration = estimate.configuration(mode, rank_number) if estimate else None
    if configuration is None:
        return None
    replicas = int(configuration["replicas"])
    return Prediction(
        estimate=estimate.pk, mode=mode, rank=rank_number, system=estimate.inputs["system"],
        timing=str(annotations.get(TIMING_ANNOTATION, "")), isl=int(estimate.inputs["isl"]),
        osl=int(estimate.inputs["osl"]), concurrency=int(configuration["cluster_concurrency"]),
        ttft_ms=float(configuration["ttft"]), itl_ms=float(configuration["tpot"]),
        request_latency_ms=float(configuration["request_latency"]),
        output_tokens_per_s=round(float(configuration["tokens/s"]) * replicas, 3),
        tokens_per_s_per_user=float(configuration["tokens/s/user"]))


def _difference(predicted: float, simulated: float | None) -> dict[str, Any]:
    if simulated is None:
        return {"predicted": predicted, "simulated": None, "difference": None, "within_tolerance": None}
    relative = (simulated - predicted) / predicted if predicted else None
    return {"predicted": round(predicted, 3), "simulated": round(simulated, 3),
            "difference": None if relative is None else round(relative, 4),
            "within_tolerance": None if relative is None else abs(relative) <= TOLERANCE}


def load_shortfall(step: dict[str, Any]) -> list[str]:
    """Where the load itself fell short of what the step asked: failed requests, or fewer requests
    in flight than its concurrency (Little's law: request rate x mean latency), which lowers the
    simulated throughput whatever the graph could do."""
    out = []
    errors, completed = int(step.get("errors") or 0), int(step.get("completed") or 0)
    if errors:
        out.append(f"{errors} of {errors + completed} requests failed")
    rate, latency = step.get("request_throughput"), (step.get("request_latency") or {}).get("avg")
    asked = step.get("concurrency")
    if rate and latency and asked:
        held = float(rate) * float(latency) / 1000
        if held < 0.9 * float(asked):
            out.append(f"the load fell short: {held:.1f} requests were in flight on average (request rate times mean "
                       f"latency), of the {asked} asked")
    return out


def versus(pred: Prediction, step: dict[str, Any]) -> dict[str, Any]:
    """Predicted against one benchmark load point (a results step as JSON): TTFT, ITL and
    output throughput, each with its relative difference; averages, as AIConfigurator's are."""
    ttft, itl = step.get("ttft") or {}, step.get("itl") or {}
    isl = (step.get("input_tokens") or {}).get("avg")
    osl = (step.get("output_tokens") or {}).get("avg")
    caveats = []
    if step.get("concurrency") != pred.concurrency:
        caveats.append(f"the benchmark ran at concurrency {step.get('concurrency')}, the estimate is for "
                       f"{pred.concurrency}")
    for what, measured, wanted in (("ISL", isl, pred.isl), ("OSL", osl, pred.osl)):
        if measured is not None and abs(measured - wanted) > 0.1 * wanted:
            caveats.append(f"mean {what} was {measured:.0f} tokens, the estimate's is {wanted}")
    caveats += load_shortfall(step)
    return {"prediction": pred.as_dict(), "label": f"predicted by AIConfigurator for {pred.system}; "
                                                   f"simulated with Dynamo's mocker, timed by {pred.timing}",
            "ttft_ms": _difference(pred.ttft_ms, ttft.get("avg")),
            "itl_ms": _difference(pred.itl_ms, itl.get("avg")),
            "output_tokens_per_s": _difference(pred.output_tokens_per_s, step.get("output_token_throughput")),
            "comparable": not caveats, "caveats": caveats, "tolerance": TOLERANCE}
