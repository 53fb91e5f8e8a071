"""Publishes scaling decisions as Dynamo 1.6.1's Planner does in its virtual environment: the real
``VirtualConnectorCoordinator`` from dynamo._core, the calls ``VirtualConnector`` makes
(``update_scaling_decision``, then ``wait_for_scaling_completion``; see
dynamo/planner/connectors/virtual.py). Run as a process (a DistributedRuntime is process-global)
with DYN_FILE_KV and ETCD_ENDPOINTS of the graph to drive:

    python tests/planner_publisher.py NAMESPACE PREFILL:DECODE [PREFILL:DECODE ...]

"-" leaves a pool unset (the coordinator keeps its last value). Prints one JSON line per
decision once the environment has acknowledged it."""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def main(namespace: str, decisions: list[str]) -> None:
    from dynamo._core import DistributedRuntime, VirtualConnectorCoordinator

    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    # The Planner's defaults are 10 s checks for up to 30 min; a test wants faster answers.
    coordinator = VirtualConnectorCoordinator(runtime, namespace, 1, 120, 120)
    await coordinator.async_init()
    for text in decisions:
        prefill, decode = (None if part == "-" else int(part) for part in text.split(":"))
        started = time.time()
        await coordinator.update_scaling_decision(prefill, decode)
        state = coordinator.read_state()
        print(json.dumps({"published": state.decision_id, "prefill": prefill, "decode": decode}), flush=True)
        await coordinator.wait_for_scaling_completion()
        # Measured on 1.6.1: right after a previous decision was acknowledged, the wait can return
        # at once; the Planner reads is_scaling_ready() on its next tick, and so does this.
        ready = await coordinator.is_scaling_ready()
        while not ready and time.time() - started < 120:
            await asyncio.sleep(0.2)
            ready = await coordinator.is_scaling_ready()
        print(json.dumps({"acknowledged": state.decision_id, "ready": ready,
                          "seconds": round(time.time() - started, 2)}), flush=True)
    runtime.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
