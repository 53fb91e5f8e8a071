"""The load generator of bench/proxy.py: closed-loop simulated users on aiohttp (far less CPU
than aiperf, which leaves the machine to what is measured) that POST streamed chat requests
and stamp every SSE event as it arrives. The same code drives every arm. Also: CPU time of
process trees from /proc."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

WORDS = ["prefill", "decode", "cache", "transfer", "router", "frontend", "worker", "token", "latency", "batch",
         "queue", "block", "tensor", "kernel", "memory", "stream", "chunk", "schedule", "replica", "pool", "model"]


@dataclass
class Reply:
    ttft_ms: float
    gaps_ms: list[float]
    events: int  # SSE events (content, finish, usage, [DONE])
    content: int  # events that carry content


class Conn:
    """One simulated user: an aiohttp session holding one keep-alive connection, POSTing streamed
    chats and stamping each SSE event as its bytes arrive."""

    def __init__(self, host: str, port: int) -> None:
        self.base = f"http://{host}:{port}"
        self.session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Reply:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), auto_decompress=False)
        sent = {"Content-Type": "application/json", "Accept": "text/event-stream", **headers}
        started = time.perf_counter()
        async with self.session.post(self.base + path, data=body, headers=sent) as response:
            if response.status != 200:
                raise RuntimeError(f"{self.base}{path}: HTTP {response.status} {(await response.read())[:500]!r}")
            arrivals: list[float] = []
            events = 0
            buffer = b""
            async for data in response.content.iter_any():
                now = time.perf_counter()
                buffer += data
                *complete, buffer = buffer.split(b"\n\n")
                for event in complete:
                    events += 1
                    # Key order differs between servers (LiteLLM re-serialises): look for the field.
                    if b'"content":"' in event and b'"content":""' not in event:
                        arrivals.append(now)
        if not arrivals:
            raise RuntimeError(f"{self.base}{path}: no content events")
        gaps = [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
        return Reply((arrivals[0] - started) * 1000, gaps, events, len(arrivals))


def request_body(model: str, counter: list[int], max_tokens: int, prompt_words: int) -> bytes:
    counter[0] += 1
    rng = random.Random(counter[0])
    # A different prompt every time: no prefix-cache hit favours whichever arm runs later.
    prompt = f"[{counter[0]}] " + " ".join(rng.choice(WORDS) for _ in range(prompt_words))
    return json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
                       "max_tokens": max_tokens, "ignore_eos": True}).encode()


async def run_batch(port: int, path: str, headers: dict[str, str], concurrency: int, requests: int,
                    make_body, think_ms: float = 0.0, seed: int = 0) -> list[Reply]:
    """``requests`` streamed chats over ``concurrency`` keep-alive connections, each user waiting
    a random 0..``think_ms`` ms before each request (not part of its TTFT).

    Why the wait: a closed loop sends each request right after the previous reply ends, in step
    with the engine's own clock (the mocker schedules in steps of a few ms), so a fixed delay in
    front of it moves every request across the same step boundary or none: TTFT then jumps by a
    whole step (measured: +3.7 ms p50 for a relay that adds 0.2 ms). Random waits spread the
    arrivals over the step, so a delay costs TTFT what it costs on average."""
    conns = [Conn("127.0.0.1", port) for _ in range(concurrency)]
    rng = random.Random(seed)
    try:
        # Warm-up, not measured: opens every keep-alive connection (and, through a proxy, as
        # many pooled upstream connections), so that no measured request pays a handshake.
        await asyncio.gather(*(conn.post(path, make_body(), headers) for conn in conns))
        queue = list(range(requests))
        out: list[Reply] = []

        async def user(conn: Conn) -> None:
            while queue:
                queue.pop()
                if think_ms:
                    await asyncio.sleep(rng.uniform(0, think_ms) / 1000)
                out.append(await conn.post(path, make_body(), headers))

        await asyncio.gather(*(user(c) for c in conns))
        return out
    finally:
        for conn in conns:
            await conn.close()


def pct(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# --- processes ----------------------------------------------------------------------------------

def children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.setdefault(ppid, []).append(int(entry))
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and every descendant."""
    kids = children()
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += kids.get(current, [])
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of ``pids`` and all their threads, in nanosecond precision (schedstat: the
    clock-tick counters of /proc/<pid>/stat are 10 ms coarse, too coarse for one batch)."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "load_avg_at_end": os.getloadavg()}
