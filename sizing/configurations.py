"""A graph made from one of an estimate's ranked configurations.

AIConfigurator writes a DGD per configuration (``k8s_deploy.yaml``, ``nvidia.com/v1alpha1``,
images of the Dynamo release its generator knows, 1.3.0 in 0.12.0). The graph is that manifest
through the lossless importer, adapted to the chosen Dynamo release (the images' tags; the
importer and renderer handle each release's command-line and API-version differences), with
the importer's findings. Two annotations say where it came from, and how the local runtime
times its mocker workers (``timing.py``)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from core.facts import LATEST, known_release, version_from_image
from graphs import services as graph_services
from graphs.engines import ESTIMATE_ANNOTATION, TIMING_ANNOTATION
from metrics.models import ITL_MS_MAX, TTFT_MS_MAX
from metrics.services import objectives_set

from .models import Estimate
from .services import SizingConflict, SizingRefused

if TYPE_CHECKING:
    from accounts.roles import Actor



@dataclass
class MadeGraph:
    graph: str
    revision: int
    estimate: int
    mode: str
    rank: int
    dynamo_version: str
    timing: str
    findings: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"graph": self.graph, "revision": self.revision, "estimate": self.estimate, "mode": self.mode,
                "rank": self.rank, "dynamo_version": self.dynamo_version, "timing": self.timing,
                "findings": self.findings}


def timing_words(inputs: dict[str, Any], configuration: dict[str, Any], mode: str) -> str:
    """``AIConfigurator for h200_sxm, TP2 prefill / TP4 decode`` (or ``TP4 aggregated``)."""
    if mode == "disagg":
        pools = f"TP{configuration['(p)tp']} prefill / TP{configuration['(d)tp']} decode"
    else:
        pools = f"TP{configuration['tp']} aggregated"
    return f"AIConfigurator for {inputs['system']}, {pools}"


def _choose(estimate: Estimate, mode: str | None, rank: int) -> tuple[str, dict[str, Any], Path]:
    if estimate.state != "succeeded":
        raise SizingConflict(f"estimate #{estimate.pk} is {estimate.state}: a graph is made from a finished estimate")
    mode = mode or estimate.result.get("chosen")
    configuration = estimate.configuration(mode, rank)
    if configuration is None:
        count = len(estimate.result.get("experiments", {}).get(mode, {}).get("configurations", []))
        raise SizingRefused(f"rank: estimate #{estimate.pk} has {count} ranked {mode} configuration(s), no rank {rank}")
    folder = estimate.result.get("artifacts", {}).get(mode, {}).get(str(rank))
    manifest = Path(folder or "") / "k8s_deploy.yaml"
    if not folder or not manifest.is_file():
        raise SizingRefused(f"estimate #{estimate.pk} kept no DGD for {mode} rank {rank} "
                            "(its artefacts were removed): estimate again with fresh=true")
    return mode, configuration, manifest


def adapt_manifest(obj: dict[str, Any], *, name: str, dynamo_version: str, annotations: dict[str, str]) -> dict:
    """AIConfigurator's DGD renamed, annotated, its Dynamo images moved to ``dynamo_version``."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta["name"] = name
    meta.setdefault("annotations", {}).update(annotations)
    for service in (out.get("spec", {}).get("services") or {}).values():
        container = (service.get("extraPodSpec") or {}).get("mainContainer") or {}
        image = container.get("image")
        if image and version_from_image(image) is not None:
            container["image"] = image.rsplit(":", 1)[0] + f":{dynamo_version}"
    return out


def graph_from_estimate(*, estimate: Estimate, name: str, rank: int = 1, mode: str | None = None,
                        dynamo_version: str | None = None, user: Actor = None, via: str = "ui") -> MadeGraph:
    """Import ranked configuration ``rank`` of ``mode`` (default: AIConfigurator's choice) as graph
    ``name`` for ``dynamo_version`` (default: the latest release). Raises SizingRefused or the
    importer's ManifestError; stores nothing on either."""
    from . import timing  # the mocker's profile data: numpy and AIConfigurator, loaded when used

    try:
        release = known_release(dynamo_version) if dynamo_version else LATEST
    except ValueError as exc:
        raise SizingRefused(f"dynamo_version: {exc}") from None
    mode, configuration, manifest = _choose(estimate, mode, rank)
    obj = yaml.safe_load(manifest.read_text())
    words = timing_words(estimate.inputs, configuration, mode)
    adapted = adapt_manifest(obj, name=name, dynamo_version=release, annotations={
        ESTIMATE_ANNOTATION: f"{estimate.pk}/{mode}/{rank}", TIMING_ANNOTATION: words})
    graph, revision, report = graph_services.graph_import(
        obj=adapted, user=user, text=yaml.safe_dump(adapted, sort_keys=False), dynamo_version=release,
        message=f"made from estimate #{estimate.pk}, {mode} rank {rank} ({words})", via=via)
    timing.write_profile(estimate=estimate, mode=mode, rank=rank, configuration=configuration)
    # The graph starts with the SLO it was sized for: goodput is read against the estimate's targets.
    # A target past what the frontend's histograms measure (metrics.models) is left unset.
    inputs = estimate.estimate_inputs
    objectives_set(graph=graph, ttft_ms=float(inputs.ttft) if 0.1 <= inputs.ttft <= TTFT_MS_MAX else None,
                   itl_ms=float(inputs.tpot) if 0.1 <= inputs.tpot <= ITL_MS_MAX else None, gpu_hour_price=None,
                   user=user, via=via)
    return MadeGraph(graph=graph.name, revision=revision.number, estimate=estimate.pk, mode=mode, rank=rank,
                     dynamo_version=release, timing=words, findings=[f.as_dict() for f in report.findings])
