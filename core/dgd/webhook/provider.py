"""Provider-native overrides (``providerOverride``): where one is allowed and which Grove target it
lowers to (shared_v1beta1.go@2a6da14c:196-282, internal/provideroverride/registry.go@2a6da14c), and
that its identity stays fixed across updates (shared_v1beta1.go@2a6da14c:793-818).

Not carried over: ``provideroverride.ValidateValue`` (the override's value checked against Grove's Go
types and the Dynamo-owned field list) and ``WritesGroveTopology``; both need Grove's API types."""

from __future__ import annotations

from typing import Any

from . import errors as e
from .errors import FieldError, forbidden, invalid, not_supported, required


def expected_target(provider: str, api_version: str, scope: str, comp: dict[str, Any] | None) -> tuple[str, str]:
    """``provideroverride.ExpectedTarget``: (target, error)."""
    if provider != e.PROVIDER_GROVE:
        return "", f'workload provider "{provider}" does not support provider overrides'
    if api_version != e.GROVE_API_VERSION:
        return "", f'unsupported Grove apiVersion "{api_version}"; supported value is "{e.GROVE_API_VERSION}"'
    if scope == "root":
        return "PodCliqueSet", ""
    if scope == "component":
        return ("PodCliqueScalingGroupConfig" if e.uses_pcsg(comp or {}) else "PodCliqueTemplateSpec"), ""
    if comp is None or e.nodes(comp) <= 1:
        return "", f'scope "{scope}" requires a multinode component'
    if (e.gms(comp) or {}).get("mode") == "InterPod":
        return "", f'scope "{scope}" is not supported for inter-pod GMS components'
    return "PodCliqueTemplateSpec", ""


def validate_provider_override(override: dict[str, Any], at: str, provider: str, scope: str,
                               comp: dict[str, Any] | None) -> list[FieldError]:
    """``validateProviderOverride`` (shared_v1beta1.go@2a6da14c:198-282); DGDs support overrides."""
    if not provider:
        return [forbidden(at, f'requires controller-owned annotation "{e.WORKLOAD_PROVIDER}" to be materialized; wait '
                              "for controller adoption and retry", "provider_override")]
    if provider != e.PROVIDER_GROVE:
        return [forbidden(at, f'requires workload provider "{e.PROVIDER_GROVE}", but "{provider}" is selected',
                          "provider_override")]
    api_version = override.get("apiVersion") or ""
    if not api_version:
        return [required(f"{at}.apiVersion", "is required", "provider_override")]
    if api_version != e.GROVE_API_VERSION:
        return [not_supported(f"{at}.apiVersion", api_version, [e.GROVE_API_VERSION], "provider_override")]
    target, error = expected_target(provider, api_version, scope, comp)
    if error:
        return [forbidden(at, error, "provider_override")]
    if not override.get("target"):
        return [required(f"{at}.target", "must be defaulted from the provider context", "provider_override")]
    if override["target"] != target:
        return [invalid(f"{at}.target", override["target"], f'must match the provider-context target "{target}"',
                        "provider_override")]
    return []


def provider_override_update(new: Any, old: Any, at: str) -> list[FieldError]:
    """``validateProviderOverrideUpdate`` (shared_v1beta1.go@2a6da14c:793-818), both present."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return []
    out = []
    for key in ("apiVersion", "target"):
        if (new.get(key) or "") != (old.get(key) or ""):
            out.append(FieldError(f"{at}.{key}", "Invalid", e.IMMUTABLE, new.get(key) or "", rule="provider_override",
                                  update=True))
    return out


def default_target(override: Any, provider: str, scope: str, comp: dict[str, Any] | None) -> None:
    """``provideroverride.DefaultTarget``, as the defaulting webhook runs it."""
    if isinstance(override, dict) and not override.get("target"):
        target, error = expected_target(provider, override.get("apiVersion") or "", scope, comp)
        if not error:
            override["target"] = target
