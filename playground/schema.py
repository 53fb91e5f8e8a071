"""Typed shapes of the playground's JSON columns and of a reply's timing.

The browser measures a reply (arrival times of the SSE events it reads) and reports it with
the frontend's own breakdown; ``timing.py`` holds the same arithmetic in Python, and the
tests hold the two to each other."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_STOP_SEQUENCES = 4  # OpenAI's limit, which Dynamo's frontend also accepts


class ChatParams(BaseModel):
    """The sampling parameters a conversation was held with."""

    model_config = ConfigDict(extra="ignore")

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: list[str] = Field(default_factory=list, max_length=MAX_STOP_SEQUENCES)


class ServerTiming(BaseModel):
    """The frontend's breakdown of one reply (``nvext.timing``), as a waterfall:
    queue (waiting for a prefill worker), prefill, the estimated KV transfer to the decode
    worker, and decode (first token to last)."""

    model_config = ConfigDict(extra="ignore")

    queue_ms: float | None = None
    prefill_ms: float | None = None
    kv_transfer_ms: float | None = None
    decode_ms: float | None = None
    ttft_ms: float | None = None
    total_ms: float | None = None


class ReplyTiming(BaseModel):
    """What the client saw, plus what the frontend reported. Worker ids are strings: they are
    64-bit integers, beyond what a JavaScript number holds exactly."""

    model_config = ConfigDict(extra="ignore")

    ttft_ms: float | None = Field(default=None, ge=0)
    itl_mean_ms: float | None = Field(default=None, ge=0)
    itl_p90_ms: float | None = Field(default=None, ge=0)
    tokens_per_s: float | None = Field(default=None, ge=0)
    total_ms: float | None = Field(default=None, ge=0)
    chunks: int | None = Field(default=None, ge=0)
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)  # usage.prompt_tokens_details.cached_tokens
    finish_reason: str | None = Field(default=None, max_length=40)
    prefill_worker_id: str | None = Field(default=None, max_length=40, pattern=r"^\d+$")
    decode_worker_id: str | None = Field(default=None, max_length=40, pattern=r"^\d+$")
    server: ServerTiming | None = None
    error: str | None = Field(default=None, max_length=500)
    # Set when the reply came from Dynamo's mocker: the label and why, kept with the numbers.
    simulated: str | None = Field(default=None, max_length=500)


MAX_MESSAGES = 400
MAX_MESSAGE_CHARS = 256 * 1024


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str = Field(pattern=r"^(user|assistant)$")
    content: str = Field(default="", max_length=MAX_MESSAGE_CHARS)
    timing: ReplyTiming | None = None


class ConversationIn(BaseModel):
    """What the chat page posts to keep a conversation (all of it, every time)."""

    model_config = ConfigDict(extra="ignore")

    graph: str = Field(min_length=1, max_length=63)
    title: str = Field(default="", max_length=200)
    system_prompt: str = Field(default="", max_length=MAX_MESSAGE_CHARS)
    params: ChatParams = Field(default_factory=ChatParams)
    messages: list[MessageIn] = Field(default_factory=list, max_length=MAX_MESSAGES)
