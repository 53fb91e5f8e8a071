"""The Dynamo operator's validating webhook for DGD creates and updates, as the emulator's fake
operator runs it (ai-dynamo/dynamo ``deploy/operator/internal/webhook/validation/`` at commit 2a6da14c).

The rules themselves are the product's transcription of upstream's (``core.dgd.webhook``: create
rules ``create.py``, update rules ``update.py``, v1alpha1 compatibility rules ``alpha.py``, each
citing its file and line): the emulator stands in for the operator here. The tests that hold the
rules to upstream (``tests/core/test_webhook_rules.py``) are written from upstream's own test tables and
messages, not from this module. What this module adds is the API server's side:

* the webhook sees v1beta1 (the API server converts first) and, for a request sent as v1alpha1,
  also the v1alpha1 object (``dynamographdeployment_helpers.go``: the runtime-version rules then
  use the v1alpha1 paths); it skips status writes and objects being deleted, and runs the
  defaulting webhook's defaults first (``webhook/defaulting/dynamographdeployment_handler.go``);
* the errors come back as ``k8serrors.NewInvalid`` (HTTP 422 ``Invalid``,
  ``dynamographdeployment_helpers.go@2a6da14c:53-61``), which the API server prefixes with
  ``admission webhook "<name>" denied the request:``. Releases before the v1beta1 webhooks
  answered a plain denial, which the API server turns into 403 Forbidden
  (``KubeEmulator.operator.webhook_status = 403``).
"""

from __future__ import annotations

from typing import Any

from core.dgd.webhook import OPERATOR_PRINCIPAL, Cluster, FieldError, admission_errors, default
from core.dgd.webhook.update import can_modify_replicas

from .errors import ApiError

WEBHOOK = "vdynamographdeployment.kb.io"
PLANNER_SERVICE_ACCOUNT = "planner-serviceaccount"

__all__ = ["OPERATOR_PRINCIPAL", "PLANNER_SERVICE_ACCOUNT", "WEBHOOK", "can_modify_replicas", "denial", "errors"]


def errors(views: dict[str, Any], *, source: str, username: str, cluster: Cluster) -> list[FieldError]:
    """The webhook's errors; ``views`` holds ``new`` and ``old`` (None on a create) in v1beta1 and,
    for a request sent as v1alpha1, ``new_alpha`` and ``old_alpha``."""
    new, old = views["new"], views.get("old")
    return admission_errors(default(new, create=old is None, cluster=cluster), old, username=username,
                            source=source, new_alpha=views.get("new_alpha"), old_alpha=views.get("old_alpha"),
                            cluster=cluster)


def denial(name: str, found: list[Any], status: int) -> ApiError:
    """The API server's answer when the webhook refuses (422 Invalid, or 403 from older releases)."""
    texts = [str(e) for e in found]
    if status == 422:  # NewInvalid keeps its details, and the API server passes them on (ToStatusErr)
        text = f'DynamoGraphDeployment.nvidia.com "{name}" is invalid: '
        text += texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
        causes = [{"reason": e.reason, "message": e.body, "field": e.path} for e in found]
        details = {"name": name, "group": "nvidia.com", "kind": "DynamoGraphDeployment", "causes": causes}
        return ApiError(status, f'admission webhook "{WEBHOOK}" denied the request: {text}', "Invalid", details)
    return ApiError(status, f'admission webhook "{WEBHOOK}" denied the request: {"; ".join(texts)}', "Forbidden")
