"""The deployment-environment side of Dynamo's virtual connector, one process per graph.

Dynamo 1.6.1's Planner, in its ``virtual`` environment, publishes each scaling decision
through ``VirtualConnectorCoordinator`` and waits until the environment reports it done; the
environment reads decisions with ``VirtualConnectorClient`` (``wait``, ``get``, ``complete``),
as ``dynamo/planner/connectors/virtual.py`` and its integration test in the wheel show. This
process is that client. It is Django-free and runs under the local operator's supervisor,
because a ``DistributedRuntime`` is process-global and reads its discovery folder and etcd
endpoint from the environment: one graph, one process.

It talks to the operator through two files in its folder:

* ``decisions.jsonl``: one JSON line per decision received (appended, never rewritten);
* ``acks.json``: the decision ids the operator has executed; each is completed once.

Measured on 1.6.1: the coordinator keeps its state in etcd even when discovery is the file
backend (``ETCD_ENDPOINTS``); ``wait()`` can return for the acknowledgement it just wrote,
and ``get()`` then answers the unset decision (ids and counts of -1): both are skipped here."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

DECISIONS = "decisions.jsonl"
ACKS = "acks.json"
POLL_SECONDS = 0.3


def read_acks(folder: Path) -> set[int]:
    try:
        return {int(i) for i in json.loads((folder / ACKS).read_text())}
    except (OSError, ValueError, TypeError):
        return set()


def write_acks(folder: Path, ids: set[int]) -> None:
    """Atomic: the bridge never reads half a file."""
    tmp = folder / (ACKS + ".tmp")
    tmp.write_text(json.dumps(sorted(ids)))
    os.replace(tmp, folder / ACKS)


def read_decisions(folder: Path, offset: int = 0) -> tuple[list[dict], int]:
    """Complete lines after byte ``offset``, and the offset after them."""
    try:
        with open(folder / DECISIONS, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out, offset + end


def _count(value: int) -> int | None:
    return None if value is None or value < 0 else int(value)


async def serve(folder: Path, namespace: str) -> None:
    from dynamo._core import DistributedRuntime, VirtualConnectorClient

    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    client = VirtualConnectorClient(runtime, namespace)
    pending: dict[int, object] = {}  # decision id -> the event to complete
    completed: set[int] = set()
    seen: set[int] = set()
    (folder / "ready").write_text(str(os.getpid()))

    async def acknowledge() -> None:
        while True:
            for decision_id in sorted(read_acks(folder) & set(pending)):
                await client.complete(pending.pop(decision_id))
                completed.add(decision_id)
                print(f"completed decision {decision_id}", flush=True)
            await asyncio.sleep(POLL_SECONDS)

    acker = asyncio.create_task(acknowledge())
    try:
        while True:
            await client.wait()
            event = await client.get()
            decision_id = int(event.decision_id)
            if decision_id < 0 or decision_id in seen:
                await asyncio.sleep(POLL_SECONDS)
                continue
            seen.add(decision_id)
            pending[decision_id] = event
            line = {"decision_id": decision_id, "prefill": _count(event.num_prefill_workers),
                    "decode": _count(event.num_decode_workers), "at": time.time()}
            with open(folder / DECISIONS, "a") as handle:
                handle.write(json.dumps(line) + "\n")
            print(f"received decision {decision_id}: prefill {line['prefill']}, decode {line['decode']}", flush=True)
    finally:
        acker.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="the folder shared with the local operator")
    parser.add_argument("--namespace", default="dynamo", help="the graph's Dynamo namespace")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(serve(args.dir, args.namespace))


if __name__ == "__main__":
    main()
