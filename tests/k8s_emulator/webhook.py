"""The Dynamo operator's validating webhook for DGD updates, as its source has it (ai-dynamo/dynamo,
``deploy/operator/internal/webhook/``):

* ``validation/dynamographdeployment.go`` (``validateDynamoGraphDeploymentSpecUpdate``): adding or
  removing a component is refused: "component topology is immutable and cannot be modified after
  creation: components added: [x], components removed: [y]" (Forbidden on ``spec.components``);
  ``spec.backendFramework`` "is immutable and cannot be changed after creation"; a component moving
  between single-node and multi-node (``multinode.nodeCount`` > 1 or not) "cannot change node
  topology between single-node and multi-node after creation"; ``spec.topologyConstraint``
  added, removed or changed "is immutable and cannot be added, removed, or changed after creation;
  delete and recreate the DynamoGraphDeployment to change topology constraints" (all three
  Invalid, with the bad value);
* ``validation/shared.go`` (``validateDynamoComponentDeploymentSharedSpecUpdate``): a component whose
  old *or* new spec has ``scalingAdapter`` may not change ``replicas`` (nil counts as 1), whether
  or not the adapter object exists yet, unless the caller may (``common.go``:
  ``CanModifyDGDReplicas``): a service account whose username is the operator's own principal,
  or any service account named ``planner-serviceaccount`` (consts.PlannerServiceAccountName).
  Identity, never the field manager;
* ``validation/dynamographdeployment_helpers.go``: the errors come back as
  ``k8serrors.NewInvalid`` (HTTP 422 ``Invalid``), which the API server prefixes with
  ``admission webhook "<name>" denied the request:``. Releases before the v1beta1 webhooks
  answered a plain denial, which the API server turns into 403 Forbidden
  (``KubeEmulator.operator.webhook_status = 403``).

The webhook sees v1beta1 objects (the conversion runs first) and skips status writes, creates and
objects being deleted.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ApiError

WEBHOOK = "vdynamographdeployment.kb.io"
OPERATOR_PRINCIPAL = "system:serviceaccount:dynamo-system:dynamo-platform-dynamo-operator-controller-manager"
PLANNER_SERVICE_ACCOUNT = "planner-serviceaccount"
TOPOLOGY = "component topology is immutable and cannot be modified after creation"
MULTINODE = "cannot change node topology between single-node and multi-node after creation"
BACKEND = "is immutable and cannot be changed after creation"
TOPOLOGY_CONSTRAINT = ("is immutable and cannot be added, removed, or changed after creation; delete and recreate the "
                       "DynamoGraphDeployment to change topology constraints")
REPLICAS = ("cannot be modified directly when scaling adapter is enabled; scale or update the related "
            "DynamoGraphDeploymentScalingAdapter instead")


def can_modify_replicas(username: str, operator_principal: str = OPERATOR_PRINCIPAL) -> bool:
    """``CanModifyDGDReplicas``: the operator's service account, or any ``planner-serviceaccount``."""
    if not username.startswith("system:serviceaccount:"):
        return False
    if operator_principal and username == operator_principal:
        return True
    parts = username.split(":")
    return len(parts) == 4 and parts[3] == PLANNER_SERVICE_ACCOUNT


def _go_list(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"  # fmt's %v of a []string


def update_errors(old: dict[str, Any], new: dict[str, Any], username: str) -> list[str]:
    """The field errors (``path: Type: detail``) of an update, both objects in v1beta1, in the order
    ``validateDynamoGraphDeploymentSpecUpdate`` appends them: component topology, then per kept
    component its replicas (adapter) and multinode layout, then ``backendFramework``, then the
    graph's ``topologyConstraint``."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    old_comps = {c.get("name"): c for c in old_spec.get("components") or []}
    new_list = new_spec.get("components") or []
    new_comps = {c.get("name"): c for c in new_list}
    errors = []
    added = sorted(set(new_comps) - set(old_comps))
    removed = sorted(set(old_comps) - set(new_comps))
    if added or removed:
        detail = TOPOLOGY
        if added and removed:
            detail += f": components added: {_go_list(added)}, components removed: {_go_list(removed)}"
        elif added:
            detail += f": components added: {_go_list(added)}"
        else:
            detail += f": components removed: {_go_list(removed)}"
        errors.append(f"spec.components: Forbidden: {detail}")
    allowed = can_modify_replicas(username)
    for index, comp in enumerate(new_list):
        before = old_comps.get(comp.get("name"))
        if before is None:
            continue
        adapted = "scalingAdapter" in comp or "scalingAdapter" in before
        if not allowed and adapted and int(comp.get("replicas", 1)) != int(before.get("replicas", 1)):
            errors.append(f"spec.components[{index}].replicas: Forbidden: {REPLICAS}")
        if _multinode(comp) != _multinode(before):
            errors.append(f"spec.components[{index}].multinode: Invalid value: {_go_json(comp.get('multinode'))}: "
                          f"{MULTINODE}")
    if new_spec.get("backendFramework") != old_spec.get("backendFramework"):
        errors.append(f"spec.backendFramework: Invalid value: {_go_json(new_spec.get('backendFramework'))}: "
                      f"{BACKEND}")
    new_tc, old_tc = new_spec.get("topologyConstraint"), old_spec.get("topologyConstraint")
    same = new_tc is not None and old_tc is not None and all(
        new_tc.get(k) == old_tc.get(k) for k in ("clusterTopologyName", "packDomain"))
    if (new_tc is not None or old_tc is not None) and not same:
        errors.append(f"spec.topologyConstraint: Invalid value: {_go_json(new_tc)}: {TOPOLOGY_CONSTRAINT}")
    return errors


def _multinode(component: dict[str, Any]) -> bool:
    """``IsMultinode``: ``GetNumberOfNodes() > 1`` (no ``multinode``: one node)."""
    return int((component.get("multinode") or {}).get("nodeCount", 1) or 1) > 1


def _go_json(value: Any) -> str:
    """How ``field.Invalid`` prints a bad value (apimachinery ``pkg/util/validation/field/errors.go``
    ``ErrorBody``: a string quoted, a number as is, anything else as JSON; a nil pointer is null)."""
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def denial(name: str, errors: list[str], status: int) -> ApiError:
    """The API server's answer when the webhook refuses (422 Invalid, or 403 from older releases)."""
    if status == 422:  # NewInvalid keeps its details, and the API server passes them on (ToStatusErr)
        text = f'DynamoGraphDeployment.nvidia.com "{name}" is invalid: '
        text += errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        causes = [{"reason": "FieldValueForbidden" if e.split(": ", 2)[1] == "Forbidden" else "FieldValueInvalid",
                   "message": e.split(": ", 1)[1], "field": e.split(": ", 1)[0]} for e in errors]
        details = {"name": name, "group": "nvidia.com", "kind": "DynamoGraphDeployment", "causes": causes}
        return ApiError(status, f'admission webhook "{WEBHOOK}" denied the request: {text}', "Invalid", details)
    return ApiError(status, f'admission webhook "{WEBHOOK}" denied the request: {"; ".join(errors)}', "Forbidden")
