"""Every figure README.md quotes comes from the committed result file it names, and every result
file says how it was made.

The README's tables are read generically: a table whose last column is headed "file" names,
in each row, a file under bench/results/ (the first `*.json` in that cell); every number in the
row's "measured" cell must be in that file, as written or rounded to the figures the README
shows (13.87 may be quoted as 13.87 or 13.9, never as 13.8). A percentage may be stored as a
fraction. And each figure must be the one at its own place in that file (PLACES: a JMESPath
expression per figure), not merely a number the file holds somewhere else."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
MINUS = "\N{MINUS SIGN}"
# A number, not a label such as "c=16" (concurrency 16) or a name such as "p95".
NUMBER = re.compile(rf"(?<![\w=])(?<!\d\.)([{MINUS}+-]?)(\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.(\d+))?(?!\w|\.\d)")
PROVENANCE = ("command", "date", "commit", "machine")


def tables(text: str) -> list[list[list[str]]]:
    """Markdown tables: lists of rows (the header first, the |---| line dropped), cells stripped."""
    found, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def figure_rows() -> list[tuple[str, str, str]]:
    """(measure, measured, files) for every row of every table that names its files (several,
    comma-separated, when a row quotes more than one run)."""
    rows = []
    for table in tables(README.read_text()):
        header = [h.lower() for h in table[0]]
        if not header[-1].startswith("file") or "measured" not in header:
            continue
        measured = header.index("measured")
        for row in table[1:]:
            named = re.findall(r"`([\w.-]+\.json)`", row[-1])
            rows.append((row[0], row[measured], ",".join(named)))
    return rows


def figures(cell: str) -> list[tuple[float, int]]:
    """The numbers of a cell with their decimals: "-7.7" -> (-7.7, 1), "1,180" -> (1180, 0)."""
    out = []
    for sign, whole, decimals in NUMBER.findall(cell):
        value = float(whole.replace(",", "") + (f".{decimals}" if decimals else ""))
        out.append((-value if sign and sign in MINUS + "-" else value, len(decimals)))
    return out


def numbers_in(data) -> list[float]:
    if isinstance(data, bool):
        return []
    if isinstance(data, int | float):
        return [float(data)]
    if isinstance(data, dict):
        return [n for v in data.values() for n in numbers_in(v)]
    if isinstance(data, list):
        return [n for v in data for n in numbers_in(v)]
    return []


def found(value: float, decimals: int, stored: list[float], percent: bool) -> bool:
    # A percentage may be stored as a fraction (0.036) or as a ratio to a baseline (1.036).
    candidates = stored + ([y for x in stored for y in (x * 100, (x - 1) * 100)] if percent else [])
    return any(round(x, decimals) == value or x == value for x in candidates)


ROWS = figure_rows()


def test_the_readme_has_a_table_of_measured_figures_with_their_files():
    assert len(ROWS) >= 10, "README.md's measured-figures table was not found (or lost its 'file' column)"
    assert all(file for _m, _v, file in ROWS), [m for m, _v, file in ROWS if not file]


@pytest.mark.parametrize(("measure", "measured", "file"), ROWS, ids=[r[0][:50] for r in ROWS])
def test_every_figure_of_the_row_is_in_the_file_it_names(measure, measured, file):
    stored = []
    for name in file.split(","):
        path = RESULTS / name
        assert path.is_file(), f"{measure}: bench/results/{name} is not committed"
        stored += numbers_in(json.loads(path.read_text()))
    quoted = figures(measured)
    assert quoted, f"{measure}: no figure in {measured!r}"
    percent = "%" in measured
    missing = [f"{v:g}" for v, d in quoted if not found(v, d, stored, percent)]
    assert not missing, f"{measure}: {', '.join(missing)} quoted from {file}, which holds no such number"


def test_figure_matching_rounds_as_the_readme_shows_and_no_further():
    assert figures(f"2.9 / 13.8, {MINUS}7.7..+26.9 %, 1,180 cases (c=16)") == [
        (2.9, 1), (13.8, 1), (-7.7, 1), (26.9, 1), (1180.0, 0)]
    assert found(13.9, 1, [13.87], percent=False) and found(13.87, 2, [13.87], percent=False)
    assert not found(13.8, 1, [13.87], percent=False)
    assert found(3.6, 1, [0.0361], percent=True) and not found(3.6, 1, [0.0361], percent=False)
    assert found(-7.7, 1, [0.923], percent=True)  # a ratio, quoted as a change


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_result_file_records_how_it_was_made_or_says_what_is_missing(path):
    """command, date, commit (of a clean tree) and machine; a file measured before these were
    recorded says which are missing, in a "provenance" note, instead of having them made up."""
    data = json.loads(path.read_text())
    note = data.get("provenance", "")
    absent = [key for key in PROVENANCE if not data.get(key)]
    if data.get("clean_tree") is not True:
        absent.append("clean_tree")
    if absent:
        assert note.startswith("missing:") and all(key in note for key in absent), (
            f"{path.name} lacks {', '.join(absent)}: re-run its benchmark, or say so in 'provenance'")
    else:
        assert not note, f"{path.name} has all of {PROVENANCE} and a clean tree, yet says {note!r}"


# ---------------------------------------------------------------- each figure at its own place

def _pages(page: str, arm: str, *stats: str) -> list[str]:
    return [f'latency_ms.{page}."{arm}".{stat}' for stat in stats]


BASELINE = "prometheus up, uvicorn, the code of commit cf4ba5a"
SPREAD = ("p50", "p95", "p95_spread[0]", "p95_spread[1]")
_GOAL = "goals.{}.measured.{}"
# bench/rollout.py's (a) and (c), surge arm then recreate arm (mocker and vLLM files alike)
_CHANGES = ('arms[0].changes."a: revision changing every worker pool".{0}',
            'arms[0].changes."c: rollback to revision 1".{0}',
            'arms[1].changes."a: revision changing every worker pool".{0}',
            'arms[1].changes."c: rollback to revision 1".{0}')
# Where each figure of a measured row lives in the file the row names: a JMESPath expression per
# figure, in the order the row quotes them (a one-element list counts as its element). A row is
# found by the start of its "measure" cell.
_LIVE = ("pushed (this commit)", "polled every 2 s (commit e026c0a)")  # bench/live.py's arms
# bench/pages_http.py's fleet: the baseline arm, and the narrowed pages in the order the README quotes them
_FLEET_BASE = "prometheus up, the code of commit d8d808c"
_NARROWED = ("list_filtered", "api_filtered", "api_labelled", "api_list_end", "overview")
# bench/watch_churn.py's arms
_CHURN = ("this code", "this code, free GPUs counted every cycle", "the code of commit 40c9d6f")
PLACES: dict[str, list[str]] = {
    "graph list page, 500 graphs": _pages("list", "prometheus up", *SPREAD) + _pages("list", BASELINE, *SPREAD),
    "graph page p50 / p95": _pages("detail", "prometheus up", *SPREAD) + _pages("detail", BASELINE, *SPREAD),
    "status fragment (polled every 2 s)": _pages("status", "prometheus up", *SPREAD)
    + _pages("status", BASELINE, *SPREAD),
    "API graph list p50 / p95": _pages("api_list", "prometheus up", *SPREAD) + _pages("api_list", BASELINE, *SPREAD),
    "metrics overview page p95": [*_pages("overview", "prometheus up", "p95"),
                                  *_pages("overview", "prometheus down", "p95"),
                                  *_pages("overview", "prometheus slow (2 s)", "p95")],
    "one-hour chart endpoint p95": _pages("chart", "prometheus up", "p95", "p95_spread[0]", "p95_spread[1]"),
    "SQL queries per page": [f"sql_queries.at_500_graphs.{p}" for p in ("list", "detail", "status", "api_list",
                                                                         "overview")],
    "OpenAI endpoint added TTFT p50": [_GOAL.format("c1_added_ttft_p50_ms_relay", s) for s in ("median", "min", "max")]
    + [_GOAL.format("c16_added_ttft_p50_ratio_relay", s) for s in ("median", "min", "max")],
    "the same through Debian's nginx": [_GOAL.format("c1_added_ttft_p50_ms_nginx", s) for s in ("median", "min", "max")]
    + [_GOAL.format("c16_added_ttft_p50_ratio_nginx", s) for s in ("median", "min", "max")],
    "the same through LiteLLM": [_GOAL.format("c1_added_ttft_p50_ms_litellm", "median"),
                                 _GOAL.format("c16_added_ttft_p50_ratio_litellm", "median")],
    "added inter-chunk gap p50": [_GOAL.format("c1_added_gap_p50_ms_relay", "median"),
                                  _GOAL.format("c16_added_gap_p50_ms_relay", "median"),
                                  _GOAL.format("c1_added_gap_p50_ms_nginx", "median"),
                                  _GOAL.format("c16_added_gap_p50_ms_nginx", "median")],
    "a serving local graph changed": [p.format("failed") for p in _CHANGES],
    "the same: seconds without a routable decode worker": [p.format("no_routable_s.decode") for p in _CHANGES],
    "the same on real vLLM": [p.format("failed") for p in _CHANGES],
    "the same: seconds without a routable worker during": [p.format("no_routable_s.worker") for p in _CHANGES],
    "local graph cold start to serving": ["rows[0].value"],
    "slider move to the new pod": ["rows[1].value"],
    "ten times the fleet": [f"latency_ms.{p}.\"prometheus up\".{k}" for p in ("list", "detail", "status", "api_list")
                            for k in ("p50", "p95", "p95_spread[0]", "p95_spread[1]")]
    + [f"latency_ms.{p}.\"{_FLEET_BASE}\".{k}" for p in ("list", "detail", "status", "api_list")
       for k in ("p50", "p95")],
    "the same fleet, p95: the graph list narrowed": [f"latency_ms.{p}.\"prometheus up\".p95" for p in _NARROWED]
    + [f"latency_ms.{p}.\"{_FLEET_BASE}\".p95" for p in _NARROWED],
    "the same fleet: the one-hour chart": ['latency_ms.chart."prometheus up".p95',
                                           'latency_ms.overview_data."prometheus up".p95',
                                           f'latency_ms.overview_data."{_FLEET_BASE}".p95'],
    "the same fleet: SQL queries per page": [f"sql_queries.at_5000_graphs.{p}" for p in (
        "list", "detail", "status", "api_list", "list_filtered", "api_filtered", "api_labelled", "api_list_end",
        "overview")],
    "the same fleet: the web server's memory": ['web_memory_mb."prometheus up"', f'web_memory_mb."{_FLEET_BASE}"'],
    "the same pages at a tenth of the fleet": ['web_memory_mb."prometheus up"'],
    "the cluster watchers under churn": [f'results."{_CHURN[0]}".lag_ms.{p}' for p in ("p50", "p95", "p99")]
    + [f'results."{_CHURN[1]}".lag_ms.p95', f'results."{_CHURN[2]}".lag_ms.p50', f'results."{_CHURN[2]}".lag_ms.p95',
       f'results."{_CHURN[2]}".unseen_after_30s', f'results."{_CHURN[2]}".changes'],
    "the same: the watcher process's memory": [f'results."{_CHURN[0]}".watcher_memory_mb',
                                               f'results."{_CHURN[2]}".watcher_memory_mb'],
    "a slider moved on the graph page, in Chromium": [
        f'results.{db}."{arm}".slider_to_new_pod_row_ms.{p}' for arm in _LIVE for db in ("sqlite", "postgresql")
        for p in ("p50", "p95")],
    "the same moves, seen in a second tab on the graph list": [
        f'results.{db}."{_LIVE[0]}".slider_to_graph_list_pod_count_ms.{p}' for db in ("sqlite", "postgresql")
        for p in ("p50", "p95")],
    "requests an idle open graph page makes": [
        f'results.{db}."{arm}".idle_page_requests_per_minute' for arm in _LIVE for db in ("sqlite", "postgresql")],
    "moves the page did not send": [
        f'results.{db}."{arm}".moves_not_sent_by_the_page' for arm in _LIVE for db in ("sqlite", "postgresql")],
    "Planner decision published to acknowledged": ["median_seconds", "max_seconds"],
    "API fuzzing, all 14 schemathesis checks": ["cases", "operations", "failures"],
    "API fuzzing with random data": ["cases", "operations", "failures"],
    "17 faults one after another": ["sum(faults[].operations.lost)", "sum(values(doubled))",
                                    "sum(faults[].operations.stuck)", "data_lost.revisions",
                                    "data_lost.operations_without_audit_row", "data_lost.conversations"],
    "the same: 500 answers": ['sum(faults[].answers."5xx_by_kind".*."500"[])', 'sum(faults[].answers."503")',
                              'sum(faults[].answers."5xx_by_kind".chat."502")'],
    "the same: pages and API serving again": ["faults[?fault=='db-restart'].serving_again_after_s",
                                              "max(faults[].serving_again_after_s)"],
    "the same: every operation and run terminal": ["max(faults[].all_jobs_terminal_after_s)"],
    "PostgreSQL, then Redis, paused (SIGSTOP)": [
        "faults[?fault=='db-pause'].answers.no_answer", "faults[?fault=='redis-pause'].answers.no_answer",
        "faults[?fault=='db-pause'].answers.\"503\"", "faults[?fault=='redis-pause'].answers.\"503\"",
        "faults[?fault=='db-pause'].answers.\"5xx_by_kind\".*.\"500\"[] | sum(@)",
        "faults[?fault=='redis-pause'].answers.\"5xx_by_kind\".*.\"500\"[] | sum(@)"],
    "The identity provider, then the Git host, paused": [
        "faults[?fault=='idp-pause'].answers.no_answer", "faults[?fault=='git-pause'].answers.no_answer",
        "sum([faults[?fault=='idp-pause'].answers.\"5xx\"[], faults[?fault=='idp-pause'].answers.\"503\"[]][])",
        "sum([faults[?fault=='git-pause'].answers.\"5xx\"[], faults[?fault=='git-pause'].answers.\"503\"[]][])"],
    "the same: slowest answer of the product while the identity provider": [
        "faults[?fault=='idp-pause'].slowest_answer_s", "faults[?fault=='git-pause'].slowest_answer_s"],
    "the same: slowest answer while PostgreSQL": ["faults[?fault=='db-pause'].slowest_answer_s",
                                                  "faults[?fault=='redis-pause'].slowest_answer_s"],
}


def _places(measure: str) -> list[str] | None:
    keys = [k for k in PLACES if measure.startswith(k)]
    assert len(keys) <= 1, f"{measure}: several PLACES entries match: {keys}"
    return PLACES[keys[0]] if keys else None


def _at(data, expression: str):
    import jmespath

    value = jmespath.search(expression, data)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value


@pytest.mark.parametrize(("measure", "measured", "file"), ROWS, ids=[r[0][:50] for r in ROWS])
def test_every_figure_of_the_row_is_at_its_own_place_in_the_file(measure, measured, file):
    places = _places(measure)
    assert places is not None, f"{measure}: say where its figures are (PLACES in this module)"
    data = json.loads((RESULTS / file.split(",")[0]).read_text())
    quoted = figures(measured)
    assert len(quoted) == len(places), f"{measure}: {len(quoted)} figures quoted, {len(places)} places named"
    percent = "%" in measured
    wrong = []
    for (value, decimals), place in zip(quoted, places, strict=True):
        stored = _at(data, place)
        if not isinstance(stored, int | float) or isinstance(stored, bool) or not found(
                value, decimals, [float(stored)], percent):
            wrong.append(f"{value:g} is not {place} = {stored!r}")
    assert not wrong, f"{measure}: " + "; ".join(wrong)


def test_a_figure_found_elsewhere_in_the_file_is_not_at_its_place():
    data = json.loads((RESULTS / "pages-http.json").read_text())
    place = _pages("detail", "prometheus up", "p95")[0]
    assert found(38.8, 1, [_at(data, place)], percent=False)
    # 28.8 is a number of that file, so the check of the whole file passed a wrong figure
    assert 28.8 in [round(x, 1) for x in numbers_in(data)]
    assert not found(28.8, 1, [_at(data, place)], percent=False)
