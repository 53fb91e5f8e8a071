"""The arithmetic behind the numbers under every playground reply, from the arrival times of its
SSE events, as the tests expect it: ``static/js/playground-stream.js`` computes them in the
browser (``summarise``), and the tests feed both the same input.

Definitions (times in ms, measured by the client):
* TTFT: request sent → first event that carries content.
* Inter-token latency: the gaps between consecutive content events. A chunk may carry more
  than one token (the detokenizer merges partial UTF-8 byte tokens), so these are per-chunk
  gaps, which is what a reader sees.
* Tokens per second: completion tokens after the first, over the time from the first
  content event to the last (the decode rate).

The frontend's own ``nvext.timing.ttft_ms`` is queue + prefill on the prefill worker. In a
disaggregated graph the first token a client sees comes later: after the hand-off to the
decode worker (about 50 ms with the 1.6.1 mocker here, fresh connection or not). The
dynamo-offline notes also report a ~35 ms first-token stall on reused connections (Nagle;
ai-dynamo/dynamo#14643)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarise(start: float, arrivals: Sequence[float], completion_tokens: int | None = None,
              end: float | None = None) -> dict:
    """``start`` and ``arrivals`` (content events) in ms on one clock; ``end`` is when the
    stream finished (defaults to the last arrival)."""
    out: dict = {"chunks": len(arrivals), "ttft_ms": None, "itl_mean_ms": None, "itl_p90_ms": None,
                 "tokens_per_s": None, "total_ms": None}
    if end is not None:
        out["total_ms"] = round(end - start, 3)
    if not arrivals:
        return out
    out["ttft_ms"] = round(arrivals[0] - start, 3)
    if out["total_ms"] is None:
        out["total_ms"] = round(arrivals[-1] - start, 3)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    if gaps:
        out["itl_mean_ms"] = round(sum(gaps) / len(gaps), 3)
        out["itl_p90_ms"] = round(percentile(gaps, 0.9), 3)
    decode_ms = arrivals[-1] - arrivals[0]
    tokens = completion_tokens if completion_tokens is not None else len(arrivals)
    if decode_ms > 0 and tokens > 1:
        out["tokens_per_s"] = round((tokens - 1) / (decode_ms / 1000.0), 2)
    return out


def server_breakdown(timing: dict | None) -> dict | None:
    """``nvext.timing`` of the finish chunk → the waterfall's segments. The KV transfer is the
    frontend's estimate; it is not part of its ttft_ms (prefill_wait + prefill)."""
    if not timing:
        return None

    def num(key: str) -> float | None:
        value = timing.get(key)
        return float(value) if isinstance(value, int | float) else None

    ttft, total = num("ttft_ms"), num("total_time_ms")
    return {
        "queue_ms": num("prefill_wait_time_ms"),
        "prefill_ms": num("prefill_time_ms"),
        "kv_transfer_ms": num("kv_transfer_estimated_latency_ms"),
        "decode_ms": round(total - ttft, 3) if ttft is not None and total is not None else None,
        "ttft_ms": ttft,
        "total_ms": total,
    }
