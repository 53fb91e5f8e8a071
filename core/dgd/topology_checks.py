"""A graph's topology as Dynamo runs it: which pools it has, whether something serves the API,
and whether a Global Planner manages it as one pool among others. Rules cite ai-dynamo/dynamo
at 2a6da14c (file:line@2a6da14c)."""

from __future__ import annotations

from core.dgd.commandline import declared_role, engine_of
from core.facts import ENGINES
from core.findings import Finding, Severity
from core.planner_config import PlannerSettingsError, config_arg
from core.spec import GraphSpec, Service


def worker_role(service: Service, spec: GraphSpec) -> tuple[str | None, str | None]:
    """(engine, declared role) of a worker whose command runs a Dynamo engine module; (None,
    None) for anything else: no command (the image's own), a custom worker, an engine sidecar's
    client (upstream's lib/sidecar deployments run dynamo-vllm-sidecar): their flags are not
    dynamo.<engine>'s to judge. The graph's env reaches every container
    (deploy/operator/internal/dynamo/graph.go:2151-2154@2a6da14c)."""
    engine = engine_of(service.command, service.args)
    if engine not in ENGINES:
        return None, None
    return engine, declared_role(service.command, service.args, [*spec.env, *service.env], engine)


def serves_api(service: Service) -> bool:
    """A component that serves the OpenAI API: a frontend, a component whose main container
    or a sidecar runs dynamo.frontend (v1alpha1 graphs of old typed it "main"), or a worker
    with a frontendSidecar (deploy/operator/internal/dynamo/graph.go:1746-1750@2a6da14c)."""
    sidecar = any("frontendSidecar" in part for part in (service.extra, service.extra_v1alpha1, service.extra_v1beta1))
    if service.role == "frontend" or sidecar:
        return True
    containers = [(service.command, service.args)] + [
        (c.get("command"), c.get("args")) for c in service.pod_extra.get("containers") or [] if isinstance(c, dict)]
    return any(engine_of(command, args) == "frontend" for command, args in containers)


def _planner_pool(spec: GraphSpec) -> tuple[str | None, str | None]:
    """(mode, environment) of the graph's Planner, from its inline --config: a pool managed by a
    Global Planner has environment "global-planner" and mode "prefill" or "decode"
    (components/src/dynamo/planner/config/planner_config.py:387-395@2a6da14c; a prefill-mode
    Planner has no decode side: core/state_machine.py:69-71@2a6da14c)."""
    for planner in spec.pools("planner"):
        try:
            data = config_arg(planner.command, planner.args).inline or {}
        except PlannerSettingsError:
            continue
        return data.get("mode"), data.get("environment")
    return None, None


def pool_findings(spec: GraphSpec, alpha: bool) -> list[Finding]:
    prefill, decode = spec.pools("prefill"), spec.pools("decode")
    mode, environment = _planner_pool(spec)
    pooled = environment == "global-planner"  # examples/global_planner/README.md:37-50@2a6da14c
    out = []
    where = "spec.services" if alpha else "spec.components"
    if prefill and not decode and not pooled and mode != "prefill":
        out.append(Finding(Severity.ERROR, "prefill_without_decode", where,
                      "the graph has a prefill pool but no decode pool: prefilled requests have nowhere to decode",
                      "add a decode worker (componentType worker, subComponentType decode), "
                      "or make the worker aggregated"))
    declared_decode = [s for s in decode if worker_role(s, spec)[1] == "decode"]
    if declared_decode and not prefill and not pooled and mode != "decode":
        out.append(Finding(Severity.ERROR, "decode_without_prefill", where,
                      f"{declared_decode[0].name} runs as a disaggregated decode worker but the graph has no prefill "
                      "pool: it waits for KV caches that no one produces",
                      "add a prefill worker, or remove --disaggregation-mode decode to run it aggregated"))
    engines = [s for s in spec.services if worker_role(s, spec)[0] is not None]
    if engines and not pooled and not any(serves_api(s) for s in spec.services):
        out.append(Finding(Severity.WARNING, "no_frontend", where,
                      "the graph has no frontend: nothing serves the OpenAI-compatible API for its workers",
                      "add a Frontend component (componentType frontend), or a frontendSidecar on the worker"))
    if spec.pools("planner"):
        out.append(Finding(Severity.INFO, "planner_managed", where,
                      "a Planner manages this graph's worker replicas: manual scaling will be undone by it",
                      "change the Planner's limits instead of the replicas, or remove the planner"))
    return out
