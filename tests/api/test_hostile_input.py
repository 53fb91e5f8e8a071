"""Hostile input beyond the manifest corpus (tests/badinput.py runs that one through every
entry point): JSON bodies, query strings and form fields carrying text that cannot be stored,
nesting past any parser's recursion, numbers past 64 bits or Python's digit limit, and
amplification (a manifest of 20,000 components). Each is a 4xx naming what is wrong, stores
nothing (row counts before and after), and leaves the audit log readable."""

from __future__ import annotations

import json

import pytest
from django.apps import apps

from core.catalog import PoolFields, build_spec
from core.findings import MAX_FINDINGS, MAX_MESSAGE_CHARS
from core.untrusted import MAX_DEPTH, QueryParameterError, UntrustedInputError, load_json, query_int
from graphs import services

HUGE = "9" * 5000  # past Python's 4,300-digit limit for int()
BIG = "9" * 30  # a Python int, but past every 64-bit column


def mocker_spec(name: str = "hostile") -> dict:
    return build_spec(template="mocker-disagg", name=name, model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0)).model_dump(mode="json")


@pytest.fixture(autouse=True)
def _tokens_first(users, api_for):
    """Mint each role's API token (an audited change) before a test counts rows."""
    for role in ("viewer", "operator", "admin"):
        api_for(role)


@pytest.fixture
def graph(users):
    spec = build_spec(template="mocker-disagg", name="present", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    return services.graph_create(spec=spec, user=users["operator"])


def row_counts() -> dict[str, int]:
    return {m._meta.label: m._default_manager.count() for m in apps.get_models()
            if m._meta.app_label in ("graphs", "benchmarks", "clusters", "audit", "endpoint", "playground")}


def assert_audit_readable(api_for, client_for):
    assert api_for("admin").get("/api/audit/").status_code == 200
    assert client_for("admin").get("/audit/").status_code == 200


def body_text(response) -> str:
    return response.content.decode("utf-8", "replace")


# ----------------------------------------------------------------------------- JSON bodies

def _spec_with(path: list, raw_value: str) -> bytes:
    """POST /api/graphs/ body whose spec has ``raw_value`` (JSON text, escapes kept) at ``path``."""
    spec = mocker_spec()
    node = spec
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "__HOLE__"
    return json.dumps({"spec": spec}).replace('"__HOLE__"', raw_value).encode()


JSON_CASES = [
    ("lone-surrogate", _spec_with(["model"], r'"\ud800"'), "spec.model", "lone surrogate"),
    ("low-surrogate-in-a-service-name", _spec_with(["services", 0, "name"], r'"x\udc00"'), "spec.services[0].name",
     "lone surrogate"),
    ("nul-escape", _spec_with(["model"], r'"a\u0000b"'), "spec.model", "NUL"),
    ("nul-in-an-engine-argument", _spec_with(["services", 1, "engine_args"], r'["--x", "\u0000"]'),
     "spec.services[1].engine_args[1]", "NUL"),
    ("surrogate-in-a-key", json.dumps({"spec": mocker_spec(), "description": "d"}).replace(
        '"description"', r'"\udbff"', 1).encode(), "", "lone surrogate"),
    ("integer-of-5000-digits", _spec_with(["services", 0, "replicas"], HUGE), "spec.services[0].replicas",
     "too large"),
    ("integer-beyond-64-bits", _spec_with(["services", 0, "replicas"], BIG), "spec.services[0].replicas",
     "64 bits"),
    ("float-overflowing-to-infinity", _spec_with(["services", 0, "replicas"], "1e999"),
     "spec.services[0].replicas", "finite"),
    ("nan", _spec_with(["services", 0, "replicas"], "NaN"), "", "NaN is not a JSON number"),
    ("array-nested-1000-deep", b'{"spec": ' + b"[" * 1000 + b"]" * 1000 + b"}", "", "nested more than"),
    ("object-nested-100000-deep", b'{"a":' * 100000 + b"1" + b"}" * 100000, "", "nested more than"),
    ("spec-nested-past-the-limit", _spec_with(["services", 0, "extra"], "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5)),
     "", "nested more than"),
]


@pytest.mark.parametrize(("body", "where", "what"), [c[1:] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_a_hostile_json_body_is_a_400_naming_the_field_and_stores_nothing(body, where, what, api_for, client_for,
                                                                         graph):
    before = row_counts()
    response = api_for("operator").post("/api/graphs/", data=body, content_type="application/json")
    assert response.status_code == 400, body_text(response)[:500]
    text = json.dumps(response.json(), ensure_ascii=False)
    assert what in text
    assert where in text
    assert row_counts() == before
    assert_audit_readable(api_for, client_for)


@pytest.mark.parametrize(("url", "body", "what"), [
    ("/api/clusters/", r'{"name": "c\u0000", "kubeconfig": "/k", "namespaces": ["a"]}', "name"),
    ("/api/clusters/", r'{"name": "c", "kubeconfig": "/k\ud800", "namespaces": ["a"]}', "kubeconfig"),
    ("/api/clusters/", '{"name": "c", "kubeconfig": "/k", "namespaces": [' + HUGE + "]}", "namespaces[0]"),
    ("/api/graphs/present/scale/", '{"service": "decode", "replicas": ' + BIG + "}", "replicas"),
    ("/api/graphs/present/apply/", r'{"runtime": "local\u0000"}', "runtime"),
    ("/api/benchmarks/runs/", r'{"graph": "present", "profile": "custom", "concurrency": ' + HUGE + "}",
     "concurrency"),
    ("/api/benchmarks/runs/", r'{"graph": "present\udfff"}', "graph"),
    ("/api/graphs/from-template/", r'{"template": "mocker-disagg", "name": "n", "model": "' + "[" * 10 + r'\u0000"}',
     "model"),
])
def test_every_json_endpoint_refuses_hostile_bodies_before_its_view_runs(url, body, what, api_for, client_for, graph):
    before = row_counts()
    response = api_for("admin").post(url, data=body.encode(), content_type="application/json")
    assert response.status_code == 400, body_text(response)[:500]
    assert what in json.dumps(response.json())
    assert row_counts() == before
    assert_audit_readable(api_for, client_for)


def test_a_json_body_that_is_not_utf8_is_a_400(api_for, graph):
    response = api_for("operator").post("/api/graphs/", data=b'{"spec": "\xff\xfe"}', content_type="application/json")
    assert response.status_code == 400
    assert "UTF-8" in response.json()["detail"]


def test_the_playground_refuses_hostile_chat_and_conversation_bodies(client_for, api_for, users):
    from tests.playground_fixtures import make_graph

    # Ready as far as the status cache knows; nothing listens there, and nothing needs to: the
    # body is refused before the frontend is called.
    make_graph("present", "m", "http://127.0.0.1:9", user=users["admin"])
    client = client_for("operator")
    before = row_counts()
    for body in (b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                 b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
                 b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + HUGE.encode() + b"}"):
        response = client.post("/api/playground/present/v1/chat/completions", data=body,
                               content_type="application/json")
        assert response.status_code == 400, body_text(response)[:300]
        saved = client.post("/playground/conversations/new/", data=body, content_type="application/json")
        assert saved.status_code == 400, body_text(saved)[:300]
    assert row_counts() == before


# ---------------------------------------------------------------------------- query strings

QUERY_CASES = [
    ("/api/benchmarks/runs/?study=" + BIG, "study"),
    ("/api/benchmarks/runs/?study=" + HUGE, "study"),
    ("/api/benchmarks/runs/?study=-1", "study"),
    ("/api/benchmarks/compare/?runs=1," + BIG, "runs"),
    ("/api/benchmarks/compare/?runs=" + HUGE, "runs"),
    ("/api/benchmarks/compare/report/?runs=" + ",".join(["1"] * 500), "runs"),
    ("/api/graphs/present/render/?revision=" + BIG, "revision"),
    ("/api/graphs/present/render/?revision=" + HUGE, "revision"),
    ("/api/graphs/present/validate/?revision=1e3", "revision"),
    ("/api/graphs/present/export/?revision=0x10", "revision"),
    ("/api/graphs/present/diff/?from_revision=1&to_revision=" + BIG, "to_revision"),
    ("/api/graphs/present/pods/present-frontend-0/log/?lines=" + BIG, "lines"),
    ("/api/graphs/present/pods/present-frontend-0/log/?lines=" + HUGE, "lines"),
]


@pytest.mark.parametrize(("url", "name"), QUERY_CASES, ids=[f"{u.split('?')[0]}?{n}" for u, n in QUERY_CASES])
def test_an_integer_query_parameter_out_of_range_is_a_400_naming_it(url, name, api_for, graph):
    response = api_for("admin").get(url)
    assert response.status_code == 400, body_text(response)[:300]
    assert name in response.json(), response.json()


@pytest.mark.parametrize("url", [
    "/graphs/present/revisions/?from=1&to=" + BIG,
    "/graphs/present/revisions/?from=" + HUGE + "&to=1",
    "/graphs/present/export/?revision=" + BIG,
    "/graphs/present/export/?revision=" + HUGE,
    "/playground/?c=" + BIG,
    "/playground/?c=" + HUGE,
    "/benchmarks/compare/?runs=" + BIG,
    "/graphs/?page=" + HUGE,
    "/audit/?page=" + BIG,
])
def test_pages_answer_hostile_integer_parameters_with_a_4xx(url, client_for, graph):
    response = client_for("admin").get(url)
    assert response.status_code in (200, 400, 404), response.status_code
    if response.status_code == 200:
        # Where a page shows a message instead, that message names the problem.
        assert "revisions" in url or "page=" in url


def test_the_query_helper_names_the_parameter_and_its_range():
    from django.http import QueryDict

    assert query_int(QueryDict("n=42"), "n") == 42
    assert query_int(QueryDict(""), "n", default=7) == 7
    for raw in (BIG, HUGE, "-3", "1.5", "0x1", "١٢", "1e9", "%2B"):
        with pytest.raises(QueryParameterError) as caught:
            query_int(QueryDict(f"n={raw}"), "n")
        assert caught.value.name == "n"
        assert len(str(caught.value)) < 200


def test_hostile_query_strings_and_form_fields_cannot_reach_the_database(client_for, api_for, graph):
    client = client_for("admin")  # logging in is audited: before the count
    before = row_counts()
    assert api_for("viewer").get("/api/operations/?graph=a%00b").status_code == 400
    for url, data in (("/clusters/new/", {"name": "c\x00", "kubeconfig": "/k", "namespaces": "a"}),
                      ("/graphs/new/", {"template": "mocker-disagg", "name": "n", "model": "m\x00"}),
                      ("/graphs/present/scale/", {"service": "decode", "replicas": BIG}),
                      ("/graphs/present/scale/", {"service": "decode", "replicas": HUGE})):
        response = client.post(url, data)
        assert 400 <= response.status_code < 500 or "whole number" in body_text(response), (url, response.status_code)
    assert row_counts() == before
    assert_audit_readable(api_for, client_for)


def test_a_login_with_a_nul_in_the_username_is_refused_without_a_server_error(client, users):
    from urllib.parse import urlencode

    before = row_counts()
    response = client.post("/login/", urlencode({"username": "admin\x00", "password": "x"}),
                           content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert "'username': contains a NUL character" in body_text(response)
    # A multipart form reaches the form, whose fields refuse NUL themselves.
    response = client.post("/login/", {"username": "admin\x00", "password": "x"})
    assert response.status_code in (200, 400)
    assert "Null characters are not allowed" in body_text(response) or "NUL" in body_text(response)
    assert "_auth_user_id" not in client.session
    assert row_counts() == before


# ------------------------------------------------------------------------------ amplification

def _many_components(count: int) -> str:
    lines = ["apiVersion: nvidia.com/v1beta1", "kind: DynamoGraphDeployment", "metadata: {name: big}", "spec:",
             "  components:"]
    lines += [f"  - {{name: w{i}, type: worker, bogus: 1}}" for i in range(count)]
    return "\n".join(lines) + "\n"


def test_a_manifest_of_20000_components_gets_one_short_refusal(api_for):
    text = _many_components(20000)
    assert len(text) < 1024 * 1024
    response = api_for("viewer").post("/api/validate/", data=text.encode(), content_type="application/yaml")
    assert response.status_code == 200
    assert len(response.content) < 10_000
    [finding] = response.json()["findings"]
    assert finding["path"] == "spec.components" and "at most 100" in finding["message"]


def test_findings_are_capped_in_count_and_in_length(api_for):
    padding = "x" * 1000  # YAML's longest simple key: the unknown field named in each message
    text = _many_components(90).replace("bogus:", f"{padding}:")
    response = api_for("viewer").post("/api/validate/", data=text.encode(), content_type="application/yaml")
    assert response.status_code == 200
    findings = response.json()["findings"]
    assert 0 < len(findings) <= MAX_FINDINGS + 1
    assert all(len(f["message"]) <= MAX_MESSAGE_CHARS and len(f["path"]) <= MAX_MESSAGE_CHARS for f in findings)
    assert len(response.content) < 200_000


def test_load_json_bounds_depth_numbers_and_text():
    assert load_json('{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    for text in ("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2), '"\\u0000"', '{"k": "\\ud800"}', HUGE, BIG,
                 "-" + BIG, "1e400", "Infinity", '["[[[[", ' + "[" * 70 + "]" * 70 + "]"):
        with pytest.raises(ValueError):
            load_json(text)
    # Brackets inside strings do not count as nesting.
    assert load_json('["' + "[" * 500 + '"]') == ["[" * 500]


@pytest.mark.parametrize("text, path", [
    ('{"a": {"b": [1, 99999999999999999999]}}', "a.b[1]"),  # a number the parse hooks flag
    ('{"a": [0.5, 1e999]}', "a[1]"),
    ('{"m": [{"content": "ok"}, {"content": "bad \\u0000 here"}]}', "m[1].content"),  # an escape
    ('{"m": {"k\\ud83d": 1}}', "m"),
    ('{"raw": "' + "\ud800" + '"}', "raw"),  # a lone surrogate in the text itself
])
def test_load_json_names_the_path_of_a_bad_value_whatever_lets_it_in(text, path):
    """load_json walks the document only when the text could hold a bad value: every way one
    can get in still finds it, with its path."""
    with pytest.raises(UntrustedInputError) as caught:
        load_json(text)
    assert caught.value.path == path


def test_load_json_leaves_good_documents_as_json_reads_them():
    text = '{"model": "m", "messages": [{"role": "user", "content": "caf\\u00e9 \\ud83d\\ude00"}], "n": -3, "t": 0.7}'
    assert load_json(text) == json.loads(text)
    assert load_json('{"big": 9223372036854775807, "small": -9223372036854775808}')["big"] == 2**63 - 1
