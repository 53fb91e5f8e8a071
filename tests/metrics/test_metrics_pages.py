# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The metrics pages and API without Prometheus data: objectives (form, API, validation, roles),
the panel, change markers, window validation, the OpenAPI description, the scrape targets
written for local graphs, and the runprometheus command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from core.catalog import PoolFields, build_spec
from graphs import services as graph_services
from graphs.models import Deployment, Operation, Pod
from metrics import charts, localprom
from metrics.models import Objectives
from tests import factories
from tests.metrics_fixtures import free_port, fresh_cache  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def graph(db, settings, fresh_cache):
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"  # nothing there: these tests need no data
    graph = factories.graph("pages", template="vllm-disagg")
    Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready")
    return graph


# ------------------------------------------------------------------ objectives: the form


def test_an_operator_sets_objectives_from_the_panel(graph, client_for):
    operator = client_for("operator")
    response = operator.post("/metrics/graphs/pages/objectives/",
                             {"ttft_ms": "250", "itl_ms": "12.5", "gpu_hour_price": "2.75"}, **HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="metrics-objectives"' in body and "Saved." in body and "250 ms" in body and "12.5 ms" in body
    saved = Objectives.objects.get(graph=graph)
    assert (saved.ttft_ms, saved.itl_ms, saved.gpu_hour_price) == (250, 12.5, Decimal("2.75"))
    assert saved.updated_by.username == "operator"


def test_empty_fields_clear_a_target(graph, client_for):
    operator = client_for("operator")
    operator.post("/metrics/graphs/pages/objectives/", {"ttft_ms": "250", "itl_ms": "10"}, **HTMX)
    operator.post("/metrics/graphs/pages/objectives/", {"ttft_ms": "", "itl_ms": "10"}, **HTMX)
    assert Objectives.objects.get(graph=graph).ttft_ms is None


@pytest.mark.parametrize(("field", "value", "error"), [
    ("ttft_ms", "-5", "greater than or equal to 0.1"),
    ("ttft_ms", "9999999", "less than or equal to 480000"),
    ("itl_ms", "abc", "Enter a number"),
    ("gpu_hour_price", "-1", "greater than or equal to 0"),
    ("gpu_hour_price", "1.123456", "no more than 4 decimal places"),
])
def test_bad_objectives_are_refused_with_the_reason_next_to_the_field(graph, client_for, field, value, error):
    response = client_for("operator").post("/metrics/graphs/pages/objectives/", {field: value}, **HTMX)
    assert response.status_code == 400
    assert error in response.content.decode()
    assert not Objectives.objects.filter(graph=graph).exists()


def test_viewers_see_objectives_but_cannot_change_them(graph, client_for):
    viewer = client_for("viewer")
    panel = viewer.get("/metrics/graphs/pages/panel/").content.decode()
    assert "Objectives and price" in panel and "objectives-form" not in panel
    assert viewer.post("/metrics/graphs/pages/objectives/", {"ttft_ms": "1"}).status_code == 403
    assert "objectives-form" in client_for("operator").get("/metrics/graphs/pages/panel/").content.decode()


def test_the_global_price_applies_until_a_graph_sets_its_own(graph, settings):
    settings.GPU_HOUR_PRICE = "1.50"
    assert charts.objectives_dict(None) == {"ttft_ms": None, "itl_ms": None, "gpu_hour_price": 1.5,
                                            "price_is_default": True, "currency": "USD"}
    own = Objectives.objects.create(graph=graph, gpu_hour_price=Decimal("3"))
    assert charts.objectives_dict(own)["gpu_hour_price"] == 3.0
    assert charts.objectives_dict(own)["price_is_default"] is False


# ------------------------------------------------------------------ objectives: the API


def test_the_objectives_api_reads_puts_and_patches(graph, api_for):
    url = "/api/metrics/graphs/pages/objectives/"
    assert api_for("viewer").get(url).json() == {
        "graph": "pages", "ttft_ms": None, "itl_ms": None, "gpu_hour_price": None, "effective_gpu_hour_price": None,
        "updated_by": None, "updated_at": None}
    operator = api_for("operator")
    put = operator.put(url, {"ttft_ms": 300, "itl_ms": 20, "gpu_hour_price": "2.5"}, format="json")
    assert put.status_code == 200, put.json()
    assert put.json()["gpu_hour_price"] == "2.5000" and put.json()["updated_by"] == "operator"
    patch = operator.patch(url, {"itl_ms": 25}, format="json")
    assert (patch.json()["ttft_ms"], patch.json()["itl_ms"], patch.json()["gpu_hour_price"]) == (300, 25, "2.5000")
    put_again = operator.put(url, {"ttft_ms": 100}, format="json")  # PUT replaces: the others clear
    assert (put_again.json()["itl_ms"], put_again.json()["gpu_hour_price"]) == (None, None)


def test_the_objectives_api_refuses_bad_values_and_viewers(graph, api_for):
    url = "/api/metrics/graphs/pages/objectives/"
    bad = api_for("operator").put(url, {"ttft_ms": 0, "itl_ms": 10**9}, format="json")
    assert bad.status_code == 400
    assert set(bad.json()) >= {"ttft_ms", "itl_ms"}
    assert api_for("viewer").patch(url, {"ttft_ms": 5}, format="json").status_code == 403
    assert api_for(None).get(url).status_code in (401, 403)


def test_the_api_is_described_in_the_openapi_schema(graph, client_for):
    schema = client_for("viewer").get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert "/api/metrics/graphs/" in paths
    assert "/api/metrics/graphs/{name}/chart/" in paths
    assert {"get", "put", "patch"} <= set(paths["/api/metrics/graphs/{name}/objectives/"])
    chart = paths["/api/metrics/graphs/{name}/chart/"]["get"]
    assert [p["name"] for p in chart["parameters"] if p["in"] == "query"] == ["window"]
    assert "Chart" in schema["components"]["schemas"] and "Summary" in schema["components"]["schemas"]


# ------------------------------------------------------------------ the chart endpoint without data


@pytest.mark.parametrize("window", ["5m", "30d", "soon"])
def test_a_bad_window_is_refused_with_the_reason(graph, client_for, api_for, window):
    page = client_for("viewer").get(f"/metrics/graphs/pages/chart/?window={window}")
    assert page.status_code == 400 and "window" in page.json()["detail"]
    assert api_for("viewer").get(f"/api/metrics/graphs/pages/chart/?window={window}").status_code == 400


def test_unknown_graphs_and_users_without_a_role_get_nothing(graph, client_for):
    assert client_for("viewer").get("/metrics/graphs/nope/chart/").status_code == 404
    assert client_for("norole").get("/metrics/graphs/pages/chart/").status_code == 403
    assert client_for(None).get("/metrics/graphs/pages/chart/").status_code == 302  # to the login page


def test_applies_and_scale_changes_are_the_markers(graph, client_for, users):
    now = timezone.now()

    def op(kind, minutes_ago, **fields):
        created = Operation.objects.create(graph=graph, kind=kind, state=fields.pop("state", "succeeded"),
                                           requested_by=users["operator"], **fields)
        Operation.objects.filter(pk=created.pk).update(created_at=now - timedelta(minutes=minutes_ago))

    op("apply", 50, params={"runtime": "local"}, before={"revision": None}, after={"revision": 1})
    op("apply", 40, params={"dryRun": True}, after={"revision": 2})
    op("scale", 30, params={"service": "decode"}, before={"replicas": 1}, after={"replicas": 3})
    op("scale", 20, state="failed", params={"service": "prefill"}, before={"replicas": 1}, after={"replicas": 9})
    op("delete", 10)
    op("scale", 120, before={"replicas": 1}, after={"replicas": 2})  # before the window
    data = client_for("viewer").get("/metrics/graphs/pages/chart/?window=1h").json()
    assert data["state"] == "unreachable"  # markers come from the database either way
    assert [m["label"] for m in data["markers"]] == [
        "apply revision 1", "scale decode 1→3", "scale prefill 1→9 (failed)"]
    assert all(m["by"] == "operator" and data["start"] <= m["at"] <= data["end"] for m in data["markers"])


def test_the_panel_carries_what_the_charts_need(graph, client_for):
    body = client_for("viewer").get("/metrics/graphs/pages/panel/?window=24h").content.decode()
    assert 'data-chart-url="/metrics/graphs/pages/chart/"' in body and 'data-window="24h"' in body
    for name in ("ttft", "itl", "requests", "tokens", "in_flight", "goodput"):
        assert f'data-chart="{name}"' in body
    assert "<script" not in body  # htmx runs no scripts in swaps: the include loads them
    assert not re.search(r"\son[a-z]+=", body)  # no inline handlers (strict CSP)


def test_the_include_for_the_graph_page_loads_the_panel_and_its_scripts(graph, rf, users):
    from django.template.loader import render_to_string

    request = rf.get("/graphs/pages/")
    request.user = users["viewer"]
    request.csp_nonce = "n0nce"
    body = render_to_string("metrics/_graph_panel_include.html", {"graph": graph}, request=request)
    assert 'hx-get="/metrics/graphs/pages/panel/" hx-trigger="load"' in body
    assert '<script src="/static/js/charts.js" nonce="n0nce" defer></script>' in body
    assert 'uPlot.iife.min.js" nonce="n0nce" defer' in body and "metrics.css" in body


# ------------------------------------------------------------------ scrape targets for local graphs


def _pod(deployment, name, role, port):
    return Pod(deployment=deployment, name=name, service=role, role=role, phase="Running", ready=True, port=port)


def test_targets_list_every_local_pods_metrics_port_with_graph_and_pool(graph, tmp_path):
    local = graph.deployment
    other = graph_services.graph_create(spec=build_spec(template="vllm-disagg", name="remote",
                                                        decode=PoolFields(replicas=2)))
    remote = Deployment.objects.create(graph=other, runtime="kubernetes", revision=other.head, active=True)
    Pod.objects.bulk_create([_pod(local, "pages-frontend-0", "frontend", 18001),
                             _pod(local, "pages-prefill-0", "prefill", 18002),
                             _pod(local, "pages-decode-0", "decode", 18003),
                             _pod(local, "pages-decode-1", "decode", None),  # not started yet: no port
                             _pod(remote, "remote-frontend-abc", "frontend", 8000)])
    assert localprom.sync_targets(tmp_path) is True
    written = json.loads((tmp_path / "targets" / "local-graphs.json").read_text())
    assert written == [
        {"labels": {"graph": "pages", "pod": "pages-decode-0", "pool": "decode", "service": "decode"},
         "targets": ["127.0.0.1:18003"]},
        {"labels": {"graph": "pages", "pod": "pages-frontend-0", "pool": "frontend", "service": "frontend"},
         "targets": ["127.0.0.1:18001"]},
        {"labels": {"graph": "pages", "pod": "pages-prefill-0", "pool": "prefill", "service": "prefill"},
         "targets": ["127.0.0.1:18002"]},
    ]
    mtime = (tmp_path / "targets" / "local-graphs.json").stat().st_mtime_ns
    assert localprom.sync_targets(tmp_path) is False  # unchanged: nothing written
    assert (tmp_path / "targets" / "local-graphs.json").stat().st_mtime_ns == mtime
    Pod.objects.filter(name="pages-decode-1").update(port=18004)
    assert localprom.sync_targets(tmp_path) is True
    assert len(json.loads((tmp_path / "targets" / "local-graphs.json").read_text())) == 4


def test_syncing_unchanged_targets_is_one_query_and_no_write(graph, tmp_path, django_assert_num_queries):
    localprom.sync_targets(tmp_path)
    with django_assert_num_queries(1):
        assert localprom.sync_targets(tmp_path) is False


def test_runprometheus_explains_a_missing_binary(settings, tmp_path):
    settings.PROMETHEUS_BINARY = "/nonexistent/prometheus"
    with pytest.raises(CommandError, match="apt-get install prometheus"):
        call_command("runprometheus", dir=str(tmp_path))


def test_runprometheus_serves_and_stops_cleanly(tmp_path):
    assert localprom.find_binary(), "no prometheus binary: run scripts/services.sh"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(CONTROLPLANE_VAR_DIR=str(tmp_path / "var"))
    proc = subprocess.Popen([sys.executable, "manage.py", "runprometheus", "--port", str(port), "--dir",
                             str(tmp_path / "prom"), "--scrape-interval", "2"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status/config", timeout=5) as resp:
            assert "dynamo-local" in json.load(resp)["data"]["yaml"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(20)
    assert code == 0
    assert (tmp_path / "prom" / "targets" / "local-graphs.json").exists()


def test_the_overviews_numbers_are_written_as_djangos_floatformat_writes_them():
    """The overview writes its 350 numbers with graphs_extras.decimals, not floatformat (a
    seventh of its cost): the same text for every value and every form the page uses."""
    import random

    from django.template.defaultfilters import floatformat

    from graphs.templatetags.graphs_extras import decimals

    rng = random.Random(7)
    values = [0, 1, -1, 1.25, 2.5, -2.5, 0.05, 0.15, -0.04, 150, 150.0, 99.95, 1e-9, 12345.678, 1e12,
              *(rng.uniform(-1000, 1000) for _ in range(500)), *(rng.uniform(0, 1) for _ in range(500))]
    for value in values:
        for places in ("-1", "0", "1", "2", "3"):
            assert decimals(value, places) == floatformat(value, places), (value, places)
    assert decimals(None, "1") == decimals("n/a", "1") == floatformat("n/a", "1") == ""


def _spec_reads(queries) -> int:
    return sum('"graphs_revision"."spec"' in q["sql"] for q in queries)


def test_the_overviews_numbers_read_each_revisions_spec_once_per_process(graph, client_for):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from graphs import models as graph_models

    for name in ("pages-b", "pages-c"):
        other = factories.graph(name, template="vllm-disagg")
        Deployment.objects.create(graph=other, runtime="local", revision=other.head, active=True, state="ready")
    graph_models._SPECS.clear()  # a process that has validated no spec yet
    viewer = client_for("viewer")
    with CaptureQueriesContext(connection) as first:
        cold = viewer.get("/metrics/", **HTMX)
    with CaptureQueriesContext(connection) as second:
        warm = viewer.get("/metrics/", **HTMX)
    assert cold.status_code == warm.status_code == 200
    assert _spec_reads(first.captured_queries) == 1  # the three specs in one query
    assert _spec_reads(second.captured_queries) == 0
    # What the specs say is shown alike: each graph's mocker stand-in on this host.
    for response in (cold, warm):
        assert response.content.decode().count('data-role="simulated"') == 3


def test_the_overviews_numbers_show_a_changed_objective_at_the_next_refresh(graph, client_for):
    viewer = client_for("viewer")
    Objectives.objects.update_or_create(graph=graph, defaults={"ttft_ms": 200})
    assert "/ 200" in viewer.get("/metrics/", **HTMX).content.decode()
    Objectives.objects.filter(graph=graph).update(ttft_ms=350)
    body = viewer.get("/metrics/", **HTMX).content.decode()
    assert "/ 350" in body and "/ 200" not in body
