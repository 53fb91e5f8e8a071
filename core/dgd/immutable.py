"""What of a deployed DGD the Dynamo operator refuses to change in place, besides its component
topology (topology.py): every update rule of its validating webhook (``ValidateUpdate``, ai-dynamo/
dynamo ``deploy/operator/internal/webhook/validation/dynamographdeployment.go`` and
``shared_v1beta1.go`` at commit 2a6da14c, transcribed in core.dgd.webhook.update) and the CRD's CEL
transition rules (``minAvailable is immutable after creation``). Such a revision reaches the cluster
only by deleting the DGD and creating it again.

Only rules that an update alone runs lead there: what a create would refuse too (a main image
without a semantic-version tag) cannot be cured by recreating, and the replicas of an adapter-managed
component are held at their live count by the runtime instead (runtime._adapter_held). What the
operator allows (a multi-node component going from 2 to 4 nodes) is not refused here either.
"""

from __future__ import annotations

import copy
from typing import Any

from core.cel import RuleError
from core.dgd.webhook import FieldError, update_errors

# Handled elsewhere, or not cured by deleting and recreating (see the module docstring).
_NOT_RECREATE = {"component_topology", "adapter_replicas", "runtime_version", "main_image"}


class FixedField:
    """One refusal of an update, in the API server's words."""

    def __init__(self, error: FieldError | RuleError):
        self.error = error
        self.field = error.path

    def describe(self) -> str:
        return str(self.error)


def _as_applied(live: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The object the update would leave: the applied body, with the metadata and status that the
    apply leaves to others (the operator's annotations, the rolling-update status)."""
    new = copy.deepcopy(body)
    meta = copy.deepcopy(live.get("metadata") or {})
    for key in ("labels", "annotations"):
        merged = {**(meta.get(key) or {}), **((body.get("metadata") or {}).get(key) or {})}
        if merged:
            meta[key] = merged
    new["metadata"] = meta
    if "status" in live:
        new["status"] = live["status"]
    return new


def changes(live: dict | None, body: dict, username: str = "") -> list[FixedField]:
    """What the operator refuses of ``body`` applied over ``live`` (same API version), that deleting and
    recreating the DGD would get past; nothing when there is no live object."""
    if not live:
        return []
    found = update_errors(live, _as_applied(live, body), username)
    return [FixedField(e) for e in found
            if (e.transition if isinstance(e, RuleError) else e.update) and getattr(e, "rule", "") not in _NOT_RECREATE]


def refusal(graph: str, revision: int, found: list[FixedField]) -> str:
    return (f"revision {revision} would be refused by the Dynamo operator on a deployed DynamoGraphDeployment: "
            + "; ".join(f.describe() for f in found)
            + f". Deleting and recreating {graph} stops all of its pods until the new ones are ready; apply with "
            "recreate (and the graph's name as confirmation) to do that.")
