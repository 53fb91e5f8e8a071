"""Manifest paths: a spec-level finding re-pointed at the field of the manifest it came from."""

from __future__ import annotations

from typing import Any


def raw_names(body: dict[str, Any], alpha: bool) -> dict[str, int]:
    if alpha:
        return {}
    return {c.get("name"): i for i, c in enumerate(body.get("components") or []) if isinstance(c, dict)}


_SPEC_TO_MANIFEST = {
    # spec field -> (v1alpha1 path under the service, v1beta1 path under the component)
    "replicas": ("replicas", "replicas"),
    "name": ("", "name"),
    "gpus": ("resources.limits.gpu", "podTemplate.spec.containers[main].resources.limits"),
    "shared_memory": ("sharedMemory.size", "sharedMemorySize"),
    "hf_token_secret": ("envFromSecret", "podTemplate.spec.containers[main].envFrom"),
    "image": ("extraPodSpec.mainContainer.image", "podTemplate.spec.containers[main].image"),
}


def _manifest_finding(finding, alpha: bool, index: dict[str, int]):
    """A spec-level finding re-pointed at the manifest field it came from."""
    import dataclasses
    import re as _re

    path = finding.path
    if path in ("name", "namespace"):
        path = f"metadata.{path}"
    elif path == "":
        path = "spec.services" if alpha else "spec.components"
    else:
        match = _re.match(r"^services\[(?P<svc>[^\]]*)\](?:\.(?P<field>\w+))?", path)
        if match:
            svc, field = match.group("svc"), match.group("field") or ""
            base = f"spec.services.{svc}" if alpha else f"spec.components[{index.get(svc, svc)}]"
            sub = _SPEC_TO_MANIFEST.get(field, (field, field))[0 if alpha else 1]
            path = f"{base}.{sub}" if sub else base
    return dataclasses.replace(finding, path=path)
