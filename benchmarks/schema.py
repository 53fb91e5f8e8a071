"""Typed shapes of the JSON columns of benchmark rows: what a run measured against (config),
what it found (results), and the arms of an A/B study. Read through these, never as dicts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Stats(BaseModel):
    """One aiperf metric as exported (milliseconds, tokens/s...), unrounded."""

    model_config = ConfigDict(extra="ignore")

    unit: str = ""
    avg: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None


class Step(BaseModel):
    """One aiperf invocation: one load point of a run (a sweep has several)."""

    model_config = ConfigDict(extra="ignore")

    index: int
    concurrency: int | None = None
    request_rate: float | None = None
    artifact: str  # the invocation's folder, relative to the run's artifact dir
    ttft: Stats = Field(default_factory=Stats)  # time_to_first_token, ms
    itl: Stats = Field(default_factory=Stats)  # inter_token_latency, ms
    request_latency: Stats = Field(default_factory=Stats)  # ms
    tokens_per_user: Stats = Field(default_factory=Stats)  # output_token_throughput_per_user, tokens/s
    request_throughput: float | None = None  # requests/s
    output_token_throughput: float | None = None  # tokens/s, all users
    tokens_per_gpu: float | None = None  # output tokens/s per GPU of the graph
    input_tokens: Stats = Field(default_factory=Stats)  # input_sequence_length
    output_tokens: Stats = Field(default_factory=Stats)  # output_sequence_length
    completed: int = 0
    errors: int = 0
    duration_s: float | None = None
    goodput: float | None = None  # requests/s meeting every SLO
    good_fraction: float | None = None


class TokenCounts(BaseModel):
    """Whose tokenizer counted the tokens of the report."""

    source: Literal["client", "server"]
    tokenizer: str  # a path or model id given to aiperf
    note: str = ""


class RunResults(BaseModel):
    model_config = ConfigDict(extra="ignore")

    steps: list[Step] = Field(default_factory=list)
    token_counts: TokenCounts | None = None
    slo: dict[str, float] = Field(default_factory=dict)  # ttft_ms / itl_ms used for goodput
    warnings: list[str] = Field(default_factory=list)

    @property
    def headline(self) -> Step | None:
        """The step a run is judged by: its only one, or a sweep's highest load."""
        return self.steps[-1] if self.steps else None


class RunConfig(BaseModel):
    """The graph as it was when the run started (the revision may be re-applied or scaled
    later; the run keeps what it measured)."""

    model_config = ConfigDict(extra="ignore")

    runtime: str = ""
    endpoint: str = ""
    model: str = ""
    revision: int | None = None
    replicas: dict[str, int] = Field(default_factory=dict)  # service name -> replicas
    prefill: int = 0  # replicas per role, summed over pools of that role
    decode: int = 0
    worker: int = 0
    gpus: int = 0  # every worker replica's GPUs; a GPU-less worker (mocker) counts as one
    # No worker asks a GPU (the mocker): ``gpus`` is then a budget of GPU-equivalents for A/B
    # studies and sizing, and there are no tokens per GPU to report.
    gpu_free: bool = False
    shape: str = ""  # p1d1, agg2: see benchmarks.shapes
    # Set when the measured workers were Dynamo's mocker: "simulated with Dynamo's mocker: <why>".
    # Every number of the run carries it (pages, CSV, reports, recommendations).
    simulated: str = ""

    @property
    def disaggregated(self) -> bool:
        return self.prefill > 0 or self.decode > 0


class Arm(BaseModel):
    """One arm of an A/B study: a graph shape, the graph that has it, and how far it got."""

    model_config = ConfigDict(extra="ignore")

    shape: str
    graph_id: int | None = None
    graph_name: str = ""
    variant: bool = True  # a graph the study created (False: the study's own graph)
    apply_op: int | None = None
    delete_op: int | None = None
    run_id: int | None = None
    phase: Literal["graph", "apply", "ready", "run", "cleanup", "done", "failed"] = "graph"
    started_phase_at: float | None = None  # epoch seconds, for the readiness timeout
    message: str = ""
    # What became of a variant once the study ended (studies._teardown): "" not yet; deleting:
    # its deployment's delete operation (delete_op) is under way; archived: not deployed, out of
    # the graph list, kept as the record of its runs; kept: left deployed (keep_variants);
    # failed: it could not be torn down and stays listed (teardown_message says why).
    teardown: Literal["", "deleting", "archived", "kept", "failed"] = ""
    teardown_message: str = ""
