"""The graph page reads what other apps show on it (the Git card's link and export, the
OpenAI endpoint's gateway exposure) with the graph itself: a graph kept in Git and exposed
through a gateway costs the page no more queries than a plain one, and the page still shows
each of them."""

from __future__ import annotations

import html

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from endpoint.models import GraphExposure
from repos.models import Export, ExportState, GraphLink, Repository
from tests import factories

OTHER_APPS = ('"repos_graphlink"', '"repos_export"', '"repos_repository"', '"playground_graphexposure"')


def page(client, name: str) -> tuple[str, list[str]]:
    client.get(f"/graphs/{name}/")  # the revision's cards are rendered once per process: not counted
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/graphs/{name}/")
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode()), [q["sql"] for q in queries.captured_queries]


def read_apart(queries: list[str]) -> list[str]:
    """The queries that read another app's rows on their own, not joined to the graph's."""
    return [q for q in queries if any(t in q for t in OTHER_APPS) and 'FROM "graphs_graph"' not in q]


@pytest.fixture
def viewer(client_for):
    return client_for("viewer")


def test_a_graph_in_git_and_behind_a_gateway_costs_the_page_no_more_queries(db, viewer):
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

    assert read_apart(plain_queries) == [] and read_apart(kept_queries) == []
    assert len(kept_queries) == len(plain_queries)
    assert "fleet" in kept_html and "graphs/kept.yaml" in kept_html  # the link, its repository
    assert "remote: permission denied" in kept_html  # the head revision's export
    assert "llm.example.com" in kept_html  # the endpoint's URL through the gateway
