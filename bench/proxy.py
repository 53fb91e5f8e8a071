"""Direct-to-frontend against through-the-playground-proxy: TTFT and per-chunk overhead.

    python bench/proxy.py                 # about 45-60 s on a 2-core machine
    python bench/proxy.py --rounds 5      # longer, steadier

Starts its own Dynamo graph (frontend + mocker prefill and decode, tests/dynamo_fixtures) and
the control plane under uvicorn (its own SQLite database in a temporary folder), then sends
the same streamed chat requests, arms interleaved in shuffled order within every round, at
concurrency 1 and 16. The client is a small closed-loop HTTP/1.1 reader on asyncio (stdlib)
that stamps every SSE content event as it arrives; the same code drives every arm.

Arms:
  direct            client → frontend, keep-alive connection (the baseline)
  direct-fresh      client → frontend, a new connection per request
  proxy             client → controlplane.asgi (the full middleware stack) → frontend,
                    the proxy's pooled keep-alive upstream
  proxy-lean        client → playground.asgi (the chat endpoint outside the middleware stack)
  proxy-lean-fresh  the same with PLAYGROUND_UPSTREAM_KEEPALIVE=0 (a new upstream connection per chat)

On a reused connection the Dynamo 1.6.1 frontend releases the first token ~35-40 ms late
(Nagle against delayed ACK; ai-dynamo/dynamo#14643) when the first token comes soon after the
response headers (short prompts). Keep-alive arms pay it, fresh ones do not: each proxy arm is
compared with the direct arm that pays the same stall. Absolute TTFTs are the mocker's.

Reported per arm: TTFT p50/p95/p99, the per-chunk gap (inter-event time) p50/p95/p99, n,
the Δ and ratio of TTFT p50 against its baseline, the per-chunk Δ p50, SSE events per reply
(must equal direct's), the proxy's own time from its Server-Timing header, and the proxy
process's CPU per request."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ["prefill", "decode", "cache", "transfer", "router", "frontend", "worker", "token", "latency", "batch",
         "queue", "block", "tensor", "kernel", "memory", "stream", "chunk", "schedule", "replica", "pool", "model"]


# --- setup (runs in a subprocess with Django) ----------------------------------------------------

def django_setup_main(model: str, endpoint: str) -> None:
    """Migrate the bench database, create an operator with a token and a graph served at
    ``endpoint``; print the token."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command

    from accounts.tokens import token_create
    from graphs.catalog import build_spec
    from graphs.models import Deployment
    from graphs.services import graph_create

    call_command("migrate", verbosity=0)
    user = User.objects.create_user("bench-operator", password="bench-pass-1")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    graph = graph_create(spec=build_spec(template="mocker-disagg", name="bench", model=model, backend="mocker"))
    Deployment.objects.create(graph=graph, revision=graph.head, active=True, state="ready", endpoint=endpoint)
    print(token_create(user=user, name="bench", via="system")[1])


# --- the client ---------------------------------------------------------------------------------

@dataclass
class Reply:
    ttft_ms: float
    gaps_ms: list[float]
    events: int
    proxy_ms: float | None


class Conn:
    """One HTTP/1.1 connection that POSTs and reads a chunked SSE reply."""

    def __init__(self, host: str, port: int, *, fresh: bool) -> None:
        self.host, self.port, self.fresh = host, port, fresh
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)  # TCP_NODELAY is on

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Reply:
        if self.writer is None or self.fresh:
            await self.close()
            await self._open()
        head = [f"POST {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Content-Type: application/json",
                f"Content-Length: {len(body)}", "Accept: text/event-stream"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        if self.fresh:
            head.append("Connection: close")
        started = time.perf_counter()
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        status_and_headers = await self.reader.readuntil(b"\r\n\r\n")
        lines = status_and_headers.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if status != 200 or "chunked" not in hdrs.get("transfer-encoding", ""):
            raise RuntimeError(f"{path}: HTTP {status} {hdrs}")
        proxy_ms = None
        for part in hdrs.get("server-timing", "").split(","):
            if part.strip().startswith("proxy;dur="):
                proxy_ms = float(part.strip()[len("proxy;dur="):])
        arrivals: list[float] = []
        events = 0
        buffer = b""
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                break
            data = (await self.reader.readexactly(size + 2))[:-2]
            now = time.perf_counter()
            buffer += data
            *complete, buffer = buffer.split(b"\n\n")
            for event in complete:
                events += 1
                if b'"delta":{"content":"' in event and b'"delta":{"content":""' not in event:
                    arrivals.append(now)
        if self.fresh:
            await self.close()
        if not arrivals:
            raise RuntimeError(f"{path}: no content events")
        gaps = [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
        return Reply((arrivals[0] - started) * 1000, gaps, events, proxy_ms)


@dataclass
class Arm:
    name: str
    port: int
    path: str
    fresh: bool
    headers: dict[str, str]
    pid: int | None = None  # the proxy process, for its CPU time
    replies: dict[int, list[Reply]] = field(default_factory=dict)
    cpu_s: dict[int, float] = field(default_factory=dict)
    requests: dict[int, int] = field(default_factory=dict)


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_body(model: str, counter: list[int], max_tokens: int, prompt_words: int) -> bytes:
    counter[0] += 1
    rng = random.Random(counter[0])
    # A different prompt every time: no prefix-cache hit favours whichever arm runs later.
    prompt = f"[{counter[0]}] " + " ".join(rng.choice(WORDS) for _ in range(prompt_words))
    return json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
                       "max_tokens": max_tokens, "ignore_eos": True, "seed": 42}).encode()


async def run_batch(arm: Arm, concurrency: int, requests: int, make_body) -> None:
    conns = [Conn("127.0.0.1", arm.port, fresh=arm.fresh) for _ in range(concurrency)]
    try:
        # Warm-up, not measured: opens every keep-alive connection (and, through the proxy, as
        # many pooled upstream connections), so that no measured request pays a handshake.
        await asyncio.gather(*(conn.post(arm.path, make_body(), arm.headers) for conn in conns))
        queue = list(range(requests))
        out: list[Reply] = []
        cpu_before = cpu_seconds(arm.pid)

        async def user(conn: Conn) -> None:
            while queue:
                queue.pop()
                out.append(await conn.post(arm.path, make_body(), arm.headers))

        await asyncio.gather(*(user(c) for c in conns))
        arm.cpu_s[concurrency] = arm.cpu_s.get(concurrency, 0.0) + cpu_seconds(arm.pid) - cpu_before
        arm.requests[concurrency] = arm.requests.get(concurrency, 0) + requests
        arm.replies.setdefault(concurrency, []).extend(out)
    finally:
        for conn in conns:
            await conn.close()


# --- report -------------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


BASELINE = {"direct": "direct", "direct-fresh": "direct-fresh", "proxy": "direct", "proxy-lean": "direct",
            "proxy-lean-fresh": "direct-fresh"}


def report(arms: list[Arm], concurrencies: list[int]) -> None:
    by_name = {a.name: a for a in arms}
    header = (f"{'conc':>4} {'arm':<16} {'n':>4} {'TTFT p50':>9} {'p95':>7} {'p99':>7} {'vs':<12} {'ΔTTFT p50':>9} "
              f"{'ratio':>6} {'chunk p50':>9} {'p95':>6} {'p99':>6} {'n gaps':>6} {'Δchunk p50':>10} "
              f"{'events':>7} {'proxy ms p50':>12} {'CPU ms/req':>10}")
    print(header)
    print("-" * len(header))
    for conc in concurrencies:
        for arm in arms:
            replies = arm.replies.get(conc, [])
            if not replies:
                continue
            base = by_name[BASELINE[arm.name]].replies[conc]
            ttft = [r.ttft_ms for r in replies]
            gaps = [g for r in replies for g in r.gaps_ms]
            base_ttft = pct([r.ttft_ms for r in base], 0.5)
            base_gap = pct([g for r in base for g in r.gaps_ms], 0.5)
            events = statistics.mode([r.events for r in replies])
            proxy = [r.proxy_ms for r in replies if r.proxy_ms is not None]
            cpu = arm.cpu_s.get(conc, 0.0) * 1000 / arm.requests[conc] if arm.pid else None
            is_base = BASELINE[arm.name] == arm.name
            print(f"{conc:>4} {arm.name:<16} {len(replies):>4} {pct(ttft, .5):>9.1f} {pct(ttft, .95):>7.1f} "
                  f"{pct(ttft, .99):>7.1f} {'—' if is_base else BASELINE[arm.name]:<12} "
                  f"{'' if is_base else f'{pct(ttft, .5) - base_ttft:+.1f}':>9} "
                  f"{'' if is_base else f'{pct(ttft, .5) / base_ttft:.2f}':>6} "
                  f"{pct(gaps, .5):>9.2f} {pct(gaps, .95):>6.2f} {pct(gaps, .99):>6.2f} {len(gaps):>6} "
                  f"{'' if is_base else f'{pct(gaps, .5) - base_gap:+.3f}':>10} {events:>7} "
                  f"{f'{pct(proxy, .5):.2f}' if proxy else '':>12} {f'{cpu:.1f}' if cpu is not None else '':>10}")
    print("\nTTFT and chunk gaps in ms; Δ and ratio against the direct arm that pays the same first-token stall;\n"
          "'events' is the most common number of SSE events per reply (content + finish + [DONE]);\n"
          "'proxy ms' is the proxy's own time from its Server-Timing header (admission + relaying the headers).")


# --- main ---------------------------------------------------------------------------------------

def start_graph_retrying(root: Path, attempts: int = 3):
    """tests/dynamo_fixtures.start_graph, again on another port if another graph on this shared
    machine took ours between the check and the bind; a failed attempt's processes are killed."""
    from graphs.runtimes.processes import proc_stat
    from tests.dynamo_fixtures import start_graph

    for attempt in range(1, attempts + 1):
        folder = root / f"graph-{attempt}"
        try:
            return start_graph(folder)
        except RuntimeError:
            for pidfile in (folder / "pids").glob("*.pid"):
                rec = json.loads(pidfile.read_text())
                stat = proc_stat(int(rec["pid"]))
                if stat and stat[2] == int(rec["start_time"]):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(int(rec["pgid"]), signal.SIGKILL)
            if attempt == attempts:
                raise
            print(f"graph start failed (attempt {attempt}), retrying", file=sys.stderr)
    raise AssertionError("unreachable")


def start_proxy(env: dict[str, str], app: str, port: int, keepalive: bool) -> subprocess.Popen:
    env = {**env, "PLAYGROUND_UPSTREAM_KEEPALIVE": "1" if keepalive else "0"}
    return subprocess.Popen([sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1",
                             "--port", str(port), "--loop", "uvloop", "--no-access-log", "--log-level", "warning",
                             "--lifespan", "off"], cwd=ROOT, env=env)


def wait_http(url: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=0.5)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--c1-requests", type=int, default=8, help="requests per arm and round at concurrency 1")
    parser.add_argument("--c16-requests", type=int, default=32, help="requests per arm and round at concurrency 16")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--prompt-words", type=int, default=30)
    parser.add_argument("--setup", nargs=2, metavar=("MODEL", "ENDPOINT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setup:
        django_setup_main(*args.setup)
        return 0

    from graphs.runtimes.processes import allocate_ports
    from tests.dynamo_fixtures import MODEL

    began = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="cp-bench-proxy-"))
    # BENCH_DATABASE_URL: an empty database to use instead of SQLite (e.g. PostgreSQL, whose
    # connections persist; SQLite's are opened per request, which shows in 'proxy ms').
    database = os.environ.get("BENCH_DATABASE_URL") or f"sqlite:///{tmp}/bench.sqlite3"
    env = {**os.environ, "CONTROLPLANE_VAR_DIR": str(tmp / "var"), "DATABASE_URL": database,
           "DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "bench-only", "DJANGO_SECURE_TLS": "0", "LOG_LEVEL": "WARNING",
           "PLAYGROUND_RATE_PER_MINUTE": "1000000", "PLAYGROUND_MAX_CONCURRENT_STREAMS": "1000",
           "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    graph = start_graph_retrying(tmp)
    proxies: list[subprocess.Popen] = []
    ok = False
    try:
        setup = subprocess.run([sys.executable, __file__, "--setup", MODEL, graph.endpoint], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=60, check=True)
        token = setup.stdout.strip().splitlines()[-1]
        ports = allocate_ports(3, 33000, 34000, set())
        proxies = [start_proxy(env, "controlplane.asgi:application", ports[0], True),
                   start_proxy(env, "playground.asgi:application", ports[1], True),
                   start_proxy(env, "playground.asgi:application", ports[2], False)]
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/healthz")
        counter = [0]

        def make_body() -> bytes:
            return request_body(graph.model, counter, args.max_tokens, args.prompt_words)

        probe = json.loads(make_body())
        probe["stream"] = False
        prompt_tokens = httpx.post(f"{graph.endpoint}/v1/chat/completions", json=probe, timeout=10
                                   ).json()["usage"]["prompt_tokens"]
        print(f"graph and proxies up in {time.monotonic() - began:.1f} s; {os.cpu_count()} cores; {args.rounds} "
              f"rounds; {prompt_tokens}-token prompts, {args.max_tokens} output tokens; database "
              f"{database.split(':', 1)[0]}")
        auth = {"Authorization": f"Token {token}"}
        chat = "/api/playground/bench/v1/chat/completions"
        arms = [Arm("direct", graph.port, "/v1/chat/completions", False, {}),
                Arm("direct-fresh", graph.port, "/v1/chat/completions", True, {}),
                Arm("proxy", ports[0], chat, False, auth, proxies[0].pid),
                Arm("proxy-lean", ports[1], chat, False, auth, proxies[1].pid),
                Arm("proxy-lean-fresh", ports[2], chat, False, auth, proxies[2].pid)]

        plan = [(1, args.c1_requests), (16, args.c16_requests)]
        rng = random.Random(1)

        async def run_all() -> None:
            for _ in range(args.rounds):
                for conc, requests in plan:
                    order = arms[:]
                    rng.shuffle(order)
                    for arm in order:
                        await run_batch(arm, conc, requests, make_body)

        asyncio.run(run_all())
        report(arms, [c for c, _ in plan])
        print(f"\ntotal {time.monotonic() - began:.1f} s")
        ok = True
    finally:
        for proc in proxies:
            proc.terminate()
        for proc in proxies:
            proc.wait(timeout=10)
        graph.supervisor.stop_all(grace=3.0)
        if ok:  # on failure the folder keeps the graph's logs
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
