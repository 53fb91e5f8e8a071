"""Fields of a deployed DGD that the Dynamo operator's validating webhook refuses to change, besides
its component topology (topology.py): ``validateDynamoGraphDeploymentSpecUpdate`` in ai-dynamo/dynamo
``deploy/operator/internal/webhook/validation/dynamographdeployment.go`` and the shared component
rules it calls (``shared.go``):

* ``spec.backendFramework`` "is immutable and cannot be changed after creation";
* a component may not move between single-node and multi-node (``multinode.nodeCount`` above 1
  or not) "after creation";
* ``spec.topologyConstraint`` "is immutable and cannot be added, removed, or changed after
  creation" (its ``clusterTopologyName`` and ``packDomain``).

A field the apply leaves out keeps its live value, so only what the applied body sets can change
it. Checked before anything is sent: such a revision reaches the cluster only by deleting the DGD
and creating it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FixedField:
    field: str  # as the API server prints it: .spec.backendFramework
    live: Any
    wanted: Any
    rule: str

    def describe(self) -> str:
        return f"{self.field} from {_show(self.live)} to {_show(self.wanted)} ({self.rule})"


def _show(value: Any) -> str:
    return "unset" if value is None else repr(value)


def _components(spec: dict) -> dict[str, dict]:
    if "services" in spec:
        return {name: c or {} for name, c in (spec.get("services") or {}).items()}
    return {c.get("name"): c for c in spec.get("components") or []}


def _nodes(component: dict) -> int:
    return int((component.get("multinode") or {}).get("nodeCount", 1) or 1)


def changes(live: dict | None, body: dict) -> list[FixedField]:
    """What ``body`` would change of ``live`` that the webhook refuses (nothing when there is no
    live object)."""
    if not live:
        return []
    old, new = live.get("spec") or {}, body.get("spec") or {}
    found = []
    if "backendFramework" in new and new.get("backendFramework") != old.get("backendFramework"):
        found.append(FixedField(".spec.backendFramework", old.get("backendFramework"), new["backendFramework"],
                                "the backend framework cannot change after creation"))
    old_components = _components(old)
    for name, component in _components(new).items():
        before = old_components.get(name)
        if before is None or "multinode" not in component:
            continue
        if (_nodes(component) > 1) != (_nodes(before) > 1):
            found.append(FixedField(f'.spec.components[name="{name}"].multinode.nodeCount', _nodes(before),
                                    _nodes(component), "a component cannot move between single-node and "
                                                       "multi-node after creation"))
    if "topologyConstraint" in new:
        keys = ("clusterTopologyName", "packDomain")
        theirs, ours = old.get("topologyConstraint"), new.get("topologyConstraint")
        if theirs is None or ours is None or any(theirs.get(k) != ours.get(k) for k in keys):
            found.append(FixedField(".spec.topologyConstraint", theirs, ours,
                                    "the topology constraint cannot be added, removed or changed after creation"))
    return found


def refusal(graph: str, revision: int, found: list[FixedField]) -> str:
    return (f"revision {revision} changes " + "; ".join(f.describe() for f in found)
            + f": the Dynamo operator's webhook refuses this on a deployed DynamoGraphDeployment. Deleting and "
            f"recreating {graph} stops all of its pods until the new ones are ready; apply with recreate (and the "
            "graph's name as confirmation) to do that.")
