"""Folders kept in Git as kustomize directories: each is built as a unit, at the commit synced,
with kubectl kustomize (graphs/kustomize.py), and the DGD it builds is one graph, as Argo CD and
Flux build a kustomize folder before they apply it.

Which folders: the repository's folder itself when it holds a kustomization (then the YAML files
beside it are the build's, never imported on their own), else each folder directly under it that
holds one and is not a Component (kind: Component is a part overlays use, not a build).

What is read: the folder and every folder its kustomizations name (``resources``, ``components``,
``bases``...), walked from the Git objects; upstream's overlays name components six levels up
(recipes/qwen3-32b/vllm/cloud-providers/kustomize/overlays/*). Those folders, and nothing else,
are taken from the commit with ``git archive`` (at most ``MAX_FILES`` files and ``MAX_BYTES``),
unpacked within graphs/archive.py's bounds into a temporary folder, and built there.

The link's ``path`` is the unit's kustomization file; its ``blob`` is the Git blob id of what
the build printed, so that a change anywhere the build reads, and only such a change, makes
a new revision."""

from __future__ import annotations

import hashlib
import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.errors import ManifestError
from core.specio import load_documents
from graphs.archive import extract
from graphs.kustomize import KUSTOMIZATION_FILES, MAX_KUSTOMIZATION_BYTES, REFERENCES, build

from .git import Mirror

MAX_UNITS = 50
MAX_FOLDERS = 100  # folders one build may read
MAX_FILES = 1000
MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Unit:
    folder: str  # the kustomize directory, a repository path
    path: str  # its kustomization file: the GraphLink's path


def is_unit_path(path: str) -> bool:
    """A link kept for a kustomize directory (its path names the kustomization file)."""
    return posixpath.basename(path) in KUSTOMIZATION_FILES


def blob_id(data: bytes) -> str:
    """The id Git gives these bytes as a blob (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()  # noqa: S324 (Git's own id)


def _kustomization(mirror: Mirror, sha: str, folder: str) -> tuple[str, dict] | None:
    files = mirror.files(sha, folder)
    for name in KUSTOMIZATION_FILES:
        path = posixpath.join(folder, name) if folder else name
        if path in files:
            if mirror.blob_size(files[path]) > MAX_KUSTOMIZATION_BYTES:
                return path, {}
            try:
                documents = load_documents(mirror.read_blob(files[path]), max_bytes=MAX_KUSTOMIZATION_BYTES)
            except ManifestError:
                return path, {}
            return path, documents[0] if len(documents) == 1 and isinstance(documents[0], dict) else {}
    return None


def units(repo, mirror: Mirror, sha: str) -> list[Unit]:
    """The kustomize directories of the repository's folder at ``sha`` (see the module docstring)."""
    own = _kustomization(mirror, sha, repo.path)
    if own is not None:
        return [Unit(repo.path, own[0])]
    found = []
    for folder in mirror.folders(sha, repo.path)[:MAX_UNITS * 4]:
        kustomization = _kustomization(mirror, sha, folder)
        if kustomization is not None and kustomization[1].get("kind") != "Component":
            found.append(Unit(folder, kustomization[0]))
    return found[:MAX_UNITS]


def folders_read(mirror: Mirror, sha: str, unit: Unit) -> list[str]:
    """The unit's folder and every folder of the repository its kustomizations name."""
    seen, todo = [], [unit.folder]
    while todo and len(seen) < MAX_FOLDERS:
        folder = todo.pop(0)
        if folder in seen:
            continue
        seen.append(folder)
        kustomization = _kustomization(mirror, sha, folder)
        data = kustomization[1] if kustomization else {}
        for key in REFERENCES:
            entries = data.get(key)
            for entry in entries if isinstance(entries, list) else []:
                if not isinstance(entry, str) or "://" in entry:
                    continue  # graphs/kustomize.check_local names it
                target = posixpath.normpath(posixpath.join(folder, entry))
                if target.startswith("..") or target == ".":
                    continue
                if mirror.files(sha, target) or mirror.folders(sha, target):
                    todo.append(target)
    return seen


def build_unit(mirror: Mirror, sha: str, unit: Unit, folders: list[str]) -> bytes:
    """What ``kubectl kustomize`` prints for the unit at ``sha``, from ``folders`` (folders_read).
    Raises ManifestError."""
    files, size = mirror.tree_size(sha, folders)
    if files > MAX_FILES or size > MAX_BYTES:
        raise ManifestError.single(unit.path, f"the folders {unit.folder} builds from hold {files:,} files and "
                                              f"{size:,} bytes; at most {MAX_FILES:,} and {MAX_BYTES:,}",
                                   "kustomize_too_large")
    with tempfile.TemporaryDirectory(prefix="dynamo-cp-git-kustomize-") as tmp:
        root = Path(tmp) / "tree"
        root.mkdir()
        extract(mirror.archive(sha, folders), root)
        return build(root / unit.folder if unit.folder else root, root=root,
                     max_bytes=settings.MAX_MANIFEST_BYTES).encode()
