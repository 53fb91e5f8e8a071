"""NVIDIA AIConfigurator, the one module that imports it: its support matrix, its default
search (aggregated against disaggregated serving on a GPU budget, under TTFT and TPOT targets)
and the per-step timing that the mocker's profile data is written from (``profile.py``).

AIConfigurator runs offline: its performance databases (``aiconfigurator-core``) and the model
configurations it knows ship in the wheel. Its Python API (``aiconfigurator.cli.api``) is the
CLI's own code path, ``cli default`` without argparse; the numbers here are its numbers, with
the two derived columns its report prints (replicas on the budget, and the cluster request rate
and concurrency that follow), computed the way ``cli/report_and_save.py`` computes them.

Django-free: inputs in, a JSON-ready dict out; AIConfigurator's exceptions become
:class:`SizingError` with its message."""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGE = "aiconfigurator"
# The columns AIConfigurator fills for its own bookkeeping, not numbers a user reads.
_INTERNAL = ("_per_ops_source", "_moe_comm_fallbacks")
# Pareto axes, as its report plots them.
PARETO_X, PARETO_Y = "tokens/s/user", "tokens/s/gpu_cluster"


class SizingError(ValueError):
    """AIConfigurator could not answer for these inputs; the message says why (its own words)."""


@dataclass(frozen=True)
class Inputs:
    """What an estimate is asked: ``cli default``'s arguments, with the ITL target under its
    AIConfigurator name, TPOT (time per output token)."""

    model: str
    system: str
    total_gpus: int
    isl: int
    osl: int
    ttft: float  # ms
    tpot: float  # ms
    backend: str = "vllm"
    backend_version: str | None = None  # None: the database AIConfigurator calls latest

    def __post_init__(self) -> None:
        # One spelling per value (600 and 600.0 are one target): the cache key is these fields.
        for name, kind in (("total_gpus", int), ("isl", int), ("osl", int), ("ttft", float), ("tpot", float)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        object.__setattr__(self, "backend_version", self.backend_version or None)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def cli_argv(self, save_dir: str | None = None) -> list[str]:
        """The equivalent ``aiconfigurator cli default`` command line (shown, and run by tests)."""
        argv = ["aiconfigurator", "cli", "default", "--model-path", self.model, "--system", self.system,
                "--total-gpus", str(self.total_gpus), "--isl", str(self.isl), "--osl", str(self.osl),
                "--ttft", f"{self.ttft:g}", "--tpot", f"{self.tpot:g}", "--backend", self.backend]
        if self.backend_version:
            argv += ["--backend-version", self.backend_version]
        if save_dir:
            argv += ["--save-dir", save_dir]
        return argv


def version() -> str:
    return metadata.version(PACKAGE)


def core_version() -> str:
    return metadata.version("aiconfigurator-core")


@functools.cache
def support_matrix() -> dict[str, Any]:
    """The models, systems and backends AIConfigurator's own support matrix lists as passing
    (collected on silicon or hybrid), per system and backend with their database versions."""
    from aiconfigurator_core.sdk.common import get_support_matrix

    rows = [r for r in get_support_matrix() if r.get("Status", "").endswith("PASS")]
    models = sorted({r["HuggingFaceID"] for r in rows})
    systems = sorted({r["System"] for r in rows})
    backends = sorted({r["Backend"] for r in rows})
    combos: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        combos.setdefault(r["System"], {}).setdefault(r["Backend"], [])
        if r["Version"] not in combos[r["System"]][r["Backend"]]:
            combos[r["System"]][r["Backend"]].append(r["Version"])
    per_model: dict[str, set[tuple[str, str]]] = {}
    for r in rows:
        per_model.setdefault(r["HuggingFaceID"], set()).add((r["System"], r["Backend"]))
    return {"models": models, "systems": systems, "backends": backends, "versions": combos,
            "model_support": {m: sorted(f"{s}/{b}" for s, b in pairs) for m, pairs in per_model.items()},
            "aiconfigurator": version(), "aiconfigurator_core": core_version()}


def check_inputs(inputs: Inputs) -> None:
    """Refuse, naming the field, what AIConfigurator's support matrix does not list."""
    matrix = support_matrix()
    if inputs.system not in matrix["systems"]:
        raise SizingError(f"system: {inputs.system!r} is not in AIConfigurator's support matrix "
                          f"(one of {', '.join(matrix['systems'])})")
    if inputs.backend not in matrix["versions"].get(inputs.system, {}):
        raise SizingError(f"backend: AIConfigurator has no {inputs.backend!r} database for {inputs.system} "
                          f"(it has {', '.join(sorted(matrix['versions'][inputs.system]))})")
    if inputs.model not in matrix["models"]:
        raise SizingError(f"model: {inputs.model!r} is not in AIConfigurator's support matrix")
    if f"{inputs.system}/{inputs.backend}" not in matrix["model_support"][inputs.model]:
        raise SizingError(f"model: AIConfigurator's support matrix lists {inputs.model} on "
                          f"{', '.join(matrix['model_support'][inputs.model])}, not {inputs.system}/{inputs.backend}")
    if inputs.backend_version:
        # Checked here, not left to AIConfigurator: a version it has no database for ended the
        # worker process that ran the estimate ("worker lost") instead of answering.
        have = database_versions(inputs.system, inputs.backend)
        if inputs.backend_version not in have:
            raise SizingError(f"backend_version: AIConfigurator has no {inputs.backend} {inputs.backend_version!r} "
                              f"database for {inputs.system} (it has {', '.join(have) or 'none'}; empty: the latest)")


@functools.cache
def database_versions(system: str, backend: str) -> list[str]:
    """The performance databases AIConfigurator holds for a system and backend."""
    from aiconfigurator_core.sdk.perf_database import get_supported_databases

    return sorted(get_supported_databases().get(system, {}).get(backend, []))


def database_version(system: str, backend: str, requested: str | None = None) -> str | None:
    """The performance database an estimate uses: the one asked for, else AIConfigurator's latest."""
    if requested:
        return requested
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version

    return get_latest_database_version(system, backend)


def _number(value: Any) -> Any:
    """A JSON-ready scalar: numpy types unwrapped, NaN as None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def _rows(df, total_gpus: int, tpot_target: float) -> list[dict[str, Any]]:
    """Ranked rows as the report prints them: meeting the TPOT target, best tokens/s/GPU first,
    with replicas on the budget and the cluster-wide request rate and concurrency."""
    if df is None or df.empty:
        return []
    df = df[df["tpot"] <= tpot_target].sort_values(by="tokens/s/gpu_cluster", ascending=False)
    out = []
    for rank, record in enumerate(df.to_dict("records"), start=1):
        row = {k: _number(v) for k, v in record.items() if k not in _INTERNAL}
        replicas = total_gpus // int(row["num_total_gpus"])
        row.update(rank=rank, replicas=replicas, total_gpus_used=replicas * int(row["num_total_gpus"]),
                   cluster_concurrency=row["concurrency"] * replicas,
                   cluster_request_rate=round(row["request_rate"] * replicas, 3))
        out.append(row)
    return out


def _pareto(df) -> list[dict[str, float]]:
    if df is None or df.empty or PARETO_X not in df.columns:
        return []
    df = df.sort_values(by=PARETO_X)
    return [{"x": _number(x), "y": _number(y)} for x, y in zip(df[PARETO_X], df[PARETO_Y], strict=True)]


def run_default(inputs: Inputs, *, save_dir: Path | None = None,
                progress: Callable[[int, str], None] | None = None, top_n: int = 5) -> dict[str, Any]:
    """AIConfigurator's default search for ``inputs``: agg against disagg, each experiment's
    Pareto front and ranked configurations, the chosen one, and what it ran on. With
    ``save_dir``, its generated artefacts (a ``k8s_deploy.yaml`` DGD per configuration) too."""
    check_inputs(inputs)
    report = progress or (lambda percent, text: None)
    started = time.monotonic()
    report(5, f"loading AIConfigurator's {inputs.system} {inputs.backend} database")
    from aiconfigurator.cli.api import cli_default
    from aiconfigurator.sdk.errors import NoFeasibleConfigError

    db_version = database_version(inputs.system, inputs.backend, inputs.backend_version)
    report(15, "searching aggregated and disaggregated configurations")
    # AIConfigurator logs every database file it loads at INFO and WARNING; the answer is ours to show.
    for name in ("aiconfigurator", "aiconfigurator_core"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        result = cli_default(
            model_path=inputs.model, total_gpus=inputs.total_gpus, system=inputs.system, backend=inputs.backend,
            backend_version=inputs.backend_version, isl=inputs.isl, osl=inputs.osl, ttft=inputs.ttft,
            tpot=inputs.tpot, top_n=top_n, save_dir=str(save_dir) if save_dir else None,
        )
    except NoFeasibleConfigError as exc:
        raise SizingError(f"AIConfigurator found no configuration for these targets: {exc}") from exc
    except (ValueError, KeyError, FileNotFoundError, NotImplementedError, AssertionError) as exc:
        raise SizingError(f"AIConfigurator could not estimate {inputs.model} on {inputs.system}: {exc}") from exc
    elapsed = time.monotonic() - started
    report(90, "reading the ranked configurations")
    experiments = {}
    for name in ("agg", "disagg"):
        if name not in result.best_configs and name not in result.pareto_fronts:
            continue
        experiments[name] = {
            "best_tokens_per_gpu": _number(result.best_throughputs.get(name)),
            "configurations": _rows(result.best_configs.get(name), inputs.total_gpus, inputs.tpot)[:top_n],
            "pareto": _pareto(result.pareto_fronts.get(name)),
        }
    chosen = result.chosen_exp
    return {
        "chosen": chosen,
        "comparison": comparison(result.best_throughputs),
        "best_throughputs": {k: _number(v) for k, v in result.best_throughputs.items()},
        "experiments": experiments,
        "perf_db_version": db_version,
        "aiconfigurator": version(),
        "aiconfigurator_core": core_version(),
        "elapsed_s": round(elapsed, 3),
        "command": inputs.cli_argv(),
        "artifacts": _artifact_dirs(save_dir),
    }


def comparison(throughputs: dict[str, float]) -> str:
    """The report's sentence: ``disagg 1.08x better than agg``."""
    agg, disagg = throughputs.get("agg"), throughputs.get("disagg")
    if agg is None or disagg is None:
        return ""
    if agg == disagg:
        return "agg and disagg tied"
    winner, loser = ("agg", "disagg") if agg >= disagg else ("disagg", "agg")
    if not throughputs[loser]:
        return f"only {winner} meets the targets"
    return f"{winner} {throughputs[winner] / throughputs[loser]:.2f}x better than {loser}"


def _artifact_dirs(save_dir: Path | None) -> dict[str, dict[str, str]]:
    """``{"agg": {"1": ".../agg/top1"}, ...}``: where each ranked configuration's DGD was written.
    AIConfigurator names its run folder after the inputs plus a random suffix: found by glob."""
    out: dict[str, dict[str, str]] = {}
    if save_dir is None:
        return out
    for deploy in sorted(Path(save_dir).glob("**/top*/k8s_deploy.yaml")):
        top = deploy.parent
        out.setdefault(top.parent.name, {})[top.name.removeprefix("top")] = str(top)
    return out
