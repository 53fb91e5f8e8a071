"""Benchmark profiles: named starting points for a run's load, and the one validation of the
parameters every run is made of (the form, the API and A/B studies all come through
``resolve``). Pure: no database, no processes.

The defaults are small on purpose: this control plane may share a two-core host with the
graphs it measures, and a load generator that starves the engine measures itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.errors import Refused

MAX_INPUT_TOKENS = 32_768
MAX_OUTPUT_TOKENS = 8_192
MAX_REQUEST_RATE = 10_000.0
MAX_WARMUP = 1_000
MAX_SWEEP_POINTS = 8
MIN_SECONDS = 10


class ProfileError(Refused, ValueError):
    """Parameters that cannot make a run. ``errors`` maps a field name to its messages."""

    status = 400

    def __init__(self, errors: dict[str, list[str]], *, status: int | None = None):
        """``status``: 400 for a parameter the request got wrong; 409 where the graph's state
        (no objectives) is what is missing; 422 for a rule no schema states."""
        self.errors = errors
        if status is not None:
            self.status = status
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))

    def as_dict(self) -> dict:
        return self.errors


class RunParams(BaseModel):
    """What one benchmark run asks of aiperf. Stored on the run as given (after defaults)."""

    model_config = ConfigDict(extra="forbid")

    input_tokens_mean: int = Field(ge=1, le=MAX_INPUT_TOKENS)
    input_tokens_stddev: float = Field(default=0, ge=0, le=MAX_INPUT_TOKENS)
    output_tokens_mean: int = Field(ge=1, le=MAX_OUTPUT_TOKENS)
    output_tokens_stddev: float = Field(default=0, ge=0, le=MAX_OUTPUT_TOKENS)
    # Load: a fixed number of requests in flight, a request rate (optionally capped by
    # concurrency), or a sweep: one aiperf invocation per concurrency, in order.
    concurrency: int | None = Field(default=None, ge=1)
    request_rate: float | None = Field(default=None, gt=0, le=MAX_REQUEST_RATE)
    sweep: list[int] = Field(default_factory=list, max_length=MAX_SWEEP_POINTS)
    # Length: a request count or a duration (seconds), per invocation.
    request_count: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0)
    warmup_requests: int = Field(default=0, ge=0, le=MAX_WARMUP)
    streaming: bool = True
    # The mocker and real engines stop at EOS; benchmarks want the asked-for output length.
    ignore_eos: bool = True
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    # The wall-clock bound of the whole run, every sweep point included.
    max_seconds: int = Field(default=300, ge=MIN_SECONDS)

    @model_validator(mode="after")
    def _coherent(self) -> RunParams:
        errors: dict[str, list[str]] = {}
        limit_c, limit_n, limit_s = (settings.BENCHMARK_MAX_CONCURRENCY, settings.BENCHMARK_MAX_REQUESTS,
                                     settings.BENCHMARK_MAX_SECONDS)
        if self.concurrency is not None and self.concurrency > limit_c:
            errors["concurrency"] = [f"at most {limit_c} requests in flight (BENCHMARK_MAX_CONCURRENCY)"]
        bad_points = [c for c in self.sweep if not 1 <= c <= limit_c]
        if bad_points:
            errors["sweep"] = [f"every concurrency of a sweep must be from 1 to {limit_c}; not {bad_points[0]}"]
        elif self.sweep and (len(self.sweep) < 2 or sorted(set(self.sweep)) != self.sweep):
            errors["sweep"] = ["a sweep is two or more concurrencies in increasing order, without repeats"]
        if self.sweep and (self.concurrency is not None or self.request_rate is not None):
            errors.setdefault("sweep", []).append("a sweep sets the concurrency itself: leave concurrency and "
                                                  "request_rate empty")
        if not self.sweep and self.concurrency is None and self.request_rate is None:
            errors["concurrency"] = ["set a concurrency, a request rate, or a sweep"]
        if (self.request_count is None) == (self.duration_s is None):
            errors["request_count"] = ["set either a request count or a duration (duration_s), not both"]
        if self.request_count is not None and self.request_count > limit_n:
            errors["request_count"] = [f"at most {limit_n} requests per invocation (BENCHMARK_MAX_REQUESTS)"]
        if self.max_seconds > limit_s:
            errors["max_seconds"] = [f"a run is bounded to at most {limit_s} s (BENCHMARK_MAX_SECONDS)"]
        if self.duration_s is not None and self.duration_s * self.points > self.max_seconds:
            errors["duration_s"] = [f"{self.points} load points of {self.duration_s:g} s does not fit in max_seconds "
                                    f"({self.max_seconds} s)"]
        if self.input_tokens_stddev > self.input_tokens_mean:
            errors["input_tokens_stddev"] = ["the spread may not exceed the mean"]
        if self.output_tokens_stddev > self.output_tokens_mean:
            errors["output_tokens_stddev"] = ["the spread may not exceed the mean"]
        if errors:
            raise ProfileError(errors)
        return self

    @property
    def points(self) -> int:
        return len(self.sweep) or 1

    def loads(self) -> list[tuple[int | None, float | None]]:
        """(concurrency, request rate) of each aiperf invocation, in order."""
        if self.sweep:
            return [(c, None) for c in self.sweep]
        return [(self.concurrency, self.request_rate)]

    def describe(self) -> str:
        load = (f"concurrency sweep {', '.join(map(str, self.sweep))}" if self.sweep else
                " at ".join(filter(None, [f"{self.request_rate:g} req/s" if self.request_rate else "",
                                          f"concurrency {self.concurrency}" if self.concurrency else ""])))
        size = f"{self.request_count} requests" if self.request_count else f"{self.duration_s:g} s"
        return (f"{'streaming ' if self.streaming else ''}chat, {load}, {size}, "
                f"{self.input_tokens_mean}±{self.input_tokens_stddev:g} in / "
                f"{self.output_tokens_mean}±{self.output_tokens_stddev:g} out tokens")


@dataclass(frozen=True)
class Profile:
    key: str
    title: str
    description: str
    defaults: dict[str, Any]


PROFILES: dict[str, Profile] = {
    p.key: p
    for p in [
        Profile("streaming-chat", "Streaming chat, concurrency 50",
                "Streaming chat completions with 50 requests in flight: enough load to queue prefill behind "
                "decode on an aggregated graph, which is what disaggregation fixes.",
                {"concurrency": 50, "request_count": 150, "input_tokens_mean": 512, "output_tokens_mean": 128}),
        Profile("long", "Long prompts, long outputs",
                "2,048-token prompts and 512-token answers: prefill-heavy and decode-heavy at once.",
                {"concurrency": 4, "request_count": 16, "input_tokens_mean": 2048, "input_tokens_stddev": 128,
                 "output_tokens_mean": 512, "output_tokens_stddev": 32}),
        Profile("short", "Short prompts, short outputs",
                "128-token prompts and 32-token answers: chat-like, latency-bound.",
                {"concurrency": 8, "request_count": 64, "input_tokens_mean": 128, "input_tokens_stddev": 16,
                 "output_tokens_mean": 32, "output_tokens_stddev": 4}),
        Profile("custom", "Custom",
                "Your own token lengths and spread, concurrency or request rate, request count or duration, "
                "or a concurrency sweep.",
                {"concurrency": 4, "request_count": 40, "input_tokens_mean": 256, "output_tokens_mean": 64}),
    ]
}


def resolve(profile: str, overrides: dict[str, Any] | None = None) -> RunParams:
    """The parameters of a run: the profile's defaults, then the caller's non-empty values.
    Raises ProfileError naming each bad field."""
    if profile not in PROFILES:
        raise ProfileError({"profile": [f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}"]})
    data: dict[str, Any] = {"max_seconds": settings.BENCHMARK_DEFAULT_SECONDS, **PROFILES[profile].defaults}
    given = {k: v for k, v in (overrides or {}).items() if v is not None and v != "" and v != []}
    # A caller choosing its own load or length replaces the profile's, rather than clashing with it.
    if {"request_rate", "sweep"} & given.keys():
        data.pop("concurrency", None)
    if "duration_s" in given:
        data.pop("request_count", None)
    data.update(given)
    try:
        return RunParams.model_validate(data)
    except ProfileError:
        raise
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for err in exc.errors():
            ctx_error = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_error, ProfileError):
                for key, messages in ctx_error.errors.items():
                    errors.setdefault(key, []).extend(messages)
                continue
            field = str(err["loc"][0]) if err.get("loc") else "params"
            errors.setdefault(field, []).append(err["msg"])
        raise ProfileError(errors) from None
