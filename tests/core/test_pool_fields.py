"""A pool's fields (replicas, GPUs, shared memory, image, engine arguments, token Secret) are
declared once, in core.pool: the create form and the API's from-template pool are made from that
declaration, and each value is judged by its one check, whose message both show at the field."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.pool import FIELD, POOL_FIELDS, PoolFields
from core.spec import Service
from graphs.forms import TemplateForm
from graphs.models import Graph
from tests.graphs.test_pages import form_data, make_graph

BAD_VALUES = [
    ("replicas", -1, "Ensure this value is greater than or equal to 0."),
    ("replicas", 513, "Ensure this value is less than or equal to 512."),
    ("gpus", 65, "Ensure this value is less than or equal to 64."),
    ("shared_memory", "plenty", "'plenty' is not a Kubernetes quantity (e.g. 16Gi, 512Mi)"),
    ("shared_memory", "-1Gi", "shared memory cannot be negative"),
    ("image", "r/" + "i" * 299, "Ensure this value has at most 300 characters (it has 301)."),
    ("engine_args", "--x 'unclosed", "engine arguments cannot be parsed: No closing quotation"),
    ("hf_token_secret", "Not A Secret", "secret name 'Not A Secret' is not a valid Kubernetes name"),
    ("hf_token_secret", "hf..token", "secret name 'hf..token' is not a valid Kubernetes name"),
]


def test_pool_fields_holds_one_value_per_declared_field():
    assert [f.name for f in dataclasses.fields(PoolFields)] == [f.name for f in POOL_FIELDS]
    assert PoolFields() == PoolFields(**{f.name: f.default for f in POOL_FIELDS})


def test_the_form_asks_for_each_declared_field_of_each_pool():
    form = TemplateForm(initial={"template": "vllm-disagg"})
    for pool in ("prefill", "decode"):
        for field in POOL_FIELDS:
            made = form.fields[f"{pool}_{field.name}"]
            assert (made.label, made.initial) == (field.label, field.default)
    assert not any(name.startswith("prefill_") for name in TemplateForm(initial={"template": "vllm-agg"}).fields)
    page = str(form["decode_gpus"]) + str(form["decode_shared_memory"])
    assert 'min="0"' in page and 'max="64"' in page and 'maxlength="20"' in page


def test_the_api_schema_describes_each_declared_field_with_its_bounds_and_pattern(api_for, db):
    schema = json.loads(api_for("viewer").get("/api/schema/?format=json").content)
    pool = schema["components"]["schemas"]["PoolRequest"]["properties"]
    assert list(pool) == [f.name for f in POOL_FIELDS]
    assert pool["replicas"] == {"type": "integer", "minimum": 0, "maximum": 512, "default": 1}
    shm = pool["shared_memory"]
    assert shm["maxLength"] == 20
    # blank (the operator's default) or the field's own pattern
    assert shm["allOf"] == [{"pattern": f"^$|{FIELD['shared_memory'].pattern}"}]


@pytest.mark.parametrize(("field", "value", "message"), BAD_VALUES)
def test_a_bad_pool_value_gets_the_same_message_at_its_field_on_the_page_and_in_the_api(
        client_for, api_for, field, value, message):
    page = client_for("operator").post("/graphs/new/", form_data(action="create", **{f"decode_{field}": str(value)}))
    assert page.status_code == 400
    assert page.context["form"].errors[f"decode_{field}"] == [message]

    api = api_for("operator").post("/api/graphs/from-template/", {
        "template": "vllm-disagg", "name": "fresh", "decode": {field: value}}, format="json")
    assert api.status_code == 400, api.content
    assert api.json() == {"decode": {field: [message]}}
    assert Graph.objects.count() == 0


@pytest.mark.parametrize(("field", "value", "message"), BAD_VALUES)
def test_code_that_builds_a_pool_gets_the_same_check(field, value, message):
    with pytest.raises(ValueError, match=f"^{field}: ") as refused:
        PoolFields(**{field: value})
    assert str(refused.value) == f"{field}: {message}"


@pytest.mark.parametrize(("field", "value", "message"), [v for v in BAD_VALUES if v[0] in ("shared_memory",
                                                                                              "hf_token_secret")])
def test_a_manifest_value_is_judged_by_the_same_rule(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Service(name="decode", role="decode", **{field: value})


def test_scaling_through_the_api_checks_replicas_with_the_pools_own_check(api_for):
    make_graph("alpha")
    response = api_for("operator").post("/api/graphs/alpha/scale/", {"service": "decode", "replicas": 513},
                                        format="json")
    assert response.status_code == 400
    assert response.json() == {"replicas": ["Ensure this value is less than or equal to 512."]}
