"""The mocker timed like the estimate: profile data for ``dynamo.mocker --planner-profile-data``
written from AIConfigurator's model of the configuration's system and parallelism.

Dynamo 1.6.1's mocker (``dynamo/mocker/args.py: resolve_planner_profile_data``) takes either a
profiler results folder (``selected_prefill_interpolation/raw_data.npz`` and
``selected_decode_interpolation/raw_data.npz``) or one "mocker-format" NPZ with the lookup
tables themselves (``dynamo/mocker/utils/planner_profiler_perf_data_converter.py``):

* ``prefill_isl`` [n], ``prefill_ttft_ms`` [n]: a prefill of ISL tokens takes that long;
* ``decode_active_kv_tokens`` [k], ``decode_context_length`` [c], ``decode_itl`` [k, c]: one
  decode step with that many active KV tokens at that mean context length takes that long.

The folder form is converted by fitting ``dynamo.planner``'s regression models, and
``dynamo.planner`` cannot import here (it needs ``aisimulate_core``, whose
``ForwardPassPerfModelConfig`` is not in aiconfigurator-core 0.12.0). So the tables are written
in the mocker format, from AIConfigurator's static estimates: prefill time at batch 1 over an
ISL grid on the prefill pool's parallelism, decode step time over (batch, context) on the
decode pool's (the aggregated pool's for both, in agg). A cell's batch is its KV tokens over
its context length, interpolated between the estimated batches."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from graphs.engines import PROFILE_FILE
from graphs.engines import profile_dir as _profile_dir

from . import aic
from .models import Estimate

KV_POINTS = 24  # rows of the decode table: the mocker looks its step time up by binary search


def profile_dir(estimate_id: int, mode: str, rank: int) -> Path:
    return _profile_dir(Path(settings.SIZING_DIR), estimate_id, mode, rank)


def _pools(configuration: dict[str, Any], mode: str) -> tuple[dict[str, int], dict[str, int], int]:
    """(prefill parallelism, decode parallelism, decode batch) of a ranked configuration."""
    if mode == "disagg":
        pick = lambda role: {"tp": int(configuration[f"({role})tp"]), "pp": int(configuration[f"({role})pp"]),  # noqa: E731
                             "dp": int(configuration[f"({role})dp"])}
        return pick("p"), pick("d"), int(configuration["(d)bs"])
    same = {"tp": int(configuration["tp"]), "pp": int(configuration["pp"]), "dp": int(configuration["dp"])}
    return same, same, int(configuration["bs"])


def _grid(isl: int, osl: int, batch: int) -> tuple[list[int], list[int], list[int]]:
    isls = sorted({max(16, isl // 8), max(32, isl // 4), max(64, isl // 2), isl, 2 * isl})
    batches = sorted({1, max(1, batch // 4), max(1, batch // 2), batch, 2 * batch})
    contexts = sorted({max(16, isl // 2), isl, isl + osl // 2, isl + osl})
    return isls, batches, contexts


def estimate_tables(inputs: dict[str, Any], configuration: dict[str, Any], mode: str) -> dict[str, Any]:
    """The mocker's lookup tables for one configuration, from AIConfigurator's static estimates."""
    from aiconfigurator.cli.api import cli_estimate

    for name in ("aiconfigurator", "aiconfigurator_core"):
        logging.getLogger(name).setLevel(logging.ERROR)
    prefill, decode, batch = _pools(configuration, mode)
    isls, batches, contexts = _grid(int(inputs["isl"]), int(inputs["osl"]), batch)
    # Resolved once: with no version, every cli_estimate call looks the latest up again by parsing
    # each database's YAML (about 1 s of CPU a call; 25 calls were most of making a graph).
    version = aic.database_version(inputs["system"], inputs["backend"], inputs.get("backend_version"))
    common = {"backend_name": inputs["backend"], "backend_version": version}

    def run(phase: str, pool: dict[str, int], isl: int, bs: int):
        return cli_estimate(inputs["model"], inputs["system"], mode=phase, isl=isl, osl=2, batch_size=bs,
                            tp_size=pool["tp"], pp_size=pool["pp"], attention_dp_size=pool["dp"], **common)

    ttft = [run("static_ctx", prefill, isl, 1).ttft for isl in isls]
    # step[b, c]: one decode step of a batch of batches[b] requests at context contexts[c].
    step = np.array([[run("static_gen", decode, ctx, bs).tpot for ctx in contexts] for bs in batches])
    kv = np.linspace(0, batches[-1] * contexts[-1], KV_POINTS)
    itl = np.empty((KV_POINTS, len(contexts)))
    for c, ctx in enumerate(contexts):
        itl[:, c] = np.interp(np.clip(kv / ctx, 1, batches[-1]), batches, step[:, c])
    return {"prefill_isl": np.array(isls, dtype=float), "prefill_ttft_ms": np.array(ttft),
            "decode_active_kv_tokens": kv, "decode_context_length": np.array(contexts, dtype=float),
            "decode_itl": itl, "grid": {"isl": isls, "batch": batches, "context": contexts,
                                        "prefill": prefill, "decode": decode, "step_ms": step.tolist()}}


def write_profile(*, estimate: Estimate, mode: str, rank: int, configuration: dict[str, Any]) -> Path:
    """Write (once) the mocker-format NPZ for ranked configuration ``rank`` of ``mode``, and a
    JSON beside it saying what AIConfigurator was asked for each table."""
    folder = profile_dir(estimate.pk, mode, rank)
    path = folder / PROFILE_FILE
    if path.is_file():
        return path
    tables = estimate_tables(estimate.inputs, configuration, mode)
    grid = tables.pop("grid")
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "perf_data.tmp.npz"
    np.savez(tmp, **tables)
    tmp.replace(path)  # whole or absent: the local runtime starts the mocker on what it finds
    (folder / "source.json").write_text(json.dumps({
        "estimate": estimate.pk, "mode": mode, "rank": rank, "system": estimate.inputs["system"],
        "backend": estimate.inputs["backend"], "model": estimate.inputs["model"], "grid": grid,
        "prefill_ttft_ms": tables["prefill_ttft_ms"].tolist()}, indent=1))
    return path


def load_tables(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}
