"""Label selectors (core/labels.py) read as kubectl reads them, and met in the database as
Kubernetes meets them (apimachinery's labels.Requirement.Matches): the graph list's ``?label=``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.catalog import PoolFields, build_spec
from core.labels import Requirement, SelectorError, parse_selector
from graphs import services
from graphs.filters import GraphFilterSerializer
from graphs.models import Graph
from graphs.selectors import GraphFilter, graph_summaries


@pytest.mark.parametrize("text, expected", [
    ("", ()),
    ("team=ml", (Requirement("team", "=", ("ml",)),)),
    ("team == ml", (Requirement("team", "=", ("ml",)),)),
    ("team!=ml", (Requirement("team", "!=", ("ml",)),)),
    ("tier", (Requirement("tier", "exists"),)),
    ("! tier", (Requirement("tier", "!"),)),
    ("tier=", (Requirement("tier", "=", ("",)),)),
    ("tier in (a, b,a)", (Requirement("tier", "in", ("a", "b")),)),
    ("tier notin(a)", (Requirement("tier", "notin", ("a",)),)),
    ("app.kubernetes.io/name=web, x in (1,2),!y", (Requirement("app.kubernetes.io/name", "=", ("web",)),
                                                   Requirement("x", "in", ("1", "2")), Requirement("y", "!"))),
])
def test_a_selector_reads_as_kubectl_reads_it(text, expected):
    assert parse_selector(text) == expected


@pytest.mark.parametrize("text, words", [
    ("team is ml", "is not a requirement"),
    ("a=b,,c", "empty requirement"),
    ("a in (b", "not closed"),
    ("a)", "closes no"),
    ("a in ()", "at least one value"),
    ("replicas>2", "numeric comparisons"),
    ("Team_A/x=y", "prefix"),
    ("/x", "empty prefix"),
    ("-x", "name part"),
    ("a" * 64, "name part"),
    ("x=" + "v" * 64, "label value"),
    ("x=-v", "label value"),
    ("x" * 1001, "at most 1000"),
])
def test_a_selector_kubectl_would_refuse_is_refused_in_words(text, words):
    with pytest.raises(SelectorError, match=words):
        parse_selector(text)


def meets(requirement: Requirement, labels: dict) -> bool:
    """apimachinery's Requirement.Matches: != and notin hold for an object without the key."""
    present = requirement.key in labels
    found = present and labels[requirement.key] in requirement.values
    return {"exists": present, "!": not present, "=": found, "in": found,
            "!=": not found, "notin": not found}[requirement.operator]


KEYS, VALUES = ["team", "tier", "example.com/app"], ["a", "b", ""]
LABELLED = {"none": {}, "a": {"team": "a"}, "b": {"team": "b", "tier": ""}, "c": {"tier": "a", "example.com/app": "b"},
            "d": {"team": "", "tier": "b", "example.com/app": "a"}}

requirements = st.builds(
    lambda key, op, values: Requirement(key, op, () if op in ("exists", "!") else
                                        tuple(dict.fromkeys(values[:1] if op in ("=", "!=") else values))),
    st.sampled_from(KEYS), st.sampled_from(["exists", "!", "=", "!=", "in", "notin"]),
    st.lists(st.sampled_from(VALUES), min_size=1, max_size=3))


@pytest.fixture
def labelled(db):
    pool = PoolFields(gpus=0)
    for name, labels in LABELLED.items():
        spec = build_spec(template="mocker-disagg", name=f"g-{name}", model="m", backend="mocker", prefill=pool,
                          decode=pool).model_copy(update={"metadata_extra": {"labels": labels}})
        services.graph_create(spec=spec)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(requirements, min_size=1, max_size=3))
def test_the_database_meets_a_selector_as_kubernetes_does(labelled, selector):
    listed = {g.name for g in graph_summaries(where=GraphFilter(labels=tuple(selector)))}
    assert listed == {f"g-{name}" for name, labels in LABELLED.items() if all(meets(r, labels) for r in selector)}


def test_a_revision_keeps_the_labels_of_its_manifest_and_a_new_head_moves_the_match(db):
    spec = build_spec(template="mocker-disagg", name="moving", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    graph = services.graph_create(spec=spec.model_copy(update={"metadata_extra": {"labels": {"tier": "dev"}}}))
    where = selector_filter("tier=prod")
    assert not graph_summaries(where=where).exists()
    services.graph_update(graph=graph, spec=spec.model_copy(update={"metadata_extra": {"labels": {"tier": "prod"}}}))
    assert [g.name for g in graph_summaries(where=where)] == ["moving"]
    assert Graph.objects.get(name="moving").head.labels == {"tier": "prod"}


def selector_filter(text: str) -> GraphFilter:
    given = GraphFilterSerializer(data={"label": text})
    given.is_valid(raise_exception=True)
    return given.filter()
