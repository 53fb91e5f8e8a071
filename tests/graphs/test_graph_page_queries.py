"""What other apps show on the graph page (the Git card's link and export, the OpenAI endpoint's
gateway exposure) each app reads itself, one query per part, whether the graph has one or not:
a graph kept in Git and exposed through a gateway costs the page the same queries as a plain
one, and the page shows each of them."""

from __future__ import annotations

import html

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from endpoint.models import GraphExposure
from repos.models import Export, ExportState, GraphLink, Repository
from tests import factories

OTHER_APPS = ('"repos_graphlink"', '"repos_export"', '"playground_graphexposure"')


def page(client, name: str) -> tuple[str, list[str]]:
    client.get(f"/graphs/{name}/")  # the revision's cards are rendered once per process: not counted
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/graphs/{name}/")
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode()), [q["sql"] for q in queries.captured_queries]


def parts_read(queries: list[str]) -> list[str]:
    """Which other app's table each query reads from (its first FROM)."""
    return sorted(next(t for t in OTHER_APPS if f"FROM {t}" in q) for q in queries
                  if any(f"FROM {t}" in q for t in OTHER_APPS))


@pytest.fixture
def viewer(client_for):
    return client_for("viewer")


def test_a_graph_in_git_and_behind_a_gateway_costs_the_page_the_same_queries_as_a_plain_one(db, viewer):
    factories.graph("plain", backend="mocker")
    kept = factories.graph("kept", backend="mocker")
    plain_html, plain_queries = page(viewer, "plain")
    assert "/api/playground/plain/v1" in plain_html  # the control plane's relay: no exposure

    repo = Repository.objects.create(name="fleet", url="file:///nowhere", branch="release")
    GraphLink.objects.create(repository=repo, path="graphs/kept.yaml", graph=kept, commit="a" * 40)
    Export.objects.create(revision=kept.head, repository=repo, state=ExportState.FAILED,
                          error="remote: permission denied", base_text="x" * 10_000)
    GraphExposure.objects.create(graph=kept, host="llm.example.com", gateway_name="public",
                                 gateway_namespace="gateways")
    kept_html, kept_queries = page(viewer, "kept")

    assert parts_read(plain_queries) == parts_read(kept_queries) == sorted(OTHER_APPS)  # one each
    assert len(kept_queries) == len(plain_queries)
    assert "fleet" in kept_html and "graphs/kept.yaml" in kept_html  # the link, its repository
    assert "remote: permission denied" in kept_html  # the head revision's export
    assert "llm.example.com" in kept_html  # the endpoint's URL through the gateway
