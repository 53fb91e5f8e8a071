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


# -- fields: unknown ones refused, the ones a GET gave back taken ----------------------------------------
def test_an_unknown_field_is_refused_naming_it_and_the_fields_the_request_takes(api_for, graph):
    answer = api_for("operator").post(f"/api/graphs/{graph.name}/scale/", {"service": "decode", "replica": 2},
                                      format="json")
    assert answer.status_code == 400, answer.content
    message = answer.json()["replica"][0]
    assert message.startswith("unknown field") and "replicas" in message


def test_a_cluster_read_changed_and_put_back_whole_is_taken(api_for):
    Cluster.objects.create(name="round", in_cluster=True, namespaces=["llm"])
    api = api_for("admin")
    body = api.get("/api/clusters/round/").json()
    assert "reachable" in body  # read-only fields come back with the object
    body["description"] = "changed"
    answer = api.put("/api/clusters/round/", body, format="json")
    assert answer.status_code == 200, answer.content
    assert Cluster.objects.get(name="round").description == "changed"


def test_every_request_body_of_a_serializer_is_closed_in_the_schema(schema):
    bodies = {name: body for name, body in schema["components"]["schemas"].items() if name.endswith("Request")}
    assert len(bodies) > 20
    assert all(body.get("additionalProperties") is False for body in bodies.values() if body.get("type") == "object")


@pytest.mark.parametrize("body,field,words", [
    ({"service": "decode", "replicas": "2"}, "replicas", "must be an integer"),
    ({"service": "decode", "replicas": True}, "replicas", "must be an integer"),
])
def test_a_number_given_as_text_or_a_boolean_is_refused(api_for, graph, body, field, words):
    answer = api_for("operator").post(f"/api/graphs/{graph.name}/scale/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert words in answer.json()[field][0]


def test_a_price_is_given_as_decimal_text_not_a_json_number(api_for, graph):
    api = api_for("admin")
    path = f"/api/metrics/graphs/{graph.name}/objectives/"
    refused = api.patch(path, {"gpu_hour_price": 2.5}, format="json")
    assert refused.status_code == 400 and "like \"2.50\"" in refused.json()["gpu_hour_price"][0]
    assert api.patch(path, {"gpu_hour_price": "2.50"}, format="json").status_code == 200


# -- exact spellings the schema lists -------------------------------------------------------------------
@pytest.mark.parametrize("version,status", [("v1alpha1", 200), ("nvidia.com/v1beta1", 200), ("", 200),
                                            ("%", 400), (" v1beta1", 400), ("V1BETA1", 400)])
def test_api_version_is_one_of_the_spellings_the_schema_lists(schema, api_for, graph, version, status):
    enum = _parameter(schema, "/api/graphs/{name}/render/", "get", "apiVersion")["enum"]
    assert (version in enum) == (status == 200)
    answer = api_for("viewer").get(f"/api/graphs/{graph.name}/render/", {"apiVersion": version})
    assert answer.status_code == status, answer.content


def test_with_benchmarks_is_true_or_false_never_an_empty_value_read_as_false(api_for, graph):
    api = api_for("operator")
    assert api.delete(f"/api/graphs/{graph.name}/?with_benchmarks=").status_code == 400
    assert api.delete(f"/api/graphs/{graph.name}/?with_benchmarks=yes").status_code == 400
    assert api.delete(f"/api/graphs/{graph.name}/?with_benchmarks=false").status_code in (200, 202, 204)


def test_the_planner_timelines_window_is_what_the_schema_states(schema, api_for, graph):
    import re

    pattern = _parameter(schema, "/api/graphs/{name}/planner/", "get", "window")["pattern"]
    assert re.search(pattern, "1h") and not re.search(pattern, "1w")
    answer = api_for("viewer").get(f"/api/graphs/{graph.name}/planner/?window=1w")
    assert answer.status_code == 400 and "window" in answer.json()


@pytest.mark.parametrize("image", ["nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1\n", "registry.example/x:tä g",
                                   "registry.example/x:täg"])
def test_an_image_reference_is_distributions_grammar_with_an_ascii_tag_and_nothing_after(api_for, image):
    body = {"template": "mocker-disagg", "name": "imaged", "backend": "mocker", "decode": {"image": image}}
    answer = api_for("operator").post("/api/graphs/from-template/", body, format="json")
    assert answer.status_code == 400, answer.content


# -- 422: the request as the schema states it, refused for what it says ------------------------------------
def test_every_write_documents_422(schema):
    writes = [op for item in schema["paths"].values() for method, op in item.items()
              if method in ("post", "put", "patch", "delete")]
    assert writes and all("422" in op["responses"] for op in writes)


def test_a_planner_whose_thresholds_cross_is_refused_with_422_saying_which(api_for):
    body = {"template": "mocker-disagg", "name": "crossed", "backend": "mocker",
            "planner": {"optimization_target": "load", "prefill_scale_up_queue_tokens": 0,
                        "prefill_scale_down_queue_tokens": 0}}
    answer = api_for("operator").post("/api/graphs/from-template/", body, format="json")
    assert answer.status_code == 422, answer.content
    assert "prefill_scale_up_queue_tokens" in answer.json()["detail"]


def test_a_study_of_one_shape_asked_for_is_refused_with_422(api_for, graph):
    answer = api_for("operator").post("/api/benchmarks/studies/", {"graph": graph.name, "arms": ["p1d1", "p1d1"]},
                                      format="json")
    assert answer.status_code in (409, 422), answer.content  # 409 while the graph is not serving
    if answer.status_code == 422:
        assert "different shapes" in answer.json()["arms"][0]


def test_the_price_pattern_takes_exactly_the_decimals_the_server_takes(schema, api_for, graph):
    import re

    pattern = schema["components"]["schemas"]["PatchedObjectivesRequest"]["properties"]["gpu_hour_price"]["pattern"]
    api = api_for("admin")
    path = f"/api/metrics/graphs/{graph.name}/objectives/"
    for text in ("-", ".", "5.", ".5", "0.0001", "10000", "10000.01", "-0", "1.23456", ""):
        stated = re.search(pattern, text) is not None
        answer = api.patch(path, {"gpu_hour_price": text}, format="json")
        assert (answer.status_code == 200) == stated, (text, stated, answer.content)


def test_a_study_arm_is_a_shape_as_the_schema_states_it_and_its_counts_are_content(schema, api_for, graph):
    """Found by schemathesis: the schema took any text of 12 characters as an arm and the server
    then refused "0" with a 400, so valid data was rejected."""
    import re

    arm = schema["components"]["schemas"]["StudyCreateRequest"]["properties"]["arms"]["items"]
    assert re.search(arm["pattern"], "p2d1") and re.search(arm["pattern"], "AGG3")
    assert not re.search(arm["pattern"], "0")
    api = api_for("operator")
    not_a_shape = api.post("/api/benchmarks/studies/", {"graph": graph.name, "arms": ["0", "p1d1"]}, format="json")
    assert not_a_shape.status_code == 400, not_a_shape.content
    assert "p<prefill>d<decode>" in str(not_a_shape.json()["arms"])
    out_of_bounds = api.post("/api/benchmarks/studies/", {"graph": graph.name, "arms": ["p0d1", "p1d1"]},
                             format="json")
    assert out_of_bounds.status_code == 422, out_of_bounds.content
    assert "every pool needs 1 to" in str(out_of_bounds.json())
