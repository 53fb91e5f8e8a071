#!/usr/bin/env python3
"""Measure the product code's import graph and draw it.

    python scripts/imports.py                 # the numbers (import circles, imports back up, long modules)
    python scripts/imports.py --list          # the same, naming every circle, upward import and long module
    python scripts/imports.py --svg docs/architecture.svg   # the layered drawing of docs/architecture.md
    python scripts/imports.py --root DIR      # measure another tree (e.g. an older commit from git archive)

Product code is every module of the top-level packages, tests, migrations and bench aside.
Every import counts, including those inside functions (a lazy import is still a dependency).
The layers are the ones docs/architecture.md names; an import "runs back up" when a module
imports one of a higher layer."""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

SKIP_DIRS = {"tests", "bench", "migrations", "scripts", "var", "docs", "static", "templates", "deploy", "node_modules"}
# A module over REVIEW lines is listed for review (is it one concept?); over LONG it fails the
# architecture test. Split where a concept ends, not where a count does.
REVIEW = 400
LONG = 500

# (layer, component, module prefixes), from the ground up. The first prefix that matches wins,
# so more specific prefixes come before the package they sit in.
LAYERS = ["core", "base", "graphs", "features", "interfaces", "wiring"]
COMPONENTS: list[tuple[str, str, tuple[str, ...]]] = [
    ("interfaces", "pages", (
        "graphs.views", "graphs.manifest_pages", "graphs.status_view", "graphs.fragments", "graphs.forms",
        "graphs.urls", "graphs.templatetags", "clusters.views", "clusters.forms",
        "clusters.urls", "clusters.templatetags", "clusters.admin", "benchmarks.views", "benchmarks.forms",
        "benchmarks.urls", "benchmarks.admin", "metrics.views", "metrics.forms", "metrics.urls", "metrics.admin",
        "playground.views", "playground.forms", "playground.urls", "playground.admin",
        "endpoint.asgi", "endpoint.admin", "endpoint.templatetags",
        "audit.views", "audit.urls", "audit.admin", "repos.views", "repos.forms", "repos.urls", "repos.templatetags",
        "sizing.views", "sizing.forms", "sizing.urls", "sizing.templatetags")),
    ("interfaces", "API", (
        "graphs.api", "clusters.api", "benchmarks.api", "metrics.api", "accounts.api", "audit.api",
        "endpoint.api", "repos.api", "sizing.api")),
    ("interfaces", "CLIs", (
        "graphs.management", "benchmarks.management", "metrics.management", "dynamo_cp",
        "repos.management")),
    ("interfaces", "tasks", ("graphs.tasks", "clusters.tasks", "benchmarks.tasks", "repos.tasks", "sizing.tasks")),
    ("wiring", "controlplane", ("controlplane",)),
    ("core", "definition", (
        "core.facts", "core.spec", "core.specio", "core.schema", "core.catalog", "core.pool", "core.findings",
        "core.errors", "core.untrusted", "core.labels")),
    ("core", "manifest", ("core.dgd", "core.validation", "core.checks", "core.planner_config", "core.documents",
                          "core.cel")),
    ("base", "accounts", ("accounts",)),
    ("base", "telemetry", ("telemetry",)),
    ("base", "audit", ("audit",)),
    ("base", "jobs", ("jobs",)),
    ("base", "availability", ("availability",)),
    ("base", "clusters", ("clusters",)),
    ("graphs", "runtimes", ("graphs.runtimes",)),
    ("graphs", "status cache", ("graphs.status_cache",)),
    ("graphs", "operations", ("graphs.operations",)),
    ("graphs", "graph store", ("graphs",)),
    ("features", "metrics", ("metrics",)),
    ("features", "endpoint", ("endpoint",)),
    ("features", "playground", ("playground",)),
    ("features", "sizing", ("sizing",)),
    ("features", "benchmarks", ("benchmarks",)),
    ("features", "repos", ("repos",)),
]


# The flow of a graph: the arrows of the drawing.
FLOW_STEPS = ["definition", "manifest", "operations", "runtimes", "status cache", "pages"]
FLOW_BRANCHES = {("status cache", "API")}  # pages and the API both read the status cache


def rank_of(component: str) -> int:
    return next(LAYERS.index(layer) for layer, c, _ in COMPONENTS if c == component)


# The order of the boxes, left to right in the drawing.
FLOW = ["definition", "manifest", "operations", "runtimes", "status cache", "pages", "API", "graph store",
        "jobs", "clusters", "accounts", "audit", "telemetry", "availability", "CLIs", "tasks", "metrics", "endpoint",
        "playground", "sizing", "benchmarks", "repos"]


def product_modules(root: Path) -> dict[str, Path]:
    """Module name → file, for every product module below ``root``."""
    modules: dict[str, Path] = {}
    for package in sorted(p for p in root.iterdir() if (p / "__init__.py").exists() and p.name not in SKIP_DIRS):
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if any(part in SKIP_DIRS or part.startswith(".") for part in parts):
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The product modules that ``name`` imports (anywhere in the file)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            hits = [resolve(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # "from x import y": module x.y where y is one, else the module x (y is a name in it)
            hits = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else resolve(base)
                    for alias in node.names]
        else:
            continue
        found.update(hit for hit in hits if hit and hit != name)
    return found


def component_of(module: str) -> tuple[str, str]:
    for layer, component, prefixes in COMPONENTS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return layer, component
    return "wiring", "other"


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def measure(root: Path) -> dict:
    modules = product_modules(root)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    upward = sorted((src, dst) for src, dsts in graph.items() for dst in dsts
                    if LAYERS.index(component_of(src)[0]) < LAYERS.index(component_of(dst)[0]))
    lines = {name: len(path.read_text().splitlines()) for name, path in modules.items()}
    apps: dict[str, set[str]] = defaultdict(set)
    for src, dsts in graph.items():
        for dst in dsts:
            if src.split(".")[0] != dst.split(".")[0]:
                apps[src.split(".")[0]].add(dst.split(".")[0])
    return {"modules": modules, "graph": graph, "circles": circles(graph), "upward": upward,
            "long": sorted((n, c) for n, c in lines.items() if c > LONG),
            "review": sorted((n, c) for n, c in lines.items() if REVIEW < c <= LONG),
            "app_circles": circles({a: apps.get(a, set()) for a in {m.split(".")[0] for m in modules}})}


def svg(result: dict) -> str:
    """Layers as bands (the ground at the bottom), components as boxes, and the flow of a graph
    as arrows (definition ▶ manifest ▶ operations ▶ runtimes ▶ status cache ▶ pages and API),
    each drawn where the later step imports the earlier one; any import running back up a layer
    is a red arrow. Every other import is left out: the drawing shows the flow, not the wiring."""
    edges: dict[tuple[str, str], int] = defaultdict(int)
    members: dict[str, int] = defaultdict(int)
    flow = set(pairwise(FLOW_STEPS)) | FLOW_BRANCHES
    for src, dsts in result["graph"].items():
        members[component_of(src)[1]] += 1
        for dst in dsts:
            a, b = component_of(src)[1], component_of(dst)[1]
            if (a, b) in flow:
                edges[(a, b)] += 1
            elif (b, a) in flow:
                edges[(b, a)] += 1
            elif a != b and rank_of(a) < rank_of(b):
                edges[(a, b)] += 1
    by_layer: dict[str, list[str]] = defaultdict(list)
    for layer, component, _ in sorted(COMPONENTS, key=lambda c: FLOW.index(c[1]) if c[1] in FLOW else len(FLOW)):
        if members.get(component) and component not in by_layer[layer]:
            by_layer[layer].append(component)
    width, band, box_w, box_h, top = 980, 110, 150, 44, 60
    height = band * len(LAYERS) + 20 + top
    pos: dict[str, tuple[float, float]] = {}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">',
           '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#667"/></marker>'
           '<marker id="r" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#c22"/></marker></defs>',
           f'<rect width="{width}" height="{height}" fill="#fff"/>',
           '<text x="14" y="24" font-weight="bold" fill="#225">The flow: definition ▶ manifest ▶ operation '
           '▶ runtime ▶ status cache ▶ pages and API</text>',
           f'<text x="14" y="46" font-size="11" fill="#556">Boxes: the product modules of each layer '
           f'(ground at the bottom); an arrow: one step of the flow to the next, where their modules import '
           f'each other (thicker: more imports); red: an import running back up ({len(result["upward"])}). '
           f'Made by scripts/imports.py --svg; tests/project/test_architecture.py keeps it current.</text>']
    for i, layer in enumerate(reversed(LAYERS)):
        y = top + i * band
        out.append(f'<rect x="5" y="{y}" width="{width - 10}" height="{band - 8}" rx="6" '
                   f'fill="{"#f4f6fa" if i % 2 else "#eaf0f7"}"/>')
        out.append(f'<text x="14" y="{y + 18}" font-weight="bold" fill="#446">{layer}</text>')
        names = by_layer.get(layer, [])
        step = (width - 140) / max(len(names), 1)
        for j, name in enumerate(names):
            x = 130 + j * step + (step - box_w) / 2
            pos[name] = (x + box_w / 2, y + 24 + box_h / 2)
            out.append(f'<rect x="{x:.0f}" y="{y + 24}" width="{box_w}" height="{box_h}" rx="5" '
                       'fill="#fff" stroke="#446"/>')
            out.append(f'<text x="{x + box_w / 2:.0f}" y="{y + 24 + 20}" text-anchor="middle">{name}</text>')
            out.append(f'<text x="{x + box_w / 2:.0f}" y="{y + 24 + 36}" text-anchor="middle" font-size="10" '
                       f'fill="#778">{members[name]} module{"s" if members[name] != 1 else ""}</text>')
    rank = {c: LAYERS.index(layer) for layer, c, _ in COMPONENTS}
    for (a, b), count in sorted(edges.items()):
        (x1, y1), (x2, y2) = pos[a], pos[b]
        up = (a, b) not in flow and rank[a] < rank[b]
        if y1 == y2:  # same layer: a shallow arc above the boxes
            mid = (x1 + x2) / 2
            path = f"M{x1:.0f},{y1 - box_h / 2:.0f} Q{mid:.0f},{y1 - box_h:.0f} {x2:.0f},{y2 - box_h / 2:.0f}"
        else:
            sy = y1 + (box_h / 2 if y2 > y1 else -box_h / 2)
            ty = y2 - (box_h / 2 if y2 > y1 else -box_h / 2)
            path = f"M{x1:.0f},{sy:.0f} L{x2:.0f},{ty:.0f}"
        colour, marker = ("#c22", "r") if up else ("#667", "a")
        out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-opacity="{0.9 if up else 0.35}" '
                   f'stroke-width="{min(0.8 + count / 8, 3.5):.1f}" marker-end="url(#{marker})">'
                   f'<title>{a} → {b}: {count} imports</title></path>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--list", action="store_true", help="name every finding")
    parser.add_argument("--svg", type=Path, help="write the layered drawing here")
    args = parser.parse_args()
    result = measure(args.root)
    edges = sum(len(d) for d in result["graph"].values())
    print(f"{len(result['modules'])} modules, {edges} imports")
    print(f"import circles: {len(result['circles'])}")
    print(f"imports running back up a layer: {len(result['upward'])}")
    print(f"modules over {LONG} lines: {len(result['long'])}")
    print(f"modules over {REVIEW} lines, to review: {len(result['review'])}")
    print(f"app circles: {len(result['app_circles'])}")
    if args.list:
        for circle in result["circles"]:
            print("  circle:", " ↔ ".join(circle))
        for src, dst in result["upward"]:
            print(f"  up: {src} ({component_of(src)[0]}) → {dst} ({component_of(dst)[0]})")
        for name, count in result["long"]:
            print(f"  long: {name} {count} lines")
        for name, count in result["review"]:
            print(f"  review: {name} {count} lines")
        for circle in result["app_circles"]:
            print("  app circle:", " ↔ ".join(circle))
    if args.svg:
        args.svg.write_text(svg(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
