"""Changing a serving local graph without dropping a request (graphs/runtimes/local/rollout.py):
a real mocker graph of 2 prefill and 2 decode workers under a steady streamed chat load; a
revision that changes both pools rolls them surge-first, a scale-down drains, and a one-step
rollback (API) runs revision 1 again. The frontend's own discovery view is sampled every pass."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from audit.models import AuditRecord
from core.catalog import PoolFields, build_spec
from graphs import operations, rollouts, services
from graphs.models import Deployment, Event, Operation, Pod
from graphs.runtimes.local.probes import http_get
from graphs.runtimes.processes import wait_until
from graphs.runtimes.registry import get_runtime

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]

MODEL = "roll-model"


def _spec(engine_args: str = ""):
    pool = dict(replicas=2, gpus=0, shared_memory="1Gi", hf_token_secret="", engine_args=engine_args)
    return build_spec(template="mocker-disagg", name="roll", model=MODEL, backend="mocker",
                      prefill=PoolFields(**pool), decode=PoolFields(**pool))


class Load:
    """Streamed chats through the frontend from 4 threads; every reply must end with a
    finish_reason and [DONE]."""

    def __init__(self, endpoint: str):
        self.endpoint, self.stop = endpoint, threading.Event()
        self.ok, self.bad = 0, []
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(4)]

    def run(self):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "tell me " * 30}], "max_tokens": 80,
                "stream": True, "ignore_eos": True}
        with httpx.Client(timeout=60) as client:
            while not self.stop.is_set():
                try:
                    with client.stream("POST", f"{self.endpoint}/v1/chat/completions", json=body) as reply:
                        if reply.status_code != 200:
                            self.bad.append(f"HTTP {reply.status_code}: {reply.read()[:200]!r}")
                            continue
                        lines = list(reply.iter_lines())
                    finished = any(line.startswith("data: {") and any(
                        c.get("finish_reason") for c in json.loads(line[6:]).get("choices", [])) for line in lines)
                    if "data: [DONE]" in lines and finished:
                        self.ok += 1
                    else:
                        self.bad.append(f"truncated: {lines[-3:]}")
                except httpx.HTTPError as exc:
                    self.bad.append(repr(exc))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)


def _routed(endpoint: str) -> dict[str, int]:
    """Instances per component in the frontend's own discovery (its /health)."""
    answer = http_get(int(endpoint.rsplit(":", 1)[1]), "/health")
    counts: dict[str, int] = {}
    for instance in json.loads(answer[1]).get("instances", []) if answer and answer[0] == 200 else []:
        if instance.get("endpoint") == "generate":
            counts[instance["component"]] = counts.get(instance["component"], 0) + 1
    return counts


def _converge(operator, graph, done, seen: list | None = None, timeout=120):
    def step():
        operator.reconcile_once()
        dep = Deployment.objects.get(graph=graph)
        if seen is not None and dep.endpoint:
            seen.append(_routed(dep.endpoint))
        return done(dep, list(Pod.objects.filter(deployment=dep)))
    try:
        return wait_until(step, timeout=timeout, interval=0.2, what="the graph to converge")
    except TimeoutError:
        dep = Deployment.objects.get(graph=graph)
        pods = list(Pod.objects.filter(deployment=dep).values_list("name", "phase", "ready", "message", "args"))
        raise TimeoutError(f"{dep.state}: {dep.message}; rollout {dep.runtime_info.get('rollout')}; {pods}") from None


def _settled(replicas: dict[str, int], args_have: str = "", args_lack: str = ""):
    def done(dep, pods):
        by_pool = {}
        for p in pods:
            if p.role in ("prefill", "decode"):
                by_pool.setdefault(p.service, []).append(p)
        return dep.state == "ready" and not dep.runtime_info.get("rollout") and all(
            len(by_pool.get(name, [])) == n and all(
                p.ready and (args_have in " ".join(p.args)) and (not args_lack or args_lack not in " ".join(p.args))
                for p in by_pool.get(name, [])) for name, n in replicas.items())
    return done


def test_a_changed_revision_a_scale_down_and_a_rollback_drop_no_request(eager, operator, api_for, client_for):
    graph = services.graph_create(spec=_spec())
    operations.graph_apply(graph=graph, via="api")
    _converge(operator, graph, _settled({"prefill": 2, "decode": 2}))
    endpoint = Deployment.objects.get(graph=graph).endpoint
    first = {p.name for p in Pod.objects.filter(deployment__graph=graph, role__in=["prefill", "decode"])}
    seen: list[dict[str, int]] = []

    with Load(endpoint) as load:
        wait_until(lambda: load.ok >= 4, timeout=30, interval=0.2, what="the load to run")
        # (a) a revision that changes both worker pools rolls them, surge first
        services.graph_update(graph=graph, spec=_spec("--max-num-batched-tokens 4096"), message="both pools change")
        operations.graph_apply(graph=graph, via="api")
        settled, page, viewer = _settled({"prefill": 2, "decode": 2}, args_have="--max-num-batched-tokens 4096"), [], \
            client_for("viewer")

        def done(dep, pods):  # the graph page's status, read once while old and new workers both serve
            if not page and any(p["old"] and p["new"] for p in dep.runtime_info.get("rollout_pools", [])):
                page.append(viewer.get("/graphs/roll/status/").content.decode())
            return settled(dep, pods)

        _converge(operator, graph, done, during_apply := [])
        rolled = {p.name for p in Pod.objects.filter(deployment__graph=graph, role__in=["prefill", "decode"])}
        # (b) scale both pools down: the excess drains
        operations.graph_scale(graph=graph, service="decode", replicas=1, via="api")
        _converge(operator, graph, lambda dep, pods: not Operation.objects.filter(
            graph=graph, state__in=["pending", "running"]).exists(), seen)
        operations.graph_scale(graph=graph, service="prefill", replicas=1, via="api")
        _converge(operator, graph, _settled({"prefill": 1, "decode": 1}, args_have="--max-num-batched-tokens"), seen)
        # (c) roll back to revision 1 in one step, through the API
        answer = api_for("operator").post("/api/graphs/roll/rollback/", {"revision": 1}, format="json")
        assert answer.status_code == 202, answer.content
        _converge(operator, graph, _settled({"prefill": 2, "decode": 2}, args_lack="--max-num-batched-tokens"), seen)
        served_before = load.ok
        wait_until(lambda: load.ok >= served_before + 4, timeout=30, interval=0.2, what="more replies")

    assert load.bad == [], load.bad[:5]
    assert load.ok > 20
    assert page and 'id="rollout"' in page[0] and "rolling out:" in page[0]
    # The graph page's chart of the frontend's routable workers: never none through all three changes.
    status = viewer.get("/graphs/roll/status/").content.decode()
    assert 'id="routable"' in status and "decode: 2 now" in status and "none for" not in status
    # Replacements are new pods beside the old ones, never the old ones restarted in place.
    assert not first & rolled
    # The frontend never had fewer routable workers in a pool than the pool asked for (a scale
    # down aside, where it may have one fewer for the instant the drained worker leaves).
    # The decode pool registers as component "backend" in Dynamo's discovery.
    assert len(during_apply) > 3 and min(min(s.get("backend", 0), s.get("prefill", 0)) for s in during_apply) >= 2
    assert seen and min(min(s.get("backend", 0), s.get("prefill", 0)) for s in seen) >= 1
    events = set(Event.objects.filter(graph=graph).values_list("reason", flat=True))
    assert {"Draining", "Killing"} <= events and "DrainTimeout" not in events
    head = graph.revisions.order_by("-number").first()
    assert head.number == 3 and head.spec == graph.revisions.get(number=1).spec
    assert "rollback to revision 1" in head.message
    assert AuditRecord.objects.filter(action="graph.rollback", target="roll").exists()


def test_rollback_refuses_what_cannot_be_rolled_back_and_a_dry_run_writes_nothing(eager, operator, api_for):
    graph = services.graph_create(spec=_spec())
    api = api_for("operator")
    answer = api.post("/api/graphs/roll/rollback/", {"revision": 1}, format="json")
    assert answer.status_code == 409 and "not deployed" in answer.json()["detail"]
    operations.graph_apply(graph=graph, via="api")
    services.graph_update(graph=graph, spec=_spec("--max-num-batched-tokens 2048"))
    operations.graph_apply(graph=graph, via="api")
    for body, status, words in (({"revision": 2}, 409, "what runs now"), ({"revision": 9}, 409, "no revision 9"),
                                ({"revision": "x"}, 400, "integer"), ({}, 400, "required")):
        answer = api.post("/api/graphs/roll/rollback/", body, format="json")
        assert answer.status_code == status and words in json.dumps(answer.json()), answer.content
    answer = api.post("/api/graphs/roll/rollback/", {"revision": 1, "dry_run": True}, format="json")
    assert answer.status_code == 202
    op = api.get(f"/api/operations/{answer.json()['id']}/").json()
    assert "--max-num-batched-tokens" in op["diff"] and op["state"] == "succeeded"
    assert graph.revisions.count() == 2
    assert api_for("viewer").post("/api/graphs/roll/rollback/", {"revision": 1}, format="json").status_code == 403


def test_kubernetes_refuses_a_change_in_the_middle_of_a_rollout_naming_why(db):
    graph = services.graph_create(spec=_spec())
    services.graph_update(graph=graph, spec=_spec("--max-num-batched-tokens 2048"))
    dep = Deployment.objects.create(graph=graph, runtime="kubernetes", revision=graph.head, active=True,
                                    state="progressing", message="decode: 1 of 2 pods of the new generation ready")
    assert get_runtime("kubernetes").change_refused(dep) == ""  # nothing serves yet: nothing to lose
    Pod.objects.create(deployment=dep, name="roll-decode-abc", service="decode", role="decode", phase="Running",
                       ready=True)
    reason = get_runtime("kubernetes").change_refused(Deployment.objects.get(graph=graph))
    assert "#13620" in reason and "1 of 2 pods" in reason
    with pytest.raises(operations.OperationRefused, match="rollout of revision 2 is in progress"):
        rollouts.graph_rollback(graph=graph, revision_number=1)
    assert graph.revisions.count() == 2  # nothing half-written


def test_the_revisions_page_shows_the_diff_against_what_runs_then_rolls_back(db, client_for):
    graph = services.graph_create(spec=_spec())
    services.graph_update(graph=graph, spec=_spec("--max-num-batched-tokens 2048"), message="tuned")
    Deployment.objects.create(graph=graph, runtime="local", revision=graph.revisions.get(number=2), active=True,
                              state="ready")
    operator, viewer = client_for("operator"), client_for("viewer")
    listing = operator.get("/graphs/roll/revisions/").content.decode()
    assert "<strong>running</strong>" in listing and 'href="?from=2&to=1"' in listing
    page = operator.get("/graphs/roll/revisions/?from=2&to=1").content.decode()
    assert "--max-num-batched-tokens" in page and "Roll back to revision 1</button>" in page
    assert "Roll back to revision 1</button>" not in viewer.get("/graphs/roll/revisions/?from=2&to=1").content.decode()
    assert viewer.post("/graphs/roll/rollback/", {"revision": 1}).status_code == 403
    refused = operator.post("/graphs/roll/rollback/", {"revision": 2}, follow=True).content.decode()
    assert "Not rolled back" in refused and "what runs now" in refused
    assert operator.post("/graphs/roll/rollback/", {"revision": "1; drop"}, follow=True).status_code == 200
    assert graph.revisions.count() == 2
    answer = operator.post("/graphs/roll/rollback/", {"revision": 1})
    assert answer.status_code == 302 and answer["Location"] == "/graphs/roll/"
    assert graph.revisions.order_by("-number").first().spec == graph.revisions.get(number=1).spec


def test_a_surge_worker_with_no_room_waits_and_the_pool_keeps_serving(eager, operator, monkeypatch):
    from graphs.runtimes.local.vllm_cpu import CpuShortage

    graph = services.graph_create(spec=_spec())
    operations.graph_apply(graph=graph, via="api")
    _converge(operator, graph, _settled({"prefill": 2, "decode": 2}))
    serving = set(operator.supervisor.names())
    real = operator.assign_cores

    def no_room_for_new(dep, planned, taken):  # as on a host whose cores vLLM workers all hold
        if any(p.name not in operator.supervisor.names() for p in planned):
            raise CpuShortage("not enough CPU cores for vLLM on CPU: this host has 2")
        return real(dep, planned, taken)

    monkeypatch.setattr(operator, "assign_cores", no_room_for_new)
    services.graph_update(graph=graph, spec=_spec("--max-num-batched-tokens 4096"))
    operations.graph_apply(graph=graph, via="api")
    for _ in range(5):
        operator.reconcile_once()
    dep = Deployment.objects.get(graph=graph)
    assert set(operator.supervisor.names()) == serving and not any(
        operator.supervisor.draining(n) for n in serving)
    assert dep.state == "progressing" and "not enough CPU cores" in dep.message
    assert "running process(es) keep running and serving" in dep.message
    reply = httpx.post(f"{dep.endpoint}/v1/chat/completions", timeout=30, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert reply.status_code == 200
    monkeypatch.setattr(operator, "assign_cores", real)  # room again: the rollout goes on
    _converge(operator, graph, _settled({"prefill": 2, "decode": 2}, args_have="--max-num-batched-tokens 4096"))


def test_a_dry_run_after_a_scale_names_the_pools_the_apply_sets_back(db, eager):
    from core.dgd.render import render

    graph = services.graph_create(spec=_spec())
    Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready",
                              manifest=render(graph.head.graph_spec, "nvidia.com/v1beta1"), replicas={"decode": 3})
    op = operations.graph_apply(graph=graph, via="api", dry_run=True)
    op.refresh_from_db()
    assert op.diff == "" and op.result == ("dry run: would change the live graph; replicas set by a scale since the "
                                           "last apply go back to the revision's: decode: 3 → 2")
