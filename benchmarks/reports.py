"""What runs measured, as tables, chart data, CSV and a self-contained HTML report. Pure
functions of runs (no writes); the HTML report embeds its data and draws its charts as inline
SVG, so it opens anywhere, offline, with no external URL."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from html import escape

from django.template.loader import render_to_string
from django.utils import timezone

from graphs.engines import MOCKER_LABEL
from graphs.runtimes.registry import ON_THIS_HOST
from sizing.predictions import prediction, versus

from .models import BenchmarkRun
from .schema import Step

# Okabe-Ito: distinguishable with the common colour-vision deficiencies. Every series also has
# its own marker and dash, so nothing depends on colour alone.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"]
DASHES = ["", "8 4", "2 3", "10 3 2 3", "4 4", "1 2", "12 2", "6 2 2 2"]
MARKERS = ["circle", "square", "triangle", "diamond", "circle", "square", "triangle", "diamond"]

COLUMNS = [
    ("run", "Run"), ("graph", "Graph"), ("label", "Arm / label"), ("engine", "Engine"), ("shape", "Shape"),
    ("gpus", "GPUs"),
    ("profile", "Profile"), ("concurrency", "Concurrency"), ("request_rate", "Request rate"),
    ("ttft_p50", "TTFT p50 (ms)"), ("ttft_p90", "TTFT p90 (ms)"), ("ttft_p99", "TTFT p99 (ms)"),
    ("itl_p50", "ITL p50 (ms)"), ("itl_p90", "ITL p90 (ms)"), ("itl_p99", "ITL p99 (ms)"),
    ("latency_p50", "Request latency p50 (ms)"), ("latency_p90", "Request latency p90 (ms)"),
    ("latency_p99", "Request latency p99 (ms)"),
    ("request_throughput", "Requests/s"), ("output_token_throughput", "Output tokens/s"),
    ("tokens_per_user_p50", "Tokens/s per user p50"), ("tokens_per_user_p90", "Tokens/s per user p90"),
    ("tokens_per_user_p99", "Tokens/s per user p99"), ("tokens_per_gpu", "Output tokens/s per GPU"),
    ("goodput", "Goodput (req/s)"), ("good_fraction", "Good fraction"), ("completed", "Completed"),
    ("errors", "Errors"), ("token_counts", "Token counts"), ("finished_at", "Finished"),
]


def step_row(run: BenchmarkRun, step: Step) -> dict:
    config, results = run.run_config, run.run_results
    row = {"run": run.pk, "graph": run.graph.name, "label": run.label or config.shape, "shape": config.shape,
           "gpus": 0 if config.gpu_free else config.gpus, "profile": run.profile, "concurrency": step.concurrency,
           "request_rate": step.request_rate, "engine": _engine(config)}
    for ours, stats in (("ttft", step.ttft), ("itl", step.itl), ("latency", step.request_latency),
                        ("tokens_per_user", step.tokens_per_user)):
        for q in ("p50", "p90", "p99"):
            row[f"{ours}_{q}"] = getattr(stats, q)
    row.update(request_throughput=step.request_throughput, output_token_throughput=step.output_token_throughput,
               tokens_per_gpu=step.tokens_per_gpu, goodput=step.goodput, good_fraction=step.good_fraction,
               completed=step.completed, errors=step.errors,
               token_counts=results.token_counts.source if results.token_counts else "",
               finished_at=run.finished_at.isoformat() if run.finished_at else "")
    return row


def _engine(config) -> str:
    """What measured the numbers: the label of the engine that stood in (the mocker, with who timed
    it for a graph made from an AIConfigurator configuration; vLLM on CPU), else the real engine."""
    if not config.simulated:
        return "real engine"
    return config.simulated.split(": ", 1)[0] or MOCKER_LABEL  # "<label>: <why>", as benchmarks.services records it


def rows(runs: list[BenchmarkRun]) -> list[dict]:
    return [step_row(run, step) for run in runs for step in run.run_results.steps]


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)


def cells(table: list[dict]) -> list[list[str]]:
    """The rows as text, in COLUMNS order."""
    return [[_cell(row[key]) for key, _title in COLUMNS] for row in table]


def to_csv(runs: list[BenchmarkRun]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([title for _key, title in COLUMNS])
    for row in rows(runs):
        writer.writerow(["" if row[key] is None else row[key] for key, _title in COLUMNS])
    return out.getvalue()


def predicted(runs: list[BenchmarkRun]) -> list[dict]:
    """For runs of graphs made from an AIConfigurator configuration: what it predicted beside
    what the run simulated at its headline load point, with the relative differences."""
    out = []
    for run in runs:
        step = run.run_results.headline
        pred = prediction(run.revision.graph_spec) if run.revision is not None and step is not None else None
        if pred is not None:
            out.append({"run": run.pk, **versus(pred, step.model_dump(mode="json"))})
    return out


def series(runs: list[BenchmarkRun]) -> list[dict]:
    """One series per run: its load points as (throughput, TTFT/ITL/latency p90), by load."""
    out = []
    for i, run in enumerate(runs):
        points = [{"x": s.output_token_throughput, "concurrency": s.concurrency, "rate": s.request_rate,
                   "ttft": s.ttft.p90, "itl": s.itl.p90, "latency": s.request_latency.p90}
                  for s in run.run_results.steps if s.output_token_throughput is not None]
        sim = " · simulated" if run.run_config.simulated else ""
        out.append({"run": run.pk, "label": f"#{run.pk} {run.label or run.run_config.shape} ({run.graph.name}){sim}",
                    "color": PALETTE[i % len(PALETTE)], "dash": DASHES[i % len(DASHES)],
                    "marker": MARKERS[i % len(MARKERS)], "points": sorted(points, key=lambda p: p["x"])})
    return out


CHARTS = [("ttft", "TTFT p90 against output throughput", "ms"),
          ("itl", "ITL p90 against output throughput", "ms"),
          ("latency", "Request latency p90 against output throughput", "ms")]


# --- inline SVG (for the exported report) ------------------------------------------------------

@dataclass
class _Frame:
    width: int = 640
    height: int = 300
    left: int = 64
    right: int = 16
    top: int = 16
    bottom: int = 44


def _ticks(high: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high``."""
    high = high if high > 0 else 1.0
    raw = high / n
    base = 10 ** math.floor(math.log10(raw))
    nice = next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw)
    return [round(i * nice, 10) for i in range(math.ceil(high / nice) + 1)]


def _marker(kind: str, x: float, y: float, color: str) -> str:
    if kind == "square":
        return f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{color}"/>'
    if kind == "triangle":
        return f'<path d="M{x:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 4:.1f} L{x - 5:.1f},{y + 4:.1f} Z" fill="{color}"/>'
    if kind == "diamond":
        return f'<path d="M{x:.1f},{y - 5:.1f} L{x + 5:.1f},{y:.1f} L{x:.1f},{y + 5:.1f} L{x - 5:.1f},{y:.1f} Z" ' \
               f'fill="{color}"/>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>'


def svg_chart(data: list[dict], key: str, title: str, unit: str) -> str:
    """A line chart (one line per run across its load points) as an SVG string."""
    f = _Frame()
    pts = [(p["x"], p[key]) for s in data for p in s["points"] if p.get(key) is not None]
    if not pts:
        return f'<p class="muted">{escape(title)}: no data.</p>'
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x_ticks, y_ticks = _ticks(max(xs) * 1.05), _ticks(max(ys) * 1.1)
    x_max, y_max = x_ticks[-1], y_ticks[-1]
    plot_w, plot_h = f.width - f.left - f.right, f.height - f.top - f.bottom

    def sx(v: float) -> float:
        return f.left + plot_w * v / x_max

    def sy(v: float) -> float:
        return f.top + plot_h * (1 - v / y_max)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {f.width} {f.height}" role="img" '
             f'aria-label="{escape(title)}" class="chart">']
    for t in y_ticks:
        parts.append(f'<line x1="{f.left}" x2="{f.width - f.right}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" '
                     f'stroke="#dde2e8"/><text x="{f.left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for t in x_ticks:
        parts.append(f'<text x="{sx(t):.1f}" y="{f.height - f.bottom + 16}" text-anchor="middle">{t:g}</text>')
    mid_y = f"{f.top + plot_h / 2:.0f}"
    parts.append(f'<text x="{f.left + plot_w / 2:.0f}" y="{f.height - 6}" text-anchor="middle">output tokens/s'
                 f'</text><text x="12" y="{mid_y}" transform="rotate(-90 12 {mid_y})" '
                 f'text-anchor="middle">{escape(unit)}</text>')
    for s in data:
        line = [(sx(p["x"]), sy(p[key])) for p in s["points"] if p.get(key) is not None]
        if len(line) > 1:
            d = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(line))
            dash = f' stroke-dasharray="{s["dash"]}"' if s["dash"] else ""
            parts.append(f'<path d="{d}" fill="none" stroke="{s["color"]}" stroke-width="2"{dash}/>')
        parts += [_marker(s["marker"], x, y, s["color"]) for x, y in line]
    parts.append("</svg>")
    return "".join(parts)


def legend(data: list[dict]) -> str:
    items = []
    for s in data:
        dash = f' stroke-dasharray="{s["dash"]}"' if s["dash"] else ""
        swatch = (f'<svg width="34" height="12" aria-hidden="true"><line x1="0" x2="34" y1="6" y2="6" '
                  f'stroke="{s["color"]}" stroke-width="2"{dash}/>{_marker(s["marker"], 17, 6, s["color"])}</svg>')
        items.append(f"<li>{swatch} {escape(s['label'])}</li>")
    return f'<ul class="legend">{"".join(items)}</ul>'


def html_report(*, title: str, runs: list[BenchmarkRun], intro: str = "", recommendation=None,
                study=None) -> str:
    """A self-contained HTML page: tables, SVG charts, notes, and the data as embedded JSON."""
    data = series(runs)
    table = rows(runs)
    notes = []
    for run in runs:
        res = run.run_results
        if res.token_counts:
            notes.append(f"#{run.pk}: token counts from the {res.token_counts.source} "
                         f"({res.token_counts.tokenizer}): {res.token_counts.note}")
        notes += [f"#{run.pk}: {w}" for w in res.warnings]
        if run.run_config.runtime in ON_THIS_HOST:
            notes.append(f"#{run.pk}: measured on the local runtime (mocker engines). The 1.6.1 frontend delays the "
                         "first token by about 35 ms on reused keep-alive connections (ai-dynamo/dynamo#14643): "
                         "compare TTFTs between runs that pay the same stall, not as absolute numbers.")
    payload = {"generated_at": timezone.now().isoformat(), "title": title, "columns": COLUMNS, "rows": table,
               "runs": [{"id": r.pk, "graph": r.graph.name, "label": r.label, "profile": r.profile, "params": r.params,
                         "config": r.config, "results": r.results, "state": r.state} for r in runs]}
    return render_to_string("benchmarks/report.html", {
        "title": title, "intro": intro, "runs": runs, "columns": COLUMNS, "cells": cells(table),
        "charts": [{"title": t, "svg": svg_chart(data, key, t, unit)} for key, t, unit in CHARTS],
        "legend": legend(data), "notes": list(dict.fromkeys(notes)), "recommendation": recommendation,
        "study": study, "generated_at": timezone.now(),
        "data_json": json.dumps(payload, default=str).replace("</", "<\\/"),
    })
