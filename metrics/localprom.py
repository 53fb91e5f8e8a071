"""The control plane's own Prometheus server, which scrapes local graphs.

It reads two files that live in PROMETHEUS_DIR:

* ``prometheus.yml``: one scrape job, ``dynamo-local``, whose targets come from file-based
  service discovery (Prometheus watches the folder and re-reads it within seconds);
* ``targets/local-graphs.json``: every local graph's metrics endpoints, regenerated from the
  status cache's Pod rows by ``sync_targets()``: the frontend's HTTP port and each worker's
  system port (both serve ``/metrics``), labelled ``graph``, ``pool`` (frontend, prefill,
  decode, worker), ``pod`` and ``service``.

``sync_targets()`` is cheap enough to call on every operator loop: one query, and the file is
rewritten only when its content changes (atomically, so Prometheus never reads half a file).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

from django.conf import settings

from graphs.models import Pod
from graphs.runtimes.registry import ON_THIS_HOST

from .promql import LOCAL_JOB

TARGETS_FILE = "local-graphs.json"
HOST = "127.0.0.1"  # local graphs listen on loopback only (graphs/runtimes/local/argv.py)
_last_written: dict[Path, str] = {}
_lock = threading.Lock()


def prometheus_dir(directory: Path | str | None = None) -> Path:
    return Path(directory or settings.PROMETHEUS_DIR)


def config_text(*, scrape_interval: int, targets_dir: Path) -> str:
    """prometheus.yml for local graphs. JSON is valid YAML: no YAML writer needed."""
    interval = f"{int(scrape_interval)}s"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   # A scrape must end before the next one starts.
                   "scrape_timeout": f"{max(1, int(scrape_interval) - 1)}s"},
        "scrape_configs": [{
            "job_name": LOCAL_JOB,
            "metrics_path": "/metrics",
            "file_sd_configs": [{"files": [str(targets_dir / "*.json")], "refresh_interval": "30s"}],
        }],
    }
    return json.dumps(config, indent=2) + "\n"


def write_config(directory: Path | str | None = None, *, scrape_interval: int | None = None) -> Path:
    """Write prometheus.yml (and an empty targets file if there is none yet); return its path."""
    root = prometheus_dir(directory)
    targets = root / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    path = root / "prometheus.yml"
    _write_atomic(path, config_text(scrape_interval=scrape_interval or settings.PROMETHEUS_SCRAPE_INTERVAL,
                                    targets_dir=targets))
    if not (targets / TARGETS_FILE).exists():
        _write_atomic(targets / TARGETS_FILE, "[]\n")
    return path


def local_targets() -> list[dict]:
    """file_sd target groups for every pod of every local graph that has a metrics port."""
    pods = (Pod.objects.filter(deployment__runtime__in=ON_THIS_HOST, port__isnull=False)
            .values_list("deployment__graph__name", "name", "service", "role", "port")
            .order_by("deployment__graph__name", "name"))
    return [{"targets": [f"{HOST}:{port}"], "labels": {"graph": graph, "pool": role, "pod": pod, "service": service}}
            for graph, pod, service, role, port in pods]


def sync_targets(directory: Path | str | None = None) -> bool:
    """Bring targets/local-graphs.json in line with the Pod rows. Returns True when it changed.
    The local operator calls this once per loop."""
    path = prometheus_dir(directory) / "targets" / TARGETS_FILE
    text = json.dumps(local_targets(), indent=1, sort_keys=True) + "\n"
    with _lock:
        if _last_written.get(path) == text:
            return False
        try:
            if path.read_text() == text:
                _last_written[path] = text
                return False
        except OSError:
            path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, text)
        _last_written[path] = text
    return True


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def find_binary() -> str | None:
    """The Prometheus executable, or None (``scripts/services.sh prometheus`` installs it)."""
    return find_tool(settings.PROMETHEUS_BINARY)


def find_tool(name: str) -> str | None:
    """``name`` (prometheus, promtool) on PATH or as a path, else in TOOLS_DIR, where
    scripts/services.sh unpacks Debian's package; None when it is nowhere."""
    if shutil.which(name):
        return shutil.which(name)
    if os.sep in name:  # an explicit path: that file or nothing
        return name if Path(name).is_file() else None
    provisioned = Path(settings.TOOLS_DIR) / "usr" / "bin" / Path(name).name
    return str(provisioned) if provisioned.is_file() and os.access(provisioned, os.X_OK) else None


def server_argv(binary: str, *, config: Path, port: int, storage: Path, retention: str) -> list[str]:
    return [binary, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={storage}", f"--storage.tsdb.retention.time={retention}",
            # Reload prometheus.yml on SIGHUP or POST /-/reload; targets need no reload.
            "--web.enable-lifecycle", "--log.level=warn"]
