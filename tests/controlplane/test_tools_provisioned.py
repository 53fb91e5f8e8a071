"""`make up` provisions what local graphs need beside the product: Prometheus for the charts and
etcd for a graph with Dynamo's Planner, both unpacked from Debian's packages into TOOLS_DIR by
scripts/services.sh, and found there."""

from __future__ import annotations

from graphs.runtimes.local.planner_executor import etcd_binary


def test_the_planners_etcd_is_found_where_services_sh_unpacks_it(settings, tmp_path):
    settings.TOOLS_DIR = tmp_path
    settings.LOCAL_RUNTIME_ETCD = "etcd-that-is-not-installed"
    assert etcd_binary() is None
    unpacked = tmp_path / "usr" / "bin" / "etcd"
    unpacked.parent.mkdir(parents=True)
    unpacked.write_text("#!/bin/sh\n")
    assert etcd_binary() is None  # not executable: not an etcd
    unpacked.chmod(0o755)
    assert etcd_binary() == str(unpacked)


def test_services_sh_unpacks_debians_etcd_where_the_runtime_finds_it(settings, tmp_path):
    """On a host without etcd on PATH (here: PATH made of every command but etcd)."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/bin", "/usr/sbin", "/bin", "/sbin"):
        for entry in Path(folder).iterdir() if Path(folder).is_dir() else ():
            if entry.name != "etcd" and not (bin_dir / entry.name).exists():
                (bin_dir / entry.name).symlink_to(entry)
    tools = tmp_path / "tools"
    done = subprocess.run(["bash", str(root / "scripts" / "services.sh"), "etcd"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PATH": str(bin_dir), "CONTROLPLANE_TOOLS_DIR": str(tools)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "services: installed etcd Version: 3." in done.stdout
    settings.TOOLS_DIR, settings.LOCAL_RUNTIME_ETCD = tools, "etcd-that-is-not-installed"
    assert etcd_binary() == str(tools / "usr" / "bin" / "etcd")
