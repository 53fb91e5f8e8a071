"""Run every benchmark of the control plane and print one table.

    python bench/run.py            # all
    python bench/run.py pages      # one group: pages (bench/pages_http.py), runtime, others (bench/*.py)

Each row: what was measured, the measured value, the goal, and measured/goal (≤ 1.00 meets
the goal). Measured side by side in one run on this machine; it is shared and noisy, so
read the ratios, not the third decimal. The runtime group uses its own SQLite database in a
temporary folder unless BENCH_DATABASE_URL is set; bench/pages_http.py uses PostgreSQL. Every
benchmark writes its figures under bench/results/ (bench/record.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setup_django() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="cp-bench-"))
    os.environ.setdefault("CONTROLPLANE_VAR_DIR", str(tmp))
    os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", f"sqlite:///{tmp}/bench.sqlite3")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SECURE_TLS", "0")  # loopback http, no TLS in front
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def print_table(rows: list[tuple[str, float, float, str]]) -> None:
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'measure':<{width}} {'measured':>12} {'goal':>10} {'ratio':>7}")
    for name, value, goal, unit in rows:
        ratio = value / goal if goal else float("nan")
        print(f"{name:<{width}} {value:>10.2f}{unit:>2} {goal:>8.2f}{unit:>2} {ratio:>7.2f}")


def main(argv: list[str]) -> int:
    groups = argv or ["pages", "runtime", "others"]
    if "pages" in groups:
        print("== pages_http.py")
        subprocess.run([sys.executable, str(ROOT / "bench" / "pages_http.py")], cwd=ROOT, check=False)
    if "runtime" in groups:
        setup_django()
        from bench import record, runtime

        rows = runtime.run()
        print_table(rows)
        record.write("runtime", {"rows": [{"measure": n, "value": round(v, 3), "goal": g, "unit": u}
                                          for n, v, g, u in rows]}, argv=["bench/run.py", "runtime"])
    if "others" in groups:
        for script in sorted((ROOT / "bench").glob("*.py")):
            if script.name in ("run.py", "pages_http.py", "runtime.py", "record.py", "sse_client.py", "__init__.py"):
                continue
            print(f"\n== {script.name}")
            subprocess.run([sys.executable, str(script)], cwd=ROOT, check=False)
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("groups", nargs="*", metavar="GROUP",
                        help="pages, runtime or others: which benchmarks (all three when none is named)")
    groups = parser.parse_args().groups
    unknown = sorted(set(groups) - {"pages", "runtime", "others"})
    if unknown:
        parser.error(f"unknown group {', '.join(unknown)}: choose from pages, runtime, others")
    sys.exit(main(groups))
