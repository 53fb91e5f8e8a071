"""The pre-check's view of the admission rules: what a create of the manifest would be refused for,
as ERROR findings (``webhook_<rule>`` for the operator's validating webhook, ``crd_rule`` for the
CRD's CEL rules), at the manifest's own paths where the rule's path can be mapped back."""

from __future__ import annotations

import re
from typing import Any

from core.findings import Finding, Severity

from . import V1ALPHA1, create_errors, product_to_beta

_FIXES = {
    "runtime_version": "tag the main image with a release version (e.g. :1.1.0), or set runtimeVersionOverride to the "
                       "Dynamo release the image contains",
    "main_image": "set the main container's image",
    "components_required": "add at least one component",
    "grove_name_length": "shorten the DynamoGraphDeployment name or the component name",
    "grove_pathway": "use the Grove pathway (leave nvidia.com/enable-grove unset) or remove the field",
    "epp": "give the EPP component exactly one replica, no multinode and an eppConfig with one source",
    "gpu_power_limit": "set the power limit as a positive whole number of watts, without DRA devices",
    "restart_order": "list every component once in spec.restart.strategy.order, or none for a parallel restart",
    "topology_constraint": "set spec.topologyConstraint (with a packDomain unless components carry their own)",
}
_FIX = "change the manifest as the message says: the Dynamo operator refuses it as it is"
_CEL_FIX = "change the manifest as the message says: the API server's CRD validation refuses it as it is"


def webhook_findings(manifest: Any) -> list[Finding]:
    """ERROR findings for everything a create of ``manifest`` would be refused for."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("spec"), dict):
        return []
    alpha = manifest.get("apiVersion") == V1ALPHA1
    beta = product_to_beta(manifest) if alpha else manifest
    components = (beta or {}).get("spec", {}).get("components") or []
    names = [c.get("name") if isinstance(c, dict) else None for c in components]
    out = []
    for error in create_errors(manifest, to_beta=lambda _m: beta):
        rule = getattr(error, "rule", "")
        code = f"webhook_{rule}" if isinstance(rule, str) and rule and not hasattr(error, "transition") else "crd_rule"
        fix = _FIXES.get(rule, _FIX) if code != "crd_rule" else _CEL_FIX
        where = "the Dynamo operator's validating webhook" if code != "crd_rule" else "the CRD's validation rules"
        path = _manifest_path(error.path, alpha, names)
        out.append(Finding(Severity.ERROR, code, path, f"{where} refuses this manifest: {error}", fix))
    return out


_COMPONENT = re.compile(r"^spec\.components\[(\d+)\](.*)$")
_SERVICE = re.compile(r"^spec\.services\[([^\]]*)\](.*)$")


def _manifest_path(path: str, alpha: bool, names: list[Any]) -> str:
    """``spec.components[1].x`` -> ``spec.services.<name>.x`` for a v1alpha1 manifest (the v1beta1
    component's name is its service's key); ``spec.services[worker]`` -> ``spec.services.worker``."""
    match = _SERVICE.match(path)
    if match:
        return f"spec.services.{match.group(1)}{match.group(2)}"
    match = _COMPONENT.match(path)
    if alpha and match and int(match.group(1)) < len(names) and names[int(match.group(1))]:
        return f"spec.services.{names[int(match.group(1))]}{match.group(2)}"
    return path
