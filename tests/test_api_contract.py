"""The API does what its schema says (scripts/api_schemathesis.sh runs schemathesis on it; these
pin what each fix made true): JSON types as stated, bounds the server enforces stated in the
schema, a conflict with the current state answered 409, every status an operation can give
documented."""

from __future__ import annotations

import pytest
from django.conf import settings
from drf_spectacular.generators import SchemaGenerator

from clusters.models import Cluster
from core.catalog import PoolFields, build_spec
from graphs import services
from sizing.models import Estimate

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def _parameter(schema, path, method, name):
    operation = schema["paths"][path][method]
    return next(p for p in operation["parameters"] if p["name"] == name)["schema"]


@pytest.fixture
def graph(users):
    spec = build_spec(template="mocker-disagg", name="contract", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    return services.graph_create(spec=spec, user=users["admin"])


# -- JSON types as the schema states them -------------------------------------------------------------
@pytest.mark.parametrize("field,value", [("webhook_secret", 0), ("password", 12), ("branch", ["main"]),
                                         ("ssh_key", True)])
def test_a_text_field_given_a_json_number_or_list_is_refused_naming_it(api_for, field, value):
    body = {"name": "typed", "url": "https://git.example.com/team/graphs.git", field: value}
    answer = api_for("admin").post("/api/repos/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert "must be text" in answer.json()[field][0]


@pytest.mark.parametrize("field", ["force", "recreate", "dry_run"])
def test_a_boolean_given_0_or_text_is_refused_naming_it(api_for, graph, field):
    api = api_for("operator")
    for value in (0, "true"):
        answer = api.post(f"/api/graphs/{graph.name}/apply/", {"runtime": "local", field: value}, format="json")
        assert answer.status_code == 400, answer.content
        assert "must be true or false" in answer.json()[field][0]


def test_query_strings_and_forms_still_read_text_as_drf_does(api_for, graph):
    # ?with_benchmarks=true is text by nature: not refused for its type.
    answer = api_for("operator").delete(f"/api/graphs/{graph.name}/?with_benchmarks=true")
    assert answer.status_code in (200, 202, 204), answer.content


# -- the state, not the request: 409 ------------------------------------------------------------------
def test_renaming_a_cluster_to_a_taken_name_is_a_conflict(api_for):
    for name in ("first", "second"):
        Cluster.objects.create(name=name, in_cluster=True, namespaces=["llm"])
    answer = api_for("admin").patch("/api/clusters/second/", {"name": "first"}, format="json")
    assert answer.status_code == 409, answer.content
    assert "already registered" in answer.json()["detail"]


def test_a_graph_from_an_estimate_that_did_not_finish_is_a_conflict(api_for):
    estimate = Estimate.objects.create(inputs={"model": "m"}, input_key="k", state="failed")
    answer = api_for("operator").post(f"/api/sizing/estimates/{estimate.pk}/graph/", {"name": "from-failed"},
                                      format="json")
    assert answer.status_code == 409, answer.content
    assert "finished estimate" in answer.json()["detail"]


# -- bounds and answers the schema states ---------------------------------------------------------------
def test_integer_query_parameters_carry_the_bounds_the_server_enforces(schema, api_for, graph):
    for path, name, maximum in (("/api/graphs/{name}/render/", "revision", 2**63 - 1),
                                ("/api/graphs/{name}/diff/", "from_revision", 2**63 - 1),
                                ("/api/graphs/{name}/pods/{pod}/log/", "lines", 5000)):
        stated = _parameter(schema, path, "get", name)
        assert (stated["minimum"], stated["maximum"]) == (1, maximum), (path, stated)
    # and the server refuses exactly outside them
    api = api_for("viewer")
    assert api.get(f"/api/graphs/{graph.name}/render/?revision=0").status_code == 400
    assert api.get(f"/api/graphs/{graph.name}/render/?revision=1").status_code == 200


def test_an_empty_dynamo_version_is_the_graphs_own_as_the_schema_says(schema, api_for, graph):
    import re

    pattern = _parameter(schema, "/api/graphs/{name}/export/", "get", "dynamoVersion")["pattern"]
    assert re.match(pattern, "") and re.match(pattern, "1.6.1") and not re.match(pattern, "1.6")
    api = api_for("viewer")
    for path in ("export", "render", "validate"):
        assert api.get(f"/api/graphs/{graph.name}/{path}/?dynamoVersion=").status_code == 200, path
        assert api.get(f"/api/graphs/{graph.name}/{path}/?dynamoVersion=1.6").status_code == 400, path


def test_the_yaml_export_is_described_as_the_document_it_is(schema):
    content = schema["paths"]["/api/graphs/{name}/export/"]["get"]["responses"]["200"]["content"]
    assert {"type": "object"} in content["application/yaml"]["schema"]["anyOf"]


def test_the_hf_token_secrets_cluster_failure_is_documented(schema):
    assert "502" in schema["paths"]["/api/clusters/{name}/hf-token/"]["post"]["responses"]


def test_run_parameters_state_runparams_bounds_and_the_hosts_limits(schema):
    body = schema["components"]["schemas"]["RunCreateRequest"]["properties"]
    assert body["max_seconds"]["maximum"] == settings.BENCHMARK_MAX_SECONDS
    assert body["concurrency"]["maximum"] == settings.BENCHMARK_MAX_CONCURRENCY
    assert body["warmup_requests"]["maximum"] == 1000
    assert body["seed"]["maximum"] == 2**31 - 1


def test_a_secret_for_a_cluster_whose_settings_cannot_load_is_a_conflict_not_a_server_error(api_for):
    Cluster.objects.create(name="broken", kubeconfig="not: [a kubeconfig", namespaces=["llm"])
    answer = api_for("admin").post("/api/clusters/broken/hf-token/", {"namespace": "llm", "value": "hf_x"},
                                   format="json")
    assert answer.status_code == 409, answer.content
    assert "cannot load the connection settings of cluster broken" in answer.json()["detail"]


def test_the_log_of_a_pod_the_graph_does_not_have_is_not_found(api_for, graph):
    answer = api_for("viewer").get(f"/api/graphs/{graph.name}/pods/nosuch-0/log/")
    assert answer.status_code == 404, answer.content
    assert "has no pod 'nosuch-0'" in answer.json()["detail"]
