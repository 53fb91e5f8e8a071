"""An uploaded kustomize directory: a .tar.gz (.tgz, .tar) or .zip archive, unpacked within
bounds into a temporary folder and built there with kubectl kustomize (graphs/kustomize.py).

Nothing in an archive reaches outside the folder: a member with an absolute path, a ``..``, a
link (symbolic or hard), a device or a FIFO is refused, and so is an archive of more than
``MAX_FILES`` files, ``MAX_TOTAL_BYTES`` unpacked, or paths deeper than ``MAX_DEPTH``; each
file is read only up to what is left of the bound (a zip entry's declared size may lie)."""

from __future__ import annotations

import io
import posixpath
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path

from core.errors import ManifestError

from .kustomize import KUSTOMIZATION_FILES, build, is_component, kustomization_file, read_kustomization

MAX_FILES = 1000
MAX_TOTAL_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 32


def is_archive(data: bytes) -> bool:
    """A gzip stream or a zip file (their magic numbers); a plain tar is ``ustar`` at offset 257."""
    return data[:2] == b"\x1f\x8b" or data[:4] in (b"PK\x03\x04", b"PK\x05\x06") or data[257:262] == b"ustar"


def _refused(message: str, code: str = "archive_refused", fix: str = "") -> ManifestError:
    return ManifestError.single("", message, code, fix)


def _member_path(name: str) -> str | None:
    """The member's relative path, checked; None for the archive's own root entry."""
    if "\x00" in name or "\\" in name:
        raise _refused(f"archive member {name!r}: a path with a NUL or a backslash", "archive_path")
    if name.startswith("/"):
        raise _refused(f"archive member {name!r}: an absolute path", "archive_path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _refused(f"archive member {name!r}: a path with '..'", "archive_path")
    if len(parts) > MAX_DEPTH:
        raise _refused(f"archive member {name!r}: deeper than {MAX_DEPTH} folders", "archive_path")
    return "/".join(parts) or None


class _Budget:
    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0

    def take(self, name: str, size: int) -> int:
        """What is left to read for one more file (refused when none is)."""
        self.files += 1
        if self.files > MAX_FILES:
            raise _refused(f"the archive holds more than {MAX_FILES} files", "archive_too_large")
        left = MAX_TOTAL_BYTES - self.bytes
        if size > left:
            raise _refused(f"the archive unpacks to more than {MAX_TOTAL_BYTES:,} bytes (at {name})",
                           "archive_too_large")
        return left


def _write(root: Path, relative: str, data: bytes, budget: _Budget) -> None:
    budget.bytes += len(data)
    if budget.bytes > MAX_TOTAL_BYTES:
        raise _refused(f"the archive unpacks to more than {MAX_TOTAL_BYTES:,} bytes (at {relative})",
                       "archive_too_large")
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        raise _refused(f"archive member {relative!r} appears twice", "archive_path")
    target.write_bytes(data)


def extract(data: bytes, root: Path) -> None:
    """Unpack ``data`` into the empty folder ``root`` within the bounds above."""
    budget = _Budget()
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        _extract_zip(data, root, budget)
    else:
        _extract_tar(data, root, budget)


def _extract_tar(data: bytes, root: Path, budget: _Budget) -> None:
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for member in tar:
                relative = _member_path(member.name)
                if member.isdir() or relative is None:
                    budget.take(member.name, 0)
                    continue
                if not member.isreg():
                    raise _refused(f"archive member {member.name!r} is a link or a special file; only folders and "
                                   "regular files are unpacked", "archive_link")
                left = budget.take(member.name, member.size)
                handle = tar.extractfile(member)
                _write(root, relative, handle.read(min(member.size, left) + 1) if handle else b"", budget)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise _refused(f"not a readable .tar.gz or .zip archive: {exc}", "archive_unreadable") from None


def _extract_zip(data: bytes, root: Path, budget: _Budget) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            if len(members) > MAX_FILES:
                raise _refused(f"the archive holds more than {MAX_FILES} files", "archive_too_large")
            for info in members:
                relative = _member_path(info.filename)
                mode = info.external_attr >> 16
                if info.is_dir() or relative is None:
                    budget.take(info.filename, 0)
                    continue
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # many zips write permissions alone
                    raise _refused(f"archive member {info.filename!r} is a link or a special file; only folders "
                                   "and regular files are unpacked", "archive_link")
                if info.flag_bits & 0x1:
                    raise _refused(f"archive member {info.filename!r} is encrypted", "archive_unreadable")
                left = budget.take(info.filename, info.file_size)
                with archive.open(info) as handle:
                    _write(root, relative, handle.read(left + 1), budget)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as exc:
        raise _refused(f"not a readable .tar.gz or .zip archive: {exc}", "archive_unreadable") from None


def _top_kustomizations(root: Path) -> list[Path]:
    """Folders holding a kustomization that is not a Component and that no other kustomization
    of the archive uses as a resource or base: what the archive is there to build."""
    folders = sorted({p.parent for name in KUSTOMIZATION_FILES for p in root.rglob(name)})
    used: set[Path] = set()
    for folder in folders:
        found = kustomization_file(folder)
        if found is None:
            continue
        data = read_kustomization(found, shown=found.relative_to(root).as_posix())
        for key in ("resources", "bases", "components"):
            entries = data.get(key)
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, str) and "://" not in entry:
                    used.add((folder / entry).resolve())
    return [f for f in folders if kustomization_file(f) and f.resolve() not in used and not is_component(f)]


def built_manifest(data: bytes, *, path: str = "", max_bytes: int) -> tuple[str, str]:
    """The manifest file an uploaded kustomize directory builds to, and the folder built (``path``
    inside the archive, else its one top kustomization). Raises ManifestError naming the problem."""
    with tempfile.TemporaryDirectory(prefix="dynamo-cp-upload-") as tmp:
        root = Path(tmp) / "archive"
        root.mkdir()
        extract(data, root)
        if path:
            relative = _member_path(path.strip())
            folder = root / relative if relative else root
            if not folder.is_dir() or kustomization_file(folder) is None:
                raise _refused(f"the archive has no kustomization.yaml in {path!r}", "kustomize_missing")
        else:
            tops = _top_kustomizations(root)
            if not tops:
                raise _refused("the archive holds no kustomization.yaml (nor kustomization.yml, Kustomization) "
                               "outside components", "kustomize_missing",
                               "upload a kustomize directory, or the manifest file itself")
            if len(tops) > 1:
                names = ", ".join(posixpath.join(".", t.relative_to(root).as_posix()) for t in tops[:10])
                raise _refused(f"the archive holds {len(tops)} kustomizations that nothing else uses ({names}): "
                               "which one is the graph?", "kustomize_ambiguous",
                               "name its folder: the import form's 'Folder in the archive', the API's ?path=")
            folder = tops[0]
        built = folder.relative_to(root).as_posix()
        return build(folder, root=root, max_bytes=max_bytes), built
