"""A kustomize directory built as ``kubectl kustomize`` builds it, into the text of one manifest
file (core/documents.load_bundle reads it). Upstream ships its recipes as bases, overlays and
provider components (ai-dynamo/dynamo recipes/kustomize/, recipes/*/kustomize/): an uploaded
archive (graphs/archive.py), a folder kept in Git (repos/kustomize.py) and the CLI's
``graphs import DIR`` all come here, or, for the CLI, to the user's own kubectl.

The build reads nothing but the files under ``root`` and never the network:

* before kubectl runs, every kustomization it would read is walked from the one asked for: each
  ``resources``/``components``/``bases``/``generators``/``transformers``/``validators`` entry
  must be a file or directory that exists under ``root`` (a URL, a git reference or a path
  that leaves ``root`` is refused, naming the kustomization and the entry); Helm charts are
  refused (their inflation downloads);
* kubectl runs with ``--load-restrictor LoadRestrictionsRootOnly`` (each kustomization loads
  files from its own folder only), the folder as an absolute path after ``--`` (never a flag),
  no plugins or Helm (not enabled), an environment of its own whose HTTP(S) proxy is a closed
  local port (should anything still try to fetch, it fails at once), a timeout, and an output
  bound beyond which it is killed."""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from core.errors import ManifestError
from core.specio import load_documents

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
REFERENCES = ("resources", "components", "bases", "generators", "transformers", "validators")
TIMEOUT = 30.0  # seconds for one build
MAX_KUSTOMIZATIONS = 200  # kustomizations one build may read (upstream's overlays read 6)
MAX_KUSTOMIZATION_BYTES = 256 * 1024
_REMOTE_PREFIXES = ("git@", "git::", "ssh:", "http:", "https:", "github.com/", "gitlab.com/", "bitbucket.org/")
_CLOSED_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once


def kustomization_file(directory: Path) -> Path | None:
    """The kustomization file of ``directory`` (kustomize's three names), else None."""
    for name in KUSTOMIZATION_FILES:
        candidate = directory / name
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    return None


def read_kustomization(path: Path, *, shown: str) -> dict:
    """One kustomization as a mapping, within the YAML bounds of a manifest."""
    if path.stat().st_size > MAX_KUSTOMIZATION_BYTES:
        raise _refused(shown, f"{shown} is more than {MAX_KUSTOMIZATION_BYTES:,} bytes", "kustomize_too_large")
    try:
        documents = load_documents(path.read_bytes(), max_bytes=MAX_KUSTOMIZATION_BYTES)
    except ManifestError as exc:
        raise _refused(shown, f"{shown} is not valid YAML: {exc}", "kustomize_yaml") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise _refused(shown, f"{shown} is not one YAML mapping", "kustomize_yaml")
    return documents[0]


def is_component(directory: Path) -> bool:
    """A kustomize Component (kind: Component): a part overlays use, not something built alone."""
    found = kustomization_file(directory)
    if found is None:
        return False
    try:
        return read_kustomization(found, shown=found.name).get("kind") == "Component"
    except ManifestError:
        return False


def _refused(path: str, message: str, code: str, fix: str = "") -> ManifestError:
    return ManifestError.single(path, message, code, fix)


def _remote(entry: str) -> bool:
    return "://" in entry or entry.startswith(_REMOTE_PREFIXES) or "?ref=" in entry or entry.endswith(".git")


def check_local(directory: Path, root: Path) -> None:
    """Refuse, before anything runs, a build of ``directory`` that would read outside ``root`` or
    from the network (see the module's docstring). Names the kustomization and the entry."""
    root = root.resolve()
    seen: set[Path] = set()
    todo = [directory.resolve()]
    while todo:
        folder = todo.pop()
        if folder in seen:
            continue
        seen.add(folder)
        if len(seen) > MAX_KUSTOMIZATIONS:
            raise _refused("", f"the build reads more than {MAX_KUSTOMIZATIONS} kustomizations", "kustomize_too_large")
        where = folder.relative_to(root).as_posix() if folder != root else "."
        found = kustomization_file(folder)
        if found is None:
            raise _refused(where, f"{where} holds no kustomization.yaml (nor kustomization.yml, Kustomization)",
                           "kustomize_missing")
        shown = f"{where}/{found.name}" if where != "." else found.name
        data = read_kustomization(found, shown=shown)
        if data.get("helmCharts") or data.get("helmChartInflationGenerator"):
            raise _refused(shown, f"{shown} inflates Helm charts, which needs the network and Helm",
                           "kustomize_helm", "render the chart into the directory and name the files instead")
        for key in REFERENCES:
            entries = data.get(key) or []
            if not isinstance(entries, list):
                raise _refused(f"{shown}:{key}", f"{shown}: {key} is not a list", "kustomize_yaml")
            for entry in entries:
                todo += _local_target(entry, folder, root, f"{shown}: {key}")


def _local_target(entry: object, folder: Path, root: Path, where: str) -> list[Path]:
    """The folder an entry names (to walk next), [] for a file; refused unless under ``root``."""
    if not isinstance(entry, str) or not entry.strip():
        raise _refused(where, f"{where}: {entry!r} is not a path", "kustomize_entry")
    if _remote(entry):
        raise _refused(where, f"{where}: {entry!r} is remote; remote resources and bases are never fetched",
                       "kustomize_remote", "put what it names into the directory and refer to it by a relative path")
    target = (folder / entry).resolve()
    if not target.is_relative_to(root):
        raise _refused(where, f"{where}: {entry!r} leaves the directory being built", "kustomize_outside",
                       "include what it names in the archive (or the repository) and refer to it inside")
    if not target.exists():
        raise _refused(where, f"{where}: {entry!r} is neither a file nor a folder of the directory",
                       "kustomize_missing")
    return [target] if target.is_dir() else []


def kubectl() -> str:
    found = shutil.which("kubectl") or ("/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None)
    if found is None:
        raise _refused("", "kubectl is not installed where the control plane runs: a kustomize directory cannot be "
                           "built here", "kustomize_unavailable", "build it with kubectl kustomize and import the "
                                                                   "result")
    return found


def build(directory: Path, *, root: Path, max_bytes: int, timeout: float = TIMEOUT) -> str:
    """The manifest file ``kubectl kustomize directory`` prints, after :func:`check_local`.
    Raises ManifestError naming what is wrong (kubectl's own message for a failed build)."""
    directory = directory.resolve()
    check_local(directory, root)
    with tempfile.TemporaryDirectory(prefix="dynamo-cp-kustomize-") as home:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "XDG_CONFIG_HOME": home,
               "KUSTOMIZE_PLUGIN_HOME": str(Path(home) / "plugins"), "LC_ALL": "C",
               "HTTP_PROXY": _CLOSED_PROXY, "HTTPS_PROXY": _CLOSED_PROXY, "http_proxy": _CLOSED_PROXY,
               "https_proxy": _CLOSED_PROXY, "ALL_PROXY": _CLOSED_PROXY, "NO_PROXY": "", "GIT_TERMINAL_PROMPT": "0"}
        args = [kubectl(), "kustomize", "--load-restrictor", "LoadRestrictionsRootOnly", "--", str(directory)]
        code, out, err = _run(args, env=env, cwd=home, max_bytes=max_bytes, timeout=timeout)
    if code is None:
        raise _refused("", f"kubectl kustomize printed more than {max_bytes:,} bytes; a manifest may have at most "
                           "that", "too_large")
    if code == -1:
        raise _refused("", f"kubectl kustomize gave no result in {timeout:g} s", "kustomize_timeout")
    if code != 0:
        text = err.decode("utf-8", "replace").replace(str(root.resolve()) + "/", "").strip()
        lines = [line.strip() for line in text.splitlines() if line.strip()][-4:]
        raise _refused("", "kubectl kustomize failed: " + (" ".join(lines) or f"exit status {code}"),
                       "kustomize_failed")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise _refused("", "kubectl kustomize printed something that is not UTF-8 text", "encoding") from None


def _run(args: list[str], *, env: dict, cwd: str, max_bytes: int, timeout: float,
         ) -> tuple[int | None, bytes, bytes]:
    """Run, reading both pipes as they come: (exit code, stdout, stderr); the code is None when
    stdout passed ``max_bytes`` and -1 past ``timeout`` (the process is killed either way)."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd, start_new_session=True)
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(proc)
                return -1, bytes(out), bytes(err)
            for key, _ in selector.select(left):
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if len(out) > max_bytes or len(err) > 64 * 1024:
                    _kill(proc)
                    return (None if len(out) > max_bytes else 1), bytes(out[:max_bytes]), bytes(err[-65536:])
    try:
        code = proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        code = -1
    _kill(proc)
    return code, bytes(out), bytes(err)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
