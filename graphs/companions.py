"""A revision's companions: the objects its manifest file held beside the DGD (ConfigMaps, PVCs,
DRA claims...; core/documents.py), as they are shown, diffed, exported and named where they do
not apply. Applying them on a cluster is the Kubernetes runtime's (runtimes/kubernetes/companions.py).

Order: an export writes the companions first, in the order of the file they came from, then the
DGD, as ``kubectl apply -f`` needs them (a DGD whose workers mount a ConfigMap or a PVC finds it
there); a file kept in Git keeps the DGD where that file has it (repos/export.py).

A Secret is never stored as a companion (core/documents.py refuses it at import). Should one be
there all the same (a revision stored before that rule), what is shown, diffed or exported
carries its keys and never its values."""

from __future__ import annotations

from typing import Any

import yaml

from core.specio import dump_yaml

HIDDEN = "(hidden: a Secret's values are never shown)"
# How the pages and messages name a kind: kubectl's short names where people use them.
SHORT_KINDS = {"PersistentVolumeClaim": "PVC"}


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (a ConfigMap's files) as literal blocks, as people write them: a diff
    then shows the changed line, not one long escaped string. PyYAML falls back to quoting a
    string a block cannot hold (trailing spaces, control characters)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_BlockDumper.add_representer(str, _str)


def dump(obj: dict[str, Any]) -> str:
    """One companion as YAML (dump_yaml's layout; multi-line strings as blocks)."""
    return yaml.dump(obj, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False, width=120,
                     allow_unicode=True)


def shown(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as anything but the apply may see it: a Secret's values replaced, keys kept."""
    if obj.get("kind") != "Secret":
        return obj
    out = dict(obj)
    for key in ("data", "stringData"):
        if isinstance(out.get(key), dict):
            out[key] = dict.fromkeys(out[key], HIDDEN)
    return out


def label(obj: dict[str, Any]) -> str:
    """``ConfigMap nvidia-config``, ``PVC models``."""
    kind = str(obj.get("kind", ""))
    return f"{SHORT_KINDS.get(kind, kind)} {(obj.get('metadata') or {}).get('name', '')}"


def listing(companions: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One row per companion, as the pages and the API list them (its YAML shown, never a Secret's values)."""
    rows = []
    for obj in companions:
        meta = obj.get("metadata") or {}
        rows.append({"apiVersion": str(obj.get("apiVersion", "")), "kind": str(obj.get("kind", "")),
                     "name": str(meta.get("name", "")), "namespace": str(meta.get("namespace") or ""),
                     "yaml": dump(shown(obj))})
    return rows


def documents(manifest: dict[str, Any], companions: list[dict[str, Any]], *, dgd_at: int | None = None,
              ) -> list[dict[str, Any]]:
    """The DGD and its companions as one file holds them: the companions in their order, the DGD
    after the first ``dgd_at`` of them (default: after all of them)."""
    shown_all = [shown(c) for c in companions]
    at = len(shown_all) if dgd_at is None else max(0, min(dgd_at, len(shown_all)))
    return [*shown_all[:at], manifest, *shown_all[at:]]


def file_text(manifest: dict[str, Any], companions: list[dict[str, Any]], *, dgd_at: int | None = None) -> str:
    """The export: the DGD alone as YAML, or with its companions as one multi-document file."""
    if not companions:
        return dump_yaml(manifest)
    return "---\n".join(dump(d) if d is not manifest else dump_yaml(d)
                         for d in documents(manifest, companions, dgd_at=dgd_at))


def diff_text(companions: list[dict[str, Any]]) -> str:
    """The companions as the revisions diff shows them after the DGD: one YAML document each."""
    return "".join(f"---\n{dump(shown(c))}" for c in companions)


def local_note(companions: list[dict[str, Any]]) -> str:
    """What the local runtime says of a graph's companions: they are a cluster's business."""
    if not companions:
        return ""
    names = [label(c) for c in companions]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    verb = "is" if len(names) == 1 else "are"
    return (f"{listed} {verb} applied on clusters only; the local runtime runs the graph's processes "
            "without them")


def companions_context(revision) -> dict:
    """A revision's companions as its page cards list them, and what the local runtime says of them."""
    kept = revision.companions
    return {"companions": listing(kept), "companions_local_note": local_note(kept)}
