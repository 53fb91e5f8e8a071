"""Prose and scripts do not drift from the tree: every path of this repository that README.md,
docs/ or a docstring or comment names exists, and every benchmark script imports and answers
``--help`` without running (a script behind a README figure that no longer runs is a figure
nobody can check)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", "node_modules", "var", ".git"}
TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in SKIP)
EXTENSIONS = "py|md|yaml|yml|json|sh|html|svg|txt|toml|mjs|js|css|cfg|conf|lua"
# A path of this tree named in prose: it starts with one of the tree's top-level folders and ends
# in a file name; one followed by ":LINE@COMMIT" or "@COMMIT" is upstream's (Dynamo's own tree).
FOLDERS = "|".join(map(re.escape, TOP))
NAMED = re.compile(rf"(?<![\w/.-])((?:{FOLDERS})/[\w./-]*\.(?:{EXTENSIONS}))(?![\w/-])(?![:\d-]*@)")
# Upstream's trees that share a top-level name with ours (Dynamo's operator lives in deploy/operator).
UPSTREAM = ("deploy/operator/",)


def prose() -> list[tuple[str, str]]:
    """(where, text): README.md, docs/*.md, and every docstring and comment of the Python files."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    out = [(str(p.relative_to(ROOT)), p.read_text()) for p in documents]
    for path in sorted(ROOT.rglob("*.py")):
        if SKIP & set(path.relative_to(ROOT).parts):
            continue
        source = path.read_text()
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                doc = ast.get_docstring(node)
                if doc:
                    out.append((where, doc))
        out += [(where, line.split("#", 1)[1]) for line in source.splitlines() if "#" in line]
    return out


def missing_paths() -> dict[str, list[str]]:
    missing: dict[str, list[str]] = {}
    for where, text in prose():
        for named in NAMED.findall(text):
            path = named.rstrip(".")
            if path.startswith(UPSTREAM) or (ROOT / path).exists() or (ROOT / "templates" / path).exists():
                continue
            missing.setdefault(path, []).append(where)
    return missing


def test_every_path_the_prose_names_exists():
    missing = missing_paths()
    assert not missing, "\n".join(f"{path} (named in {', '.join(sorted(set(w))[:3])})" for path, w in missing.items())


def test_the_path_finder_finds_a_path_that_moved_and_leaves_upstreams_alone():
    assert NAMED.findall("checked by graphs/planner/settings.py, once") == ["graphs/planner/settings.py"]
    assert NAMED.findall("see (core/planner_config.py).") == ["core/planner_config.py"]
    assert NAMED.findall("core/state_machine.py:69-71@2a6da14c") == []  # Dynamo's file, at a commit
    assert NAMED.findall("lib/llm/src/http/service/metrics.rs") == []  # not one of our folders


SCRIPTS = sorted(p for p in (ROOT / "bench").glob("*.py") if '__name__ == "__main__"' in p.read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_script_answers_help_without_running(script):
    out = subprocess.run([sys.executable, str(script.relative_to(ROOT)), "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage:"), out.stdout[:500]
