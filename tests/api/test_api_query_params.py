"""The API takes its query parameters as its schema states them: ``page`` is one integer
(given twice, blank or padded is a 400 naming it), a chart's ``window`` matches its pattern."""

from __future__ import annotations

import pytest

from core.catalog import PoolFields
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["page=1&page=2", "page=", "page=%201", "page=1.0", "page=abc"])
def test_a_page_that_is_not_one_integer_is_refused_naming_it(api_for, query):
    response = api_for("viewer").get(f"/api/operations/?{query}")
    assert response.status_code == 400 and "page" in response.json(), response.content


def test_one_page_number_is_served(api_for):
    assert api_for("viewer").get("/api/operations/?page=1").status_code == 200


@pytest.mark.parametrize("window", ["", " 1h", "015m", "1H", "8d"])
def test_a_chart_window_outside_its_pattern_is_refused(api_for, window):
    pool = PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret="")
    factories.graph("w", model="m", backend="mocker",
                                          prefill=pool, decode=pool)
    response = api_for("viewer").get("/api/metrics/graphs/w/chart/", {"window": window})
    assert response.status_code == 400 and "window" in response.json(), response.content
