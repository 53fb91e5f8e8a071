"""What the Kubernetes runtime checks before an operation is recorded, and how it sees a scale
through: the runtime's answers to the operations' questions (graphs/operations.py asks them of
whichever runtime a graph runs on, runtimes/base.py states them)."""

from __future__ import annotations

from django.conf import settings

from clusters.selectors import check_target
from core.dgd import immutable, topology
from core.dgd.pod_checks import drain_findings
from core.dgd.render import render
from core.errors import OperationRefused
from jobs.runner import JobFailed

from ...diagnosis import diagnose
from ...models import Deployment, GraphState, Pod
from ..base import Target


def admit_apply(*, graph, deployment: Deployment | None, revision, cluster: str, namespace: str, dry_run: bool,
                force: bool, recreate: bool, confirm: str) -> dict:
    """Refuse, before anything reaches the cluster, what the cluster would refuse or undo; else
    the operation's parameters: where it applies, and whether it forces or recreates."""
    gitops = (deployment.ownership or {}).get("gitops") if deployment else None
    if gitops and not dry_run:
        # Applying over a GitOps tool's object is reverted at its next sync: the change goes to Git.
        raise OperationRefused(
            f"{gitops['tool']} applies {graph.name} from Git ({gitops['evidence']}): apply means commit to Git "
            f"(Commit to Git on the graph page, POST /api/repos/<repository>/commit/); a revision saved for a "
            f"graph kept in a repository is committed at once, and {gitops['tool']} applies it. "
            f"Scaling a pool stays live.")
    target = _target(graph, deployment, cluster, namespace)
    if not dry_run and not force and (busy := rollout_in_progress(deployment)):
        raise OperationRefused(busy)
    return {**target, **_options(graph, deployment, revision, force=force, recreate=recreate, confirm=confirm,
                                 dry_run=dry_run)}


def rollout_in_progress(deployment: Deployment | None) -> str:
    """Why a change must wait on Kubernetes: the operator deletes the generation that serves when a
    DGD is changed in the middle of a rollout (ai-dynamo/dynamo#13620). "" when nothing rolls. The
    local runtime never refuses: its rules carry a change on from where the rollout stands (rollout.py)."""
    if deployment is None or not deployment.active or deployment.state != GraphState.PROGRESSING:
        return ""
    if not Pod.objects.filter(deployment=deployment, ready=True).exists():
        return ""  # nothing serves yet: there is no generation to lose
    at = f"revision {deployment.revision.number}" if deployment.revision else "the last apply"
    return (f"a rollout of {at} is in progress ({deployment.message or 'not every pod is ready'}): changing the "
            f"DynamoGraphDeployment now makes the operator delete the generation that serves "
            f"(ai-dynamo/dynamo#13620). Wait until it is ready or has failed, or pass force to apply anyway")


def _options(graph, deployment, revision, *, force: bool, recreate: bool, confirm: str, dry_run: bool) -> dict:
    """Refuse a revision that adds or removes components of a deployed DGD unless the user chose
    to delete and recreate it (and confirmed the downtime)."""
    live = topology.components(deployment.manifest) if deployment and deployment.active else None
    change = topology.change(live, [s.name for s in revision.graph_spec.services]) if live is not None else None
    if change is not None and not recreate:
        raise OperationRefused(change.refusal(graph.name, revision.number))
    fixed = []
    if live is not None:  # the other update rules of the operator (core/dgd/immutable.py)
        fixed = immutable.changes(deployment.manifest, render(revision.graph_spec, deployment.api_version))
    if fixed and not recreate:
        raise OperationRefused(immutable.refusal(graph.name, revision.number, fixed))
    recreating = change is not None or bool(fixed)
    if recreating and not dry_run and confirm != graph.name:
        downtime = change.downtime(graph.name) if change is not None else (
            f"Deleting and recreating {graph.name} stops all of its pods until the new ones are ready.")
        raise OperationRefused(f"{downtime} To go ahead, confirm with the graph's name ({graph.name}).")
    return {**({"force": True} if force else {}), **({"recreate": True} if recreating else {})}


def _target(graph, deployment, cluster: str, namespace: str) -> dict:
    """A registered cluster and one of the namespaces it allows; a deployed graph stays where it
    is until deleted there."""
    try:
        check_target(cluster, namespace)
    except ValueError as exc:
        raise OperationRefused(str(exc)) from None
    if deployment and deployment.active and (deployment.cluster_name, deployment.namespace) != (cluster, namespace):
        raise OperationRefused(f"{graph.name} runs on cluster {deployment.cluster_name} in namespace "
                               f"{deployment.namespace}; delete it there first")
    return {"cluster": cluster, "namespace": namespace}


def admit_scale(*, graph, deployment, spec, service: str, replicas: int) -> None:
    """A pool's count is the cluster's to refuse: the scale's wait says why (settle_scale)."""


def apply_target(deployment, params: dict) -> tuple[Target, dict]:
    """The operation names its cluster and namespace (the deployment row follows on success)."""
    return (Target(kind="kubernetes", cluster=params.get("cluster", ""), namespace=params.get("namespace", "")),
            {"force": bool(params.get("force")), "recreate": bool(params.get("recreate"))})


def settle_scale(runtime, runner, *, target: Target, spec, deployment: Deployment, service: str, replicas: int,
                 before: int, text: str) -> str:
    """Wait, with no transaction open and the lease kept by the heartbeat, until the cluster
    runs the new count; else fail saying what was asked, what the cluster shows and why."""
    runner.changed = True
    if replicas < before:  # what the scale-down will cut, said with it
        text += "".join(f"; {f.message}" for p in spec.services if p.name == service for f in drain_findings(p, ""))
    timeout = settings.OPERATION_OBSERVE_SECONDS
    seen = runtime.wait_scaled(target=target, spec=spec, service=service, replicas=replicas, deployment=deployment,
                               timeout=timeout, stop=runner.heartbeat.lost if runner.heartbeat else None)
    if seen.done:
        return f"{text} ({replicas} ready, observed)"
    message = (f"{service}: asked for {replicas} replica(s) (the DynamoGraphDeployment asks for them now), but "
               f"after {timeout:g} s (setting OPERATION_OBSERVE_SECONDS) the cluster shows {seen.observed}")
    if reason := _likely_reason(deployment, seen):
        message += f". Likely: {reason}"
    runner.event = ("ScaleNotObserved", service, message, "Warning")
    raise JobFailed(message)


def _likely_reason(deployment: Deployment, seen) -> str:
    """Why a pool does not reach its count: the product's diagnosis of its pods (no GPU free,
    an image that cannot be pulled, a crash loop), else the DGD's Ready condition."""
    found = [d for d in diagnose(deployment, seen.pods) if d.severity == "error"]
    if found:
        return f"{found[0].title}: {found[0].detail}" + (f" {found[0].fix}" if found[0].fix else "")
    return seen.condition
