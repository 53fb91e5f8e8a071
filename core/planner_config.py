"""The Planner settings operators tune, read from and written to the Planner component's
``--config`` JSON, checked against what Dynamo 1.6.1's Planner accepts.

Pure: no Django, no dynamo import. The rules mirror ``PlannerConfig`` in the 1.6.1 wheel
(``dynamo/planner/config/planner_config.py`` and ``config/defaults.py``); tests feed the same
configs to the real class, so a rule that drifts from the wheel fails there.

The config lives where the Planner reads it, in the component's args
(``python3 -m dynamo.planner --config '{...}'``), so a manifest keeps its exact text through an
import and a render, and the Kubernetes runtime applies what the user wrote. The local runtime
renders its own ``--config`` from the same settings plus what only it knows (the virtual
environment, the local Prometheus, the model name)."""

from __future__ import annotations

import json
import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.dgd.commandline import flag_value, tokens
from core.spec import MAX_REPLICAS

Target = Literal["throughput", "latency", "load", "sla"]
TARGETS: tuple[str, ...] = typing.get_args(Target)
# 1.6.1 defaults (config/defaults.py: SLAPlannerDefaults, BasePlannerDefaults).
DEFAULT_TTFT_MS = 500.0
DEFAULT_ITL_MS = 50.0
DEFAULT_THROUGHPUT_INTERVAL = 180
DEFAULT_LOAD_INTERVAL = 5
DEFAULT_MIN_ENDPOINT = 1
DEFAULT_MAX_GPU_BUDGET = 8
# Keys the form edits; any other key of the JSON is kept as written.
MODELLED = {"optimization_target", "ttft_ms", "ttft", "itl_ms", "itl", "throughput_adjustment_interval_seconds",
            "throughput_adjustment_interval", "load_adjustment_interval_seconds", "load_adjustment_interval",
            "min_endpoint", "max_gpu_budget", "prefill_scale_up_queue_tokens", "prefill_scale_down_queue_tokens",
            "decode_scale_up_kv_rate", "decode_scale_down_kv_rate"}
# Keys PlannerConfig 1.6.1 declares; others it ignores silently (pydantic's default), so we say so.
KNOWN_KEYS = MODELLED | {
    "pre_deployment_sweeping_mode", "environment", "namespace", "backend", "mode", "log_dir",
    "max_throughput_scaling_replicas", "min_gpu_budget", "prefill_min_endpoint", "decode_min_endpoint",
    "control_api_port", "decode_engine_num_gpu", "prefill_engine_num_gpu", "profile_results_dir",
    "aic_interpolation", "ais_perf_model", "load_predictor", "prophet_window_size", "load_predictor_warmup_trace",
    "load_predictor_log1p", "kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points",
    "metric_pulling_prometheus_endpoint", "metric_pulling_prometheus_token", "metric_pulling_prometheus_token_file",
    "metric_pulling_prometheus_ssl_verify", "metric_pulling_prometheus_extra_query_params",
    "metric_pulling_prometheus_ca_bundle", "metric_pulling_prometheus_request_timeout_seconds",
    "metric_reporting_prometheus_port", "throughput_metrics_source", "model_name", "global_planner_namespace",
    "enable_throughput_scaling", "enable_load_scaling", "max_num_fpm_samples", "fpm_sample_bucket_size",
    "load_scaling_down_sensitivity", "load_min_observations", "speculative_nextn", "advisory",
    "enable_power_awareness", "total_gpu_power_limit", "report_interval_hours", "report_output_dir",
    "report_filename", "report_write_gzip_log", "live_dashboard_port", "scheduling", "plugin_registration",
    "isl", "osl",
}


class PlannerSettingsError(ValueError):
    """Settings 1.6.1's Planner would refuse; ``field`` names the setting."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PlannerSettings(BaseModel):
    """What the graph form and the spec expose. ``adjustment_interval_seconds`` is the interval of
    the loop that decides for the chosen target: the throughput loop for ``sla``, the load loop
    otherwise (1.6.1 turns load scaling on and throughput scaling off for every target but sla).

    Each setting is declared here once: the create form's fields and the API's
    (graphs/pydantic_fields.py) are made from these declarations, title and description included."""

    model_config = ConfigDict(extra="forbid")

    optimization_target: Target = Field(
        default="throughput", title="Optimization target",
        description="sla scales for the TTFT/ITL targets; the others react to queue depth and KV-cache load")
    ttft_ms: float = Field(default=DEFAULT_TTFT_MS, gt=0, title="TTFT target (ms)",
                           description="time to first token the sla target scales for")
    itl_ms: float = Field(default=DEFAULT_ITL_MS, gt=0, title="ITL target (ms)",
                          description="inter-token latency the sla target scales for")
    adjustment_interval_seconds: int = Field(
        default=DEFAULT_LOAD_INTERVAL, gt=0, le=86400, title="Adjustment interval (s)",
        description="How often it decides (the throughput loop for sla, the load loop otherwise)")
    min_replicas: int = Field(default=DEFAULT_MIN_ENDPOINT, ge=0, le=MAX_REPLICAS, title="Minimum replicas per pool")
    max_gpu_budget: int = Field(default=DEFAULT_MAX_GPU_BUDGET, ge=-1, le=100000, title="GPU budget",
                                description="-1: no GPU budget")
    # The load target's thresholds (1.6.1 needs all four for it; the others ignore them).
    prefill_scale_up_queue_tokens: int | None = Field(
        default=None, ge=0, title="Prefill: scale up above (queued tokens)", description="target load")
    prefill_scale_down_queue_tokens: int | None = Field(
        default=None, ge=0, title="Prefill: scale down below (queued tokens)", description="target load")
    decode_scale_up_kv_rate: float | None = Field(
        default=None, ge=0, le=1, title="Decode: scale up above (KV-cache use, 0-1)", description="target load")
    decode_scale_down_kv_rate: float | None = Field(
        default=None, ge=0, le=1, title="Decode: scale down below (KV-cache use, 0-1)", description="target load")

    @model_validator(mode="after")
    def _planner_rules(self) -> PlannerSettings:
        # PlannerConfig._validate_config, 1.6.1: a load target needs both thresholds of each pool,
        # the scale-up one above the scale-down one.
        if self.optimization_target == "load":
            for up, down in (("prefill_scale_up_queue_tokens", "prefill_scale_down_queue_tokens"),
                             ("decode_scale_up_kv_rate", "decode_scale_down_kv_rate")):
                hi, lo = getattr(self, up), getattr(self, down)
                if hi is None or lo is None:
                    raise ValueError(f"optimization target 'load' needs {up} and {down}")
                if hi <= lo:
                    raise ValueError(f"{up} ({hi}) must be greater than {down} ({lo})")
        return self

    @property
    def uses_latency_targets(self) -> bool:
        # 1.6.1 ignores ttft_ms/itl_ms for every target but sla (it logs a warning).
        return self.optimization_target == "sla"

    def config(self, *, mode: str = "disagg") -> dict[str, Any]:
        """The keys of the Planner's --config these settings own, as 1.6.1 names them."""
        out: dict[str, Any] = {"optimization_target": self.optimization_target, "mode": mode,
                               "min_endpoint": self.min_replicas, "max_gpu_budget": self.max_gpu_budget}
        if self.uses_latency_targets:
            out.update(ttft_ms=self.ttft_ms, itl_ms=self.itl_ms,
                       throughput_adjustment_interval_seconds=self.adjustment_interval_seconds)
        else:
            out["load_adjustment_interval_seconds"] = self.adjustment_interval_seconds
        for key in ("prefill_scale_up_queue_tokens", "prefill_scale_down_queue_tokens",
                    "decode_scale_up_kv_rate", "decode_scale_down_kv_rate"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def _first(data: dict, *keys: str, default=None):
    for key in keys:
        if key in data:
            return data[key]
    return default


def settings_from_config(data: dict[str, Any]) -> PlannerSettings:
    """The modelled settings of a --config object. Raises PlannerSettingsError."""
    target = data.get("optimization_target", "throughput")
    sla = target == "sla"
    interval_keys = (("throughput_adjustment_interval_seconds", "throughput_adjustment_interval") if sla
                     else ("load_adjustment_interval_seconds", "load_adjustment_interval"))
    raw = {
        "optimization_target": target,
        "ttft_ms": _first(data, "ttft_ms", "ttft", default=DEFAULT_TTFT_MS),
        "itl_ms": _first(data, "itl_ms", "itl", default=DEFAULT_ITL_MS),
        "adjustment_interval_seconds": _first(
            data, *interval_keys, default=DEFAULT_THROUGHPUT_INTERVAL if sla else DEFAULT_LOAD_INTERVAL),
        "min_replicas": data.get("min_endpoint", DEFAULT_MIN_ENDPOINT),
        "max_gpu_budget": data.get("max_gpu_budget", DEFAULT_MAX_GPU_BUDGET),
        **{k: data[k] for k in ("prefill_scale_up_queue_tokens", "prefill_scale_down_queue_tokens",
                                "decode_scale_up_kv_rate", "decode_scale_down_kv_rate") if k in data},
    }
    try:
        settings = PlannerSettings.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "config"
        raise PlannerSettingsError(field, err["msg"].removeprefix("Value error, ")) from None
    _check_intervals(data, settings)
    return settings


def _check_intervals(data: dict, settings: PlannerSettings) -> None:
    # With both loops on, 1.6.1 wants the load loop strictly faster than the throughput loop.
    if settings.optimization_target == "sla" and data.get("enable_load_scaling") in (True, "true", "1"):
        load = float(_first(data, "load_adjustment_interval_seconds", "load_adjustment_interval",
                            default=DEFAULT_LOAD_INTERVAL))
        if not math.isfinite(load) or load <= 0:
            raise PlannerSettingsError("load_adjustment_interval_seconds", "must be greater than 0")
        if load >= settings.adjustment_interval_seconds:
            raise PlannerSettingsError(
                "load_adjustment_interval_seconds",
                f"the load loop ({load:g}s) must be shorter than the throughput loop "
                f"({settings.adjustment_interval_seconds}s) when both scale")


def merge_config(data: dict[str, Any], settings: PlannerSettings, *, mode: str) -> dict[str, Any]:
    """``data`` with the modelled keys replaced by ``settings``; every other key kept."""
    kept = {k: v for k, v in data.items() if k not in MODELLED and k != "mode"}
    return {**kept, **settings.config(mode=mode)}


@dataclass(frozen=True)
class ConfigArg:
    """The Planner's --config as a component's command line carries it."""

    present: bool  # a --config flag exists
    inline: dict[str, Any] | None  # the JSON object, when it is inline JSON
    text: str = ""  # the raw value (a file path when not inline)


def config_arg(command: list[str] | None, args: list[str] | None) -> ConfigArg:
    """Raises PlannerSettingsError when --config is inline but not a JSON object (1.6.1 would try
    it as a file path, fail, and exit)."""
    value = flag_value(tokens(command, args), "--config")
    if value is None:
        return ConfigArg(False, None)
    text = value.strip()
    if not text.startswith("{"):
        return ConfigArg(True, None, value)  # a file path (a mounted ConfigMap): read at run time
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlannerSettingsError("--config", f"is not valid JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(data, dict):
        raise PlannerSettingsError("--config", "must be a JSON object")
    return ConfigArg(True, data, value)


def planner_settings(command: list[str] | None, args: list[str] | None) -> PlannerSettings | None:
    """The settings a planner component's command line declares (defaults when it has no inline
    config); None when the config is a file this host cannot read. Raises PlannerSettingsError."""
    arg = config_arg(command, args)
    if arg.present and arg.inline is None:
        return None
    return settings_from_config(arg.inline or {})


def unknown_keys(data: dict[str, Any]) -> list[str]:
    return sorted(k for k in data if k not in KNOWN_KEYS)


def planner_args(settings: PlannerSettings, *, mode: str, base: dict[str, Any] | None = None) -> list[str]:
    """``args`` for a planner component: ``--config`` and the JSON (compact, keys sorted, so that
    saving the same settings twice gives the same revision)."""
    return ["--config", json.dumps(merge_config(base or {}, settings, mode=mode), sort_keys=True,
                                   separators=(",", ":"))]


def graph_mode(roles: set[str]) -> str:
    """The Planner's ``mode`` for a graph with these worker roles."""
    if {"prefill", "decode"} <= roles:
        return "disagg"
    if "prefill" in roles:
        return "prefill"
    if "decode" in roles:
        return "decode"
    return "agg"


def local_config(data: dict[str, Any], settings: PlannerSettings, *, mode: str, backend: str, model_name: str,
                 prometheus_url: str, metrics_port: int) -> dict[str, Any]:
    """The --config the local runtime gives the real Planner: the user's settings, in the
    ``virtual`` environment, reading the control plane's Prometheus and publishing its own
    ``dynamo_planner_*`` metrics where that Prometheus scrapes them."""
    out = merge_config(data, settings, mode=mode)
    out.update(environment="virtual", backend=backend, model_name=model_name,
               metric_pulling_prometheus_endpoint=prometheus_url, metric_reporting_prometheus_port=metrics_port)
    out.pop("namespace", None)  # excluded by 1.6.1; DYN_NAMESPACE sets it
    return out
