"""What the OpenAI endpoint's CPU per streamed chunk is made of: a cost per request and a cost
per chunk, for this endpoint and for the Dynamo frontend behind it, fitted from two reply
lengths.

    python bench/proxy_cost.py                  # ~7 min: bench/proxy.py twice, 8 and 256 tokens

Runs ``bench/proxy.py --rounds 1 --litellm ''`` with ``--max-tokens`` 8 and then 256 (each
run measures the endpoint and the frontend side by side), turns each arm's CPU per event into
CPU per request (events per reply times CPU per event) and fits ``request + chunks x chunk``
through the two points, per concurrency and arm: the endpoint as ``make up`` serves it (its
stream worker), the same relayed by two page workers without one, and the bare relay (the floor
of any process in the data path). The ratio of the per-chunk costs is what CPU per chunk / the
frontend's tends to with long replies, whatever the per-request work costs.

Writes bench/results/proxy-cost.json (both runs' figures and the fit)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402

LENGTHS = (8, 256)
# bench/proxy.py's arms whose own CPU it measures -> the name in the fit
ARMS = {"proxy": "endpoint", "proxy-pw": "endpoint_page_workers_relaying", "relay": "bare_relay"}


def run(max_tokens: int, out: Path) -> dict:
    subprocess.run([sys.executable, "bench/proxy.py", "--rounds", "1", "--litellm", "", "--max-tokens",
                    str(max_tokens), "--out", str(out)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def fit(points: list[tuple[float, float]]) -> dict:
    """(chunks per reply, ms per reply) at two lengths -> ms per request and per chunk."""
    (n1, c1), (n2, c2) = points
    chunk = (c2 - c1) / (n2 - n1)
    return {"request_ms": round(c1 - n1 * chunk, 3), "chunk_ms": round(chunk, 4)}


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="cp-bench-proxy-cost-"))
    runs = {n: run(n, tmp / f"proxy-{n}.json") for n in LENGTHS}
    out: dict = {"runs": {}, "fit": {}}
    for n, result in runs.items():
        out["runs"][f"max_tokens={n}"] = {"date": result["date"], "command": result["command"],
                                          "arms": {k: {f: v[f] for f in ("events_per_reply", "cpu_ms_per_event",
                                                                         "frontend_cpu_ms_per_event") if f in v}
                                                   for k, v in result["arms"].items()}}
    print(f"{'concurrency':<12} {'who':<22} {'ms per request':>15} {'ms per chunk':>13}")
    for conc in (1, 16):
        directs = [runs[n]["arms"][f"direct@c{conc}"] for n in LENGTHS]
        theirs = fit([(d["events_per_reply"], d["events_per_reply"] * d["frontend_cpu_ms_per_event"])
                      for d in directs])
        row: dict = {"frontend": theirs}
        for arm in ARMS:
            if not all(f"{arm}@c{conc}" in runs[n]["arms"] for n in LENGTHS):
                continue
            points = [runs[n]["arms"][f"{arm}@c{conc}"] for n in LENGTHS]
            ours = fit([(a["events_per_reply"], a["events_per_reply"] * a["cpu_ms_per_event"]) for a in points])
            row[ARMS[arm]] = {**ours, "chunk_ratio": round(ours["chunk_ms"] / theirs["chunk_ms"], 3),
                              "request_ratio": round(ours["request_ms"] / theirs["request_ms"], 3)}
        out["fit"][f"c{conc}"] = row
        for who, f in row.items():
            ratios = (f" ({f['request_ratio']:.2f} / {f['chunk_ratio']:.2f} of the frontend's)"
                      if "chunk_ratio" in f else "")
            print(f"{conc:<12} {who:<22} {f['request_ms']:>15.3f} {f['chunk_ms']:>13.4f}{ratios}")
    path = record.write("proxy-cost", out)
    print(f"written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
