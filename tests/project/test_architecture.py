"""The import graph of the product code keeps its shape (docs/architecture.md): no import
circle, no two apps importing each other, every import pointing down a layer, nothing importing
a Celery tasks module, no module over 500 lines (those over 400 are listed for review). Measured
by the same script that draws the architecture picture, which this test keeps current."""

import importlib.util
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def measured():
    spec = importlib.util.spec_from_file_location("imports_script", ROOT / "scripts" / "imports.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.measure(ROOT)


def test_the_product_code_has_no_import_circle(measured):
    assert measured["circles"] == []


def test_no_import_runs_back_up_a_layer(measured):
    assert measured["upward"] == []


def test_nothing_imports_a_tasks_module(measured):
    importers = {src: dst for src, dsts in measured["graph"].items() for dst in dsts if dst.endswith(".tasks")}
    assert importers == {}


def test_no_two_apps_import_each_other(measured):
    assert measured["app_circles"] == []


def test_no_product_module_is_over_500_lines(measured):
    assert measured["long"] == []
    for name, count in measured["review"]:  # not a failure: a place to look for where a concept ends
        warnings.warn(f"{name} has {count} lines: is it one concept?", stacklevel=1)


def test_the_committed_architecture_drawing_is_current(measured):
    """docs/architecture.svg is drawn from today's imports; a stale one is redrawn here and the
    test fails, so the change to commit is the redrawn file."""
    spec = importlib.util.spec_from_file_location("imports_script", ROOT / "scripts" / "imports.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    drawing = ROOT / "docs" / "architecture.svg"
    fresh = script.svg(measured)
    committed = drawing.read_text() if drawing.exists() else ""
    if committed != fresh:
        drawing.write_text(fresh)
    assert committed == fresh, "docs/architecture.svg was stale and has been redrawn: commit it"


def test_the_measure_sees_imports_inside_functions(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "services.py").write_text("def f():\n    from .tasks import t\n")
    (tmp_path / "app" / "tasks.py").write_text("from . import services\n")
    spec = importlib.util.spec_from_file_location("imports_script", ROOT / "scripts" / "imports.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.measure(tmp_path)["circles"] == [["app.services", "app.tasks"]]


def _product_modules():
    skip = {".venv", "tests", "bench", "scripts", "node_modules", "var", "static", "docs", "deploy"}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0] in skip or "migrations" in parts or parts[:2] == ("graphs", "runtimes"):
            continue
        yield path


def test_no_module_outside_the_runtimes_compares_a_runtime_kind():
    """What differs between runtimes is asked of the runtime (graphs/runtimes/base.py) or of its
    row (graphs/runtimes/registry.py RUNTIMES), so that a new runtime is a folder and a row, not
    a search for every ``== "kubernetes"`` in the product."""
    import ast

    from graphs.runtimes.registry import KINDS

    found = []
    for path in _product_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                named = [s.value for side in sides for s in ast.walk(side)
                         if isinstance(s, ast.Constant) and s.value in KINDS]
                if named:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} compares with {named[0]!r}")
    assert found == []
