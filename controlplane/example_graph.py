"""The example graph that `manage.py up` applies: apply it, follow it until it serves, and
when it does not, print its state, its message, the diagnosis and what to do."""

from __future__ import annotations

import time

from django.conf import settings

from core.errors import OperationRefused
from graphs import operations
from graphs.diagnosis import diagnose
from graphs.models import Deployment, Graph, GraphState, Pod
from graphs.runtimes.local.argv import MAX_SYSTEM_PORT
from graphs.runtimes.local.vllm_cpu import READY_WITHIN_S


class ExampleGraph:
    # (graph, what it runs, seconds it may take to serve): a mocker graph serves in a few
    # seconds; vLLM on CPU starts in 40-100 s (graphs/examples/vllm-cpu-disagg.yaml).
    MOCKER = ("demo", "frontend + mocker prefill and decode workers", 180)
    VLLM_CPU = ("vllm-cpu-disagg", "frontend with the KV router + vLLM prefill and decode workers on this CPU, "
                "moving KV caches over NIXL", READY_WITHIN_S + 60)

    def __init__(self, command, base_url: str, example: tuple[str, str, int] = MOCKER):
        self.command = command
        self.out, self.err = command.stdout, command.stderr
        self.name, self.what, self.ready_within = example
        self.page = f"{base_url.rstrip('/')}/graphs/{self.name}/"

    def apply_and_watch(self, timeout: float | None = None) -> bool:
        timeout = timeout or self.ready_within
        name = self.name
        graph = Graph.objects.filter(name=name).first()
        if graph is None:
            return False
        op = None
        if not Deployment.objects.filter(graph=graph, active=True).exists():
            try:
                op = operations.graph_apply(graph=graph, via="cli", runtime="local")
            except OperationRefused as exc:
                self.err.write(f"example graph '{name}' not applied: {exc}")
                return False
            self.out.write(f"up: applying the example graph '{name}' ({self.what}, operation #{op.pk})")
        start, last = time.monotonic(), ""
        while time.monotonic() - start < timeout:
            if op is not None:
                op.refresh_from_db()
                if op.state == "failed":
                    return self.explain(f"the apply operation #{op.pk} failed: {op.result}")
            deployment = Deployment.objects.filter(graph=graph).first()
            if deployment is not None and deployment.observed_at is not None:
                pods = list(Pod.objects.filter(deployment=deployment))
                if deployment.state == GraphState.READY:
                    self.out.write(self.command.style.SUCCESS(
                        f"example graph '{name}' is serving at {deployment.endpoint} after "
                        f"{time.monotonic() - start:.0f}s; its page: {self.page}"))
                    return True
                if deployment.state == GraphState.FAILED:
                    return self.explain(deployment.message, deployment, pods)
                line = f"up: example graph '{name}': {deployment.get_state_display().lower()}, {deployment.message}"
                if line != last:
                    self.out.write(line)
                    last = line
            time.sleep(0.5)
        deployment = Deployment.objects.filter(graph=graph).first()
        pods = list(Pod.objects.filter(deployment=deployment)) if deployment else []
        return self.explain(f"not ready after {timeout:.0f}s" + (f": {deployment.message}" if deployment else ""),
                            deployment, pods)

    def explain(self, message: str, deployment: Deployment | None = None, pods: list[Pod] | None = None) -> bool:
        name = self.name
        state = deployment.get_state_display() if deployment else "not deployed"
        lines = [f"example graph '{name}' is not serving.", f"  state:   {state}", f"  message: {message}"]
        for finding in diagnose(deployment, pods or []) if deployment else []:
            lines.append(f"  {finding.title}: {finding.detail}" + (f" Fix: {finding.fix}" if finding.fix else ""))
        lines.append("  what to do: " + advice(message))
        lines.append(f"  then apply it again from {self.page}, or: dynamo-cp graphs apply {name}")
        lines.append(f"  details: dynamo-cp graphs status {name}; logs in {self.command.logs}")
        self.err.write("\n".join(lines))
        return False


def advice(message: str) -> str:
    """What to do about the example graph's problem, in the user's terms."""
    text = message.lower()
    if "free port" in text:
        lo, hi = settings.LOCAL_RUNTIME_PORT_MIN, settings.LOCAL_RUNTIME_PORT_MAX
        if lo > MAX_SYSTEM_PORT:
            return (f"LOCAL_RUNTIME_PORT_MIN is {lo}, above {MAX_SYSTEM_PORT}, the highest port Dynamo accepts for "
                    "a worker's system port: set LOCAL_RUNTIME_PORT_MIN and LOCAL_RUNTIME_PORT_MAX to a range within "
                    f"1024-{MAX_SYSTEM_PORT} and start `make up` again")
        return (f"local graphs take their ports from LOCAL_RUNTIME_PORT_MIN-LOCAL_RUNTIME_PORT_MAX, now "
                f"{lo}-{min(hi, MAX_SYSTEM_PORT)}, and none is free: stop what holds them (ss -ltnp), or set a wider "
                "or other range in the environment and start `make up` again")
    if "at most" in text and "processes" in text:
        return "delete or scale down another local graph, or raise LOCAL_RUNTIME_MAX_PROCESSES"
    if "crash" in text:
        return "read the crashing pod's log (on the graph's page, or `dynamo-cp graphs status`), fix it and apply"
    return "read the graph's events on its page; the operator's log says what it tried"
