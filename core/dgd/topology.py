"""A DGD's component topology: which components it has. The Dynamo operator's validating webhook
refuses an update that adds or removes one ("component topology is immutable and cannot be
modified after creation"; ai-dynamo/dynamo ``deploy/operator/internal/webhook/validation/
dynamographdeployment.go`` at 2a6da14c, lines 687-705, ``validateDynamoGraphDeploymentSpecUpdate``):
such a revision can only reach a cluster by deleting the DGD and creating it again, which stops the
whole graph. The operator's other update rules: immutable.py."""

from __future__ import annotations

from dataclasses import dataclass

WEBHOOK_TEXT = "component topology is immutable"


def components(manifest: dict | None) -> list[str] | None:
    """The component names of a DGD in either API version (None: no object)."""
    if not manifest:
        return None
    spec = manifest.get("spec") or {}
    if "services" in spec:
        return list(spec.get("services") or {})
    return [c.get("name") for c in spec.get("components") or []]


@dataclass(frozen=True)
class TopologyChange:
    live: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def describe(self) -> str:
        parts = []
        if self.added:
            parts.append("adds " + ", ".join(self.added))
        if self.removed:
            parts.append("removes " + ", ".join(self.removed))
        return " and ".join(parts)

    def downtime(self, graph: str) -> str:
        return (f"Deleting and recreating {graph} stops all of its pods ({', '.join(self.live)}): it serves no "
                "request until the Dynamo operator has started the new ones and they are ready.")

    def refusal(self, graph: str, revision: int) -> str:
        return (f"revision {revision} {self.describe()}: the Dynamo operator refuses to add or remove components "
                f"of a deployed DynamoGraphDeployment (its webhook answers \"component topology is immutable and "
                f"cannot be modified after creation\"). {self.downtime(graph)} Apply with recreate (and the graph's "
                "name as confirmation) to delete and recreate it.")


def change(live: list[str] | None, wanted: list[str]) -> TopologyChange | None:
    if live is None:
        return None
    added = tuple(sorted(set(wanted) - set(live)))
    removed = tuple(sorted(set(live) - set(wanted)))
    if not added and not removed:
        return None
    return TopologyChange(tuple(live), added, removed)
