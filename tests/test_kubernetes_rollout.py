"""A DGD that reports Ready while pods of the spec it replaced still carry the count
(ai-dynamo/dynamo#3567) is a rollout in progress, in the graph's state and message; and while a
generation serves and another rolls out, a change is refused with the reason (#13620)."""

from __future__ import annotations

from graphs.models import GraphState
from graphs.runtimes.base import PodStatus
from graphs.runtimes.kubernetes.observe import graph_state, previous_generation

READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "AllReady", "message": "all ready"}],
         "state": "successful", "observedGeneration": 2}


def _dgd(args: list[str], alpha: bool = False) -> dict:
    if alpha:
        spec = {"services": {"decode": {"extraPodSpec": {"mainContainer": {"command": ["python3", "-m", "dynamo.vllm"],
                                                                            "args": args}}}}}
    else:
        spec = {"components": [{"name": "decode", "podTemplate": {"spec": {"containers": [
            {"name": "main", "command": ["python3", "-m", "dynamo.vllm"], "args": args}]}}},
            {"name": "Frontend"}]}
    return {"metadata": {"generation": 2}, "spec": spec, "status": READY}


def _pod(name: str, args: list[str], phase: str = "Running") -> PodStatus:
    return PodStatus(name=name, service="decode", role="decode", phase=phase, ready=phase == "Running",
                     command=["python3", "-m", "dynamo.vllm"], args=args)


NEW, OLD = ["--model", "m", "--max-num-seqs", "64"], ["--model", "m"]


def test_ready_with_pods_of_the_previous_spec_is_still_rolling_out():
    for alpha in (False, True):
        dgd = _dgd(NEW, alpha)
        pods = [_pod("d-a", NEW), _pod("d-b", OLD)]
        assert previous_generation(dgd, pods) == {"decode": (1, 2)}
        state, message = graph_state(active=True, dgd=dgd, pods=pods, name="g", namespace="ns")
        assert state == GraphState.PROGRESSING
        assert message.startswith("rolling out: 1 of 2 decode pods still run the previous spec") and "#3567" in message


def test_ready_is_ready_once_every_pod_runs_the_spec_whatever_flags_the_operator_adds():
    dgd = _dgd(NEW)
    pods = [_pod("d-a", [*NEW, "--operator-added", "1"]), _pod("d-b", NEW), _pod("d-old", OLD, phase="Terminating")]
    assert previous_generation(dgd, pods) == {}
    assert graph_state(active=True, dgd=dgd, pods=pods, name="g", namespace="ns")[0] == GraphState.READY
    # a component that declares no command line is not judged
    assert previous_generation({"spec": {"components": [{"name": "decode"}]}}, [_pod("d", OLD)]) == {}
