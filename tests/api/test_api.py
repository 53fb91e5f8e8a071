"""The REST API: graphs CRUD, revisions, diff, render, export, import, from-template, the
OpenAPI document, token authentication and the role matrix."""

from __future__ import annotations

import json

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.catalog import PoolFields, build_spec
from core.dgd.parse import import_manifest
from core.dgd.render import V1ALPHA1, V1BETA1, render
from graphs import services
from graphs.models import Graph, Revision
from tests import factories


def spec_json(name: str = "alpha", **kwargs) -> dict:
    return build_spec(template="vllm-disagg", name=name, **kwargs).model_dump(mode="json")


def make_graph(name: str = "alpha", user=None, **kwargs) -> Graph:
    return factories.graph(name, template="vllm-disagg", user=user, **kwargs)


def with_decode_replicas(spec: dict, replicas: int) -> dict:
    spec = json.loads(json.dumps(spec))
    next(s for s in spec["services"] if s["name"] == "decode")["replicas"] = replicas
    return spec


# ---------------------------------------------------------------------------------- CRUD


def test_create_with_a_spec_makes_revision_1(operator_api, users):
    response = operator_api.post("/api/graphs/", {"spec": spec_json(), "description": "first", "message": "hello"},
                                 format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "alpha"
    assert body["revision"] == 1
    assert body["description"] == "first"
    assert body["backend"] == "vllm"
    assert body["dynamo_version"] == "1.6.1"
    assert body["model"] == "Qwen/Qwen3-0.6B"
    assert body["state"] == "not_deployed"
    assert body["url"].endswith("/api/graphs/alpha/")
    assert body["spec"] == spec_json()
    graph = Graph.objects.get(name="alpha")
    assert graph.created_by == users["operator"]
    assert graph.head.message == "hello"
    assert graph.head.created_by == users["operator"]


def test_create_refuses_an_invalid_spec_with_the_path_of_the_problem(operator_api):
    spec = spec_json()
    spec["services"][1]["replicas"] = -3
    response = operator_api.post("/api/graphs/", {"spec": spec}, format="json")
    assert response.status_code == 422
    assert any("services[prefill].replicas" in message for message in response.json()["spec"])
    assert Graph.objects.count() == 0


def test_create_refuses_an_existing_name_with_409(operator_api):
    make_graph("alpha")
    response = operator_api.post("/api/graphs/", {"spec": spec_json("alpha")}, format="json")
    assert response.status_code == 409
    assert "already exists" in response.json()["detail"]
    assert Revision.objects.count() == 1


def test_create_refuses_a_spec_the_crd_would_refuse(operator_api):
    spec = spec_json()
    spec["services"][1]["extra"] = {"notAField": True}
    response = operator_api.post("/api/graphs/", {"spec": spec}, format="json")
    assert response.status_code == 422
    assert any("notAField" in f["path"] for f in response.json()["findings"])
    assert Graph.objects.count() == 0


def test_list_is_paginated_and_sorted_by_name(viewer_api):
    for name in ("charlie", "alpha", "bravo"):
        make_graph(name)
    response = viewer_api.get("/api/graphs/")
    assert response.status_code == 200
    body = response.json()
    assert body["next"] is None and body["previous"] is None
    assert [g["name"] for g in body["results"]] == ["alpha", "bravo", "charlie"]
    assert "spec" not in body["results"][0]
    assert body["results"][0]["revision"] == 1


def test_list_pages_hold_50_graphs_read_by_cursor(viewer_api):
    for i in range(51):
        make_graph(f"g{i:02d}")
    first = viewer_api.get("/api/graphs/").json()
    assert "count" not in first and first["previous"] is None
    assert [g["name"] for g in first["results"]] == [f"g{i:02d}" for i in range(50)]
    assert "?cursor=" in first["next"]
    second = viewer_api.get(first["next"]).json()
    assert [g["name"] for g in second["results"]] == ["g50"] and second["next"] is None
    assert [g["name"] for g in viewer_api.get(second["previous"]).json()["results"]] == first_names(first)


def first_names(body) -> list[str]:
    return [g["name"] for g in body["results"]]


def test_a_graph_created_while_a_fleet_is_read_does_not_shift_the_pages(viewer_api):
    """Page numbers would show g20 twice when a graph named before it appears between two
    pages; a cursor continues after the last name read."""
    for i in range(30):
        make_graph(f"g{i:02d}")
    first = viewer_api.get("/api/graphs/?page_size=20").json()
    make_graph("a-newcomer")
    second = viewer_api.get(first["next"]).json()
    assert first_names(second) == [f"g{i:02d}" for i in range(20, 30)]


@pytest.mark.parametrize("query, name, code", [("cursor=x", "cursor", 422), ("cursor=%00", "cursor", 400),
                                               ("page=2", "page", 400), ("page_size=0", "page_size", 400),
                                               ("page_size=501", "page_size", 400), ("page_size=ten", "page_size", 400),
                                               ("page_size=1&page_size=2", "page_size", 400)])
def test_a_cursor_or_page_size_the_list_did_not_write_is_refused_naming_it(viewer_api, query, name, code):
    """Outside the schema (a page number, a page size out of bounds, a NUL): 400. A string the
    schema allows that is not a cursor this list wrote: content, 422."""
    make_graph("alpha")
    response = viewer_api.get(f"/api/graphs/?{query}")
    assert response.status_code == code and f"'{name}'" in str(response.json()), response.content


def test_a_list_row_is_the_detail_s_fields_exactly(viewer_api):
    """The list builds its rows in one loop (GraphListSerializer); each must be what the
    graph's own resource says for the same fields, for a deployed graph, an undeployed one and
    one whose head revision changed model."""
    from graphs.models import Deployment

    factories.graph("alpha", template="vllm-disagg", description="first <b>one</b>")
    bravo = make_graph("bravo")
    services.graph_update(graph=bravo, spec=build_spec(template="vllm-disagg", name="bravo", model="org/other"))
    Deployment.objects.create(graph=bravo, runtime="local", revision=bravo.head, active=True, state="ready")
    rows = viewer_api.get("/api/graphs/?format=json").json()["results"]
    assert [r["name"] for r in rows] == ["alpha", "bravo"]
    for row in rows:
        detail = viewer_api.get(row["url"]).json()
        assert row == {key: detail[key] for key in row}
        assert list(row) == ["name", "url", "description", "revision", "model", "backend", "dynamo_version",
                             "state", "created_at", "updated_at", "archived_at", "archived_note"]
    assert rows[1]["model"] == "org/other" and rows[1]["revision"] == 2 and rows[1]["state"] == "ready"
    assert rows[0]["state"] == "not_deployed" and rows[0]["description"] == "first <b>one</b>"


def count_list_queries(api, n_graphs: int) -> int:
    for i in range(Graph.objects.count(), n_graphs):
        graph = make_graph(f"q{i:02d}")
        services.graph_update(graph=graph, spec=build_spec(template="vllm-disagg", name=graph.name, model="x/y"))
    with CaptureQueriesContext(connection) as queries:
        response = api.get("/api/graphs/")
    assert response.status_code == 200
    assert len(response.json()["results"]) == n_graphs
    return len(queries)


def test_the_list_uses_the_same_number_of_queries_for_5_and_30_graphs(viewer_api):
    with_5 = count_list_queries(viewer_api, 5)
    with_30 = count_list_queries(viewer_api, 30)
    assert with_5 == with_30
    assert with_30 <= 6


def test_the_list_query_count_stays_bounded(viewer_api, django_assert_max_num_queries):
    for i in range(30):
        make_graph(f"m{i:02d}")
    with django_assert_max_num_queries(6):
        assert viewer_api.get("/api/graphs/").status_code == 200


def test_retrieve_returns_the_head_spec(viewer_api):
    make_graph("alpha")
    response = viewer_api.get("/api/graphs/alpha/")
    assert response.status_code == 200
    assert response.json()["spec"] == spec_json()


def test_retrieve_an_unknown_graph_is_404(viewer_api):
    assert viewer_api.get("/api/graphs/nope/").status_code == 404


def test_update_makes_revision_2(operator_api, users):
    make_graph("alpha")
    spec = with_decode_replicas(spec_json(), 3)
    response = operator_api.put("/api/graphs/alpha/", {"spec": spec, "message": "more decode", "expected_revision": 1},
                                format="json")
    assert response.status_code == 200, response.content
    assert response.json()["revision"] == 2
    assert response.json()["spec"] == spec
    graph = Graph.objects.get(name="alpha")
    assert graph.head.number == 2
    assert graph.head.message == "more decode"
    assert graph.head.created_by == users["operator"]
    assert list(graph.revisions.order_by("number").values_list("number", flat=True)) == [1, 2]
    assert graph.revisions.get(number=1).spec == spec_json()


def test_update_with_a_stale_expected_revision_is_409_and_stores_nothing(operator_api):
    make_graph("alpha")
    spec = with_decode_replicas(spec_json(), 3)
    assert operator_api.put("/api/graphs/alpha/", {"spec": spec, "expected_revision": 1}, format="json").status_code \
        == 200
    response = operator_api.put("/api/graphs/alpha/", {"spec": with_decode_replicas(spec, 4), "expected_revision": 1},
                                format="json")
    assert response.status_code == 409
    assert "revision 2" in response.json()["detail"]
    assert Revision.objects.count() == 2


def test_update_without_expected_revision_always_adds_a_revision(operator_api):
    make_graph("alpha")
    for replicas in (2, 3):
        response = operator_api.put("/api/graphs/alpha/", {"spec": with_decode_replicas(spec_json(), replicas)},
                                    format="json")
        assert response.status_code == 200
    assert Graph.objects.get(name="alpha").head.number == 3


def test_update_cannot_rename_a_graph(operator_api):
    make_graph("alpha")
    response = operator_api.put("/api/graphs/alpha/", {"spec": spec_json("beta")}, format="json")
    assert response.status_code == 422
    assert response.json()["findings"][0]["path"] == "metadata.name"
    assert Revision.objects.count() == 1


def test_patch_is_not_offered(operator_api):
    make_graph("alpha")
    assert operator_api.patch("/api/graphs/alpha/", {"description": "x"}, format="json").status_code == 405


def test_delete_removes_the_graph_and_its_revisions(operator_api):
    make_graph("alpha")
    services.graph_update(graph=Graph.objects.get(name="alpha"), spec=build_spec(template="vllm-agg", name="alpha"))
    response = operator_api.delete("/api/graphs/alpha/")
    assert response.status_code == 204
    assert not Graph.objects.exists()
    assert not Revision.objects.exists()
    assert operator_api.get("/api/graphs/alpha/").status_code == 404


# ---------------------------------------------------------------------- revisions and diff


@pytest.fixture
def two_revisions(users):
    graph = make_graph("alpha", user=users["operator"])
    services.graph_update(graph=graph, spec=build_spec(template="vllm-disagg", name="alpha",
                                                       decode=PoolFields(replicas=4)),
                          user=users["admin"], message="scale decode")
    return graph


def test_revisions_list_is_newest_first(viewer_api, two_revisions):
    response = viewer_api.get("/api/graphs/alpha/revisions/")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    assert [(r["number"], r["message"], r["created_by"]) for r in body["results"]] == [
        (2, "scale decode", "admin"), (1, "created", "operator")]
    assert "spec" not in body["results"][0]


def test_revision_detail_has_the_spec_of_that_revision(viewer_api, two_revisions):
    first = viewer_api.get("/api/graphs/alpha/revisions/1/").json()
    second = viewer_api.get("/api/graphs/alpha/revisions/2/").json()
    assert first["number"] == 1 and second["number"] == 2
    decode = [next(s for s in r["spec"]["services"] if s["name"] == "decode") for r in (first, second)]
    assert [d["replicas"] for d in decode] == [1, 4]
    assert viewer_api.get("/api/graphs/alpha/revisions/3/").status_code == 404


def test_diff_between_revisions_contains_the_changed_line(viewer_api, two_revisions):
    response = viewer_api.get("/api/graphs/alpha/diff/?from_revision=1&to_revision=2")
    assert response.status_code == 200
    body = response.json()
    assert (body["from"], body["to"], body["apiVersion"]) == (1, 2, V1BETA1)
    lines = body["diff"].splitlines()
    assert lines[0] == "--- alpha@1" and lines[1] == "+++ alpha@2"
    assert "-    replicas: 1" in lines
    assert "+    replicas: 4" in lines
    assert sum(1 for line in lines if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))) == 2


def test_diff_in_v1alpha1_uses_the_v1alpha1_spelling(viewer_api, two_revisions):
    body = viewer_api.get("/api/graphs/alpha/diff/?from_revision=1&to_revision=2&apiVersion=v1alpha1").json()
    assert body["apiVersion"] == V1ALPHA1
    assert "+      replicas: 4" in body["diff"].splitlines()


def test_diff_needs_both_revisions(viewer_api, two_revisions):
    response = viewer_api.get("/api/graphs/alpha/diff/?from_revision=1")
    assert response.status_code == 400
    assert "to_revision" in response.json()
    assert viewer_api.get("/api/graphs/alpha/diff/?from_revision=1&to_revision=9").status_code == 404


# ------------------------------------------------------------------------- render, export


@pytest.mark.parametrize(("param", "expected"), [
    ("", V1BETA1), ("?apiVersion=v1alpha1", V1ALPHA1), ("?apiVersion=nvidia.com/v1beta1", V1BETA1),
    ("?apiVersion=nvidia.com/v1alpha1", V1ALPHA1), ("?apiVersion=v1beta1", V1BETA1),
])
def test_render_returns_the_manifest_in_the_requested_api_version(viewer_api, param, expected):
    graph = make_graph("alpha")
    response = viewer_api.get(f"/api/graphs/alpha/render/{param}")
    assert response.status_code == 200
    body = response.json()
    assert body["apiVersion"] == expected
    assert body["revision"] == 1
    assert body["manifest"] == render(graph.head.graph_spec, expected)
    assert body["valid"] is True
    assert body["counts"]["error"] == 0


@pytest.mark.parametrize("value", ["v2", "nvidia.com/v1", "apps/v1", "v1beta1x"])
def test_render_refuses_an_unknown_api_version_with_400(viewer_api, value):
    make_graph("alpha")
    response = viewer_api.get(f"/api/graphs/alpha/render/?apiVersion={value}")
    assert response.status_code == 400
    assert "unknown apiVersion" in response.json()["apiVersion"][0]


def test_render_of_an_older_revision_and_for_another_dynamo_release(viewer_api, two_revisions):
    body = viewer_api.get("/api/graphs/alpha/render/?revision=1&dynamoVersion=0.5.1&apiVersion=v1alpha1").json()
    assert body["revision"] == 1
    prefill = body["manifest"]["spec"]["services"]["prefill"]["extraPodSpec"]["mainContainer"]
    assert "--is-prefill-worker" in prefill["args"]
    assert "--disaggregation-mode" not in prefill["args"]
    assert prefill["image"].endswith(":0.5.1")
    assert viewer_api.get("/api/graphs/alpha/render/?dynamoVersion=latest").status_code == 400
    assert viewer_api.get("/api/graphs/alpha/render/?revision=0").status_code == 400


def test_validate_of_a_stored_graph_reports_its_findings(viewer_api):
    make_graph("old", dynamo_version="0.5.1")
    # Without apiVersion, the one the release serves (v1alpha1); v1beta1 on request.
    assert viewer_api.get("/api/graphs/old/validate/").json()["valid"] is True
    beta = viewer_api.get("/api/graphs/old/validate/?apiVersion=v1beta1").json()
    assert beta["valid"] is False
    assert [f["code"] for f in beta["findings"]] == ["v1beta1_unserved"]
    alpha = viewer_api.get("/api/graphs/old/validate/?apiVersion=v1alpha1").json()
    assert alpha["valid"] is True


@pytest.mark.parametrize(("param", "api_version", "suffix"), [
    ("", V1BETA1, "v1beta1"), ("?apiVersion=v1alpha1", V1ALPHA1, "v1alpha1"),
])
def test_export_returns_yaml_with_a_filename(viewer_api, two_revisions, param, api_version, suffix):
    response = viewer_api.get(f"/api/graphs/alpha/export/{param}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/yaml")
    assert response["Content-Disposition"] == f'attachment; filename="alpha-r2-{suffix}.yaml"'
    obj = yaml.safe_load(response.content)
    assert obj == render(Graph.objects.get(name="alpha").head.graph_spec, api_version)


def test_export_of_an_older_revision_names_it_in_the_filename(viewer_api, two_revisions):
    response = viewer_api.get("/api/graphs/alpha/export/?revision=1")
    assert response["Content-Disposition"] == 'attachment; filename="alpha-r1-v1beta1.yaml"'
    obj = yaml.safe_load(response.content)
    assert next(c for c in obj["spec"]["components"] if c["name"] == "decode")["replicas"] == 1


def test_export_refuses_an_unknown_api_version(viewer_api, two_revisions):
    assert viewer_api.get("/api/graphs/alpha/export/?apiVersion=v3").status_code == 400


# ------------------------------------------------------------------------------- import


def test_import_creates_a_graph_then_adds_a_revision(operator_api, reference_dir, users):
    text = (reference_dir / "seed-disagg.yaml").read_text()
    response = operator_api.post("/api/graphs/import/", data=text.encode(), content_type="application/yaml")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["revision"], body["dynamo_version"]) == ("vllm-disagg", 1, "0.5.1")
    revision = Revision.objects.get()
    assert revision.source_yaml == text
    assert revision.source_api_version == V1ALPHA1
    assert revision.created_by == users["operator"]
    assert render(revision.graph_spec, V1ALPHA1) == yaml.safe_load(text)

    changed = text.replace("replicas: 2", "replicas: 3", 1)
    response = operator_api.post("/api/graphs/import/", data=changed.encode(), content_type="application/yaml")
    assert response.status_code == 200
    assert response.json()["revision"] == 2
    assert Graph.objects.count() == 1
    assert render(Graph.objects.get().head.graph_spec, V1ALPHA1) == yaml.safe_load(changed)


def test_import_of_a_v1beta1_template_and_a_target_release(operator_api, reference_dir):
    body = (reference_dir / "dgd-templates-1.6.1" / "sglang-disagg.yaml").read_bytes()
    response = operator_api.post("/api/graphs/import/?dynamoVersion=1.5.1", data=body, content_type="text/yaml")
    assert response.status_code == 201
    assert response.json()["backend"] == "sglang"
    assert response.json()["dynamo_version"] == "1.5.1"


def test_import_refuses_a_manifest_with_operational_errors_only_if_structural(operator_api, reference_dir):
    # The seed targeted at 1.6.1 has an operational error (flag_removed): it is stored, and
    # the error is reported when it is rendered or applied.
    body = (reference_dir / "seed-disagg.yaml").read_bytes()
    response = operator_api.post("/api/graphs/import/?dynamoVersion=1.6.1", data=body,
                                 content_type="application/yaml")
    assert response.status_code == 201
    assert response.json()["dynamo_version"] == "1.6.1"


def test_validate_endpoint_reports_without_storing(operator_api, reference_dir):
    body = (reference_dir / "seed-disagg.yaml").read_bytes()
    response = operator_api.post("/api/validate/?dynamoVersion=1.6.1", data=body, content_type="application/yaml")
    assert response.status_code == 200
    payload = response.json()
    assert payload["valid"] is False
    assert payload["graph"] == "vllm-disagg"
    assert payload["dynamo_version"] == "1.6.1"
    # dynamo.vllm 1.6.1 refuses the removed flag and a prefill worker without --kv-transfer-config.
    assert [f["code"] for f in payload["findings"] if f["severity"] == "error"] == [
        "flag_removed", "kv_transfer_config_missing"]
    assert Graph.objects.count() == 0


def test_a_viewer_can_validate_a_manifest_through_the_api_as_on_the_page(viewer_api, reference_dir):
    body = (reference_dir / "seed-disagg.yaml").read_bytes()
    assert viewer_api.post("/api/validate/", data=body, content_type="application/yaml").status_code == 200


# ------------------------------------------------------------------------ from-template


def test_from_template_creates_a_graph(operator_api):
    response = operator_api.post("/api/graphs/from-template/", {
        "template": "vllm-disagg", "name": "tpl", "dynamo_version": "0.5.1", "namespace": "team-a",
        "prefill": {"replicas": 2, "shared_memory": "8Gi"}, "decode": {"replicas": 3, "engine_args": "--block-size 16"},
    }, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["revision"] == 1
    spec = Graph.objects.get(name="tpl").head.graph_spec
    assert spec.namespace == "team-a"
    assert spec.dynamo_version == "0.5.1"
    assert spec.service("prefill").replicas == 2
    assert spec.service("prefill").shared_memory == "8Gi"
    assert spec.service("prefill").args[-1] == "--is-prefill-worker"
    assert spec.service("decode").args == ["--model", "Qwen/Qwen3-0.6B", "--block-size", "16"]
    assert Graph.objects.get(name="tpl").head.message == "created from template vllm-disagg"


@pytest.mark.parametrize(("payload", "field"), [
    ({"template": "nope", "name": "x"}, "template"),
    ({"template": "vllm-disagg", "name": "Bad_Name"}, "name"),
    ({"template": "vllm-disagg", "name": "x", "dynamo_version": "latest"}, "dynamo_version"),
    ({"template": "vllm-disagg", "name": "x", "prefill": {"replicas": 100000}}, "prefill"),
    ({"template": "vllm-disagg", "name": "x", "decode": {"engine_args": "--x 'unclosed"}}, "decode"),
    ({"template": "vllm-disagg", "name": "x", "backend": "tensorflow"}, "backend"),
])
def test_from_template_refuses_bad_fields_with_400(operator_api, payload, field):
    response = operator_api.post("/api/graphs/from-template/", payload, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert field in body or (field == "spec" and "findings" in body), body
    assert Graph.objects.count() == 0


def test_from_template_with_a_taken_name_is_409(operator_api):
    make_graph("taken")
    response = operator_api.post("/api/graphs/from-template/", {"template": "vllm-agg", "name": "taken"}, format="json")
    assert response.status_code == 409


def test_templates_are_listed(viewer_api):
    templates = viewer_api.get("/api/templates/").json()
    assert [t["key"] for t in templates] == ["vllm-disagg", "vllm-agg", "sglang-disagg", "trtllm-disagg",
                                             "vllm-agg-kv", "mocker-agg-kv", "mocker-disagg"]
    modes = {t["key"]: t["router_mode"] for t in templates}
    assert modes["mocker-agg-kv"] == modes["vllm-agg-kv"] == "kv" and modes["vllm-disagg"] == "round-robin"


# ------------------------------------------------------------------------------- OpenAPI


def test_the_schema_is_an_openapi_3_document_listing_the_graph_paths(viewer_api):
    response = viewer_api.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"] == "Dynamo Control Plane API"
    paths = schema["paths"]
    for path in ["/api/graphs/", "/api/graphs/{name}/", "/api/graphs/{name}/render/", "/api/graphs/{name}/export/",
                 "/api/graphs/{name}/diff/", "/api/graphs/{name}/revisions/", "/api/graphs/{name}/revisions/{number}/",
                 "/api/graphs/import/", "/api/graphs/from-template/", "/api/validate/", "/api/templates/"]:
        assert path in paths, path
    assert set(paths["/api/graphs/{name}/"]) >= {"get", "put", "delete"}
    assert "patch" not in paths["/api/graphs/{name}/"]
    assert "application/yaml" in paths["/api/graphs/import/"]["post"]["requestBody"]["content"]
    assert "application/yaml" in paths["/api/graphs/{name}/export/"]["get"]["responses"]["200"]["content"]
    parameters = {p["name"] for p in paths["/api/graphs/{name}/render/"]["get"]["parameters"]}
    assert {"name", "apiVersion", "revision", "dynamoVersion"} <= parameters


def test_the_schema_is_served_as_yaml_by_default(viewer_api):
    response = viewer_api.get("/api/schema/")
    assert response.status_code == 200
    assert yaml.safe_load(response.content)["openapi"].startswith("3.")


# ---------------------------------------------------------------------- authentication


def test_token_authentication_identifies_the_user(api_for, users):
    from accounts.models import ApiToken

    response = api_for("operator").post("/api/graphs/", {"spec": spec_json("tok")}, format="json")
    assert response.status_code == 201
    assert Graph.objects.get(name="tok").created_by == users["operator"]
    assert ApiToken.objects.filter(user=users["operator"]).count() == 1


def test_a_wrong_token_is_401(api_for, db):
    client = api_for(None)
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert client.get("/api/graphs/").status_code == 401


@pytest.mark.parametrize(("method", "path"), [
    ("get", "/api/graphs/"), ("get", "/api/graphs/alpha/"), ("post", "/api/graphs/"),
    ("post", "/api/graphs/import/"), ("post", "/api/validate/"), ("get", "/api/graphs/alpha/export/"),
    ("delete", "/api/graphs/alpha/"),
])
def test_anonymous_requests_are_refused(api_for, method, path, db):
    make_graph("alpha")
    response = getattr(api_for(None), method)(path)
    assert response.status_code in (401, 403)
    assert Graph.objects.count() == 1


def test_a_user_without_a_role_gets_403_even_for_reads(api_for):
    make_graph("alpha")
    client = api_for("norole")
    assert client.get("/api/graphs/").status_code == 403
    assert client.get("/api/graphs/alpha/").status_code == 403


def test_a_viewer_reads_but_cannot_write(viewer_api, reference_dir):
    make_graph("alpha")
    assert viewer_api.get("/api/graphs/alpha/render/").status_code == 200
    assert viewer_api.post("/api/graphs/", {"spec": spec_json("v")}, format="json").status_code == 403
    assert viewer_api.put("/api/graphs/alpha/", {"spec": spec_json()}, format="json").status_code == 403
    assert viewer_api.delete("/api/graphs/alpha/").status_code == 403
    body = (reference_dir / "seed-disagg.yaml").read_bytes()
    assert viewer_api.post("/api/graphs/import/", data=body, content_type="application/yaml").status_code == 403
    assert viewer_api.post("/api/graphs/from-template/", {"template": "vllm-agg", "name": "v"},
                           format="json").status_code == 403
    assert viewer_api.post("/api/graphs/alpha/apply/", {}, format="json").status_code == 403
    assert Graph.objects.count() == 1 and Revision.objects.count() == 1


def test_an_admin_can_do_what_an_operator_can(api_for):
    response = api_for("admin").post("/api/graphs/", {"spec": spec_json("adm")}, format="json")
    assert response.status_code == 201
    assert api_for("admin").delete("/api/graphs/adm/").status_code == 204


def test_an_operator_can_request_an_apply(operator_api, users):
    from graphs.models import Operation

    make_graph("alpha")
    response = operator_api.post("/api/graphs/alpha/apply/", {"dry_run": True}, format="json")
    assert response.status_code == 202, response.content
    op = Operation.objects.get()
    assert (op.kind, op.state, op.via, op.requested_by) == ("apply", "pending", "api", users["operator"])
    assert op.params == {"runtime": "local", "apiVersion": V1BETA1, "dryRun": True}
    # 202 Accepted says where to follow it, and that URL is the operation.
    assert response["Location"] == f"/api/operations/{op.pk}/"
    assert operator_api.get(response["Location"]).json()["id"] == op.pk == response.json()["id"]


def test_every_verb_that_queues_an_operation_answers_202_with_its_location(operator_api):
    from graphs.models import Deployment, Operation

    alpha = make_graph("alpha")
    Deployment.objects.create(graph=alpha, runtime="local", revision=alpha.head, active=True, state="ready")
    for url, body in [("/api/graphs/alpha/scale/", {"service": "decode", "replicas": 2}),
                      ("/api/graphs/alpha/undeploy/", {})]:
        response = operator_api.post(url, body, format="json")
        assert response.status_code == 202, (url, response.content)
        op = Operation.objects.latest("pk")
        assert response["Location"] == f"/api/operations/{op.pk}/"
        Operation.objects.filter(pk=op.pk).update(state="succeeded")  # one operation at a time per graph


def test_the_status_answer_is_what_the_schema_describes(viewer_api):
    """The status action goes through its serializer: the OpenAPI schema names every key it sends."""
    import yaml

    make_graph("alpha")
    body = viewer_api.get("/api/graphs/alpha/status/").json()
    schema = yaml.safe_load(viewer_api.get("/api/schema/").content)
    component = schema["components"]["schemas"]["GraphStatus"]
    assert set(body) == set(component["properties"])
    assert (body["deployed"], body["pods"], body["state"]) == (False, [], "not_deployed")
    pod_fields = set(schema["components"]["schemas"]["Pod"]["properties"])
    assert {"name", "phase", "ready", "restarts", "shm_bytes", "shm_requested_bytes"} <= pod_fields


def test_a_session_login_works_for_the_api_too(client_for):
    make_graph("alpha")
    response = client_for("viewer").get("/api/graphs/alpha/")
    assert response.status_code == 200
    assert import_manifest(render(Graph.objects.get().head.graph_spec)).name == "alpha"


def test_a_missing_object_is_a_404_that_names_what_was_asked_for(viewer_api):
    make_graph("alpha")
    cases = {"/api/graphs/nosuch/": "no graph with name 'nosuch'",
             "/api/graphs/alpha/revisions/99/": "no revision with name 'alpha', number 99",
             "/api/operations/424242/": "no operation with id 424242"}
    for url, message in cases.items():
        response = viewer_api.get(url)
        assert response.status_code == 404, url
        assert response.json() == {"detail": message}
    assert viewer_api.get("/api/graphs/no-such-route/frobnicate/").status_code == 404


def test_the_browsable_api_renders_every_get_endpoint_of_a_graph_without_an_error(api_for):
    """What a person sees opening an API URL in a browser: DRF's HTML page, with the forms for
    the methods the view allows (the graph's PUT form is built from its update serializer)."""
    graph = make_graph("alpha")
    services.graph_update(graph=graph, spec=build_spec(template="vllm-disagg", name="alpha",
                                                       decode=PoolFields(replicas=2)))
    api = api_for("operator")
    schema = yaml.safe_load(api.get("/api/schema/").content)
    values = {"name": "alpha", "number": "1"}
    seen = 0
    for path, methods in schema["paths"].items():
        if "get" not in methods or not path.startswith("/api/graphs/{name}/"):
            continue
        url = path.format(**{key: values.get(key, "1") for key in ("name", "number", "pod")})
        response = api.get(url, HTTP_ACCEPT="text/html")
        assert response.status_code < 500, (url, response.content[:300])
        seen += 1
    assert seen >= 5
    page = api.get("/api/graphs/alpha/", HTTP_ACCEPT="text/html")
    assert page.status_code == 200
    assert b'name="_content"' in page.content  # the raw PUT form is there
