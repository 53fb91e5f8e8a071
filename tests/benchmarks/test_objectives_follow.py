"""Objectives (SLO) follow a graph (issue #43, item 8): an A/B study's variant starts with its
source's targets and GPU-hour price, so goodput reads against the same SLO on every arm."""

from __future__ import annotations

from decimal import Decimal

import pytest

from benchmarks import studies
from benchmarks.models import Study
from benchmarks.profiles import resolve
from benchmarks.schema import Arm
from graphs.models import Graph
from metrics.models import Objectives
from metrics.services import objectives_set
from tests.playground_fixtures import make_graph

pytestmark = pytest.mark.django_db


def test_an_ab_variant_starts_with_its_sources_objectives(users):
    source = make_graph("ab-src", "model-a", "http://127.0.0.1:9", user=users["admin"])
    objectives_set(graph=source, ttft_ms=250.0, itl_ms=12.5, gpu_hour_price=Decimal("2.5"), user=users["admin"])
    study = Study.objects.create(graph=source, profile="custom", params=resolve("custom").model_dump(mode="json"),
                                 requested_by=users["operator"])
    arm = Arm(shape="p2d1")
    assert studies._create_variant(study, arm) == "next", arm.message
    variant = Graph.objects.get(pk=arm.graph_id)
    assert variant.name != source.name
    got = Objectives.objects.get(graph=variant)
    assert (got.ttft_ms, got.itl_ms, got.gpu_hour_price) == (250.0, 12.5, Decimal("2.5"))


def test_a_variant_of_a_graph_without_objectives_has_none(users):
    source = make_graph("ab-bare", "model-a", "http://127.0.0.1:9", user=users["admin"])
    study = Study.objects.create(graph=source, profile="custom", params=resolve("custom").model_dump(mode="json"))
    arm = Arm(shape="p2d1")
    assert studies._create_variant(study, arm) == "next", arm.message
    assert not Objectives.objects.filter(graph_id=arm.graph_id).exists()
