"""A setting is declared once, in core's pydantic model: the create form's field and the API's
are made from that declaration (graphs/pydantic_fields.py), bounds, default, choices and words."""

from __future__ import annotations

from typing import Literal

import pytest
from django import forms
from pydantic import BaseModel, Field

from core.planner_config import TARGETS, PlannerSettings
from graphs.api.template_serializers import PlannerSettingsSerializer
from graphs.forms import TemplateForm
from graphs.pydantic_fields import form_fields, serializer_class


class Knobs(BaseModel):
    mode: Literal["fast", "slow"] = Field(default="fast", title="Mode", description="how it runs")
    rate: float = Field(default=0.5, gt=0, lt=1, title="Rate")
    count: int | None = Field(default=None, ge=2, le=9, title="Count", description="optional")
    steps: int = Field(default=3, gt=0, title="Steps")


def _api(cls, data):
    s = cls(data=data)
    return s.is_valid(), (s.validated_data if s.is_valid() else s.errors)


def test_a_model_s_fields_become_form_and_api_fields_with_its_bounds_and_words():
    made = form_fields(Knobs, prefix="k_")
    assert list(made) == ["k_mode", "k_rate", "k_count", "k_steps"]
    assert isinstance(made["k_mode"], forms.ChoiceField) and [c for c, _ in made["k_mode"].choices] == ["fast", "slow"]
    assert (made["k_mode"].label, made["k_mode"].help_text, made["k_mode"].initial) == ("Mode", "how it runs", "fast")
    assert (made["k_count"].min_value, made["k_count"].max_value, made["k_count"].initial) == (2, 9, None)
    assert made["k_steps"].min_value == 1  # gt=0 on an integer: 1 and up

    class KnobsForm(forms.Form):
        pass

    form = KnobsForm(data={"k_rate": "0", "k_count": "10", "k_steps": "0", "k_mode": "medium"})
    form.fields.update(made)
    assert not form.is_valid()
    assert form.errors["k_rate"] == ["Ensure this value is greater than 0."]
    assert form.errors["k_count"] == ["Ensure this value is less than or equal to 9."]
    assert form.errors["k_steps"] == ["Ensure this value is greater than or equal to 1."]
    assert "medium is not one of the available choices" in form.errors["k_mode"][0]

    api = serializer_class(Knobs, "KnobsSerializer", doc="knobs", module=__name__)
    assert _api(api, {}) == (True, {"mode": "fast", "rate": 0.5, "steps": 3})  # optional ones absent
    ok, errors = _api(api, {"rate": 1, "count": 1, "steps": 0})
    assert not ok
    assert errors["rate"] == ["Ensure this value is less than 1."]
    assert errors["count"] == ["Ensure this value is greater than or equal to 2."]
    assert errors["steps"] == ["Ensure this value is greater than or equal to 1."]
    assert _api(api, {"rate": 0.999, "count": 9}) == (True, {"mode": "fast", "rate": 0.999, "count": 9, "steps": 3})


def test_every_planner_setting_is_in_the_form_and_the_api_as_the_model_declares_it():
    form = TemplateForm()
    api = PlannerSettingsSerializer()
    for name, info in PlannerSettings.model_fields.items():
        field, wire = form.fields[f"planner_{name}"], api.fields[name]
        default = info.get_default()
        assert field.initial == default and field.label == info.title, name
        assert (wire.default if default is not None else None) == default, name
        if name == "optimization_target":
            assert [c for c, _ in field.choices] == list(wire.choices) == list(TARGETS)
        else:
            assert (field.min_value, field.max_value) == (wire.min_value, wire.max_value), name


@pytest.mark.parametrize("value, accepted", [(0, False), (-1, False), (0.0005, True)])
def test_a_latency_target_just_above_zero_is_the_planner_s_and_so_the_api_s(value, accepted):
    assert PlannerSettingsSerializer(data={"ttft_ms": value}).is_valid() is accepted
    form = TemplateForm(data={"planner_enabled": "on", "planner_ttft_ms": str(value)})
    form.is_valid()
    assert ("planner_ttft_ms" in form.errors) is not accepted


def test_a_field_of_a_type_no_form_can_hold_is_refused_when_declared():
    class Odd(BaseModel):
        tags: list[str] = []

    with pytest.raises(TypeError, match="no form field"):
        form_fields(Odd)
    with pytest.raises(TypeError, match="no form field"):
        serializer_class(Odd, "OddSerializer", doc="", module=__name__)


def test_the_engines_are_declared_once_and_the_type_names_the_same_ones():
    import typing

    from core.facts import ENGINES
    from core.spec import Engine
    from graphs.api.template_serializers import FromTemplateSerializer

    assert set(typing.get_args(Engine)) == set(ENGINES)
    assert [c for c, _ in TemplateForm().fields["backend"].choices] == list(ENGINES)
    assert list(FromTemplateSerializer().fields["backend"].choices) == ["", *ENGINES]


def test_a_pod_s_columns_are_declared_once_by_what_runtimes_report():
    from dataclasses import fields

    from graphs.api.serializers import PodSerializer
    from graphs.models import Pod
    from graphs.runtimes.base import POD_COLUMNS, PodStatus
    from graphs.status_cache import POD_FIELDS

    stored = {f.name for f in Pod._meta.concrete_fields}
    assert set(POD_COLUMNS) == {f.name for f in fields(PodStatus)} and set(POD_COLUMNS) <= stored
    assert set(POD_FIELDS) == set(POD_COLUMNS) - {"name"} | {"updated_at"}  # every reading is rewritten
    shown = set(PodSerializer().fields)
    assert shown == set(POD_COLUMNS) - {"last_log"} | {"shm_requested_bytes", "updated_at"}


@pytest.mark.parametrize("known, text, read", [
    (True, "1.6.1", "1.6.1"), (True, "v1.6.0", "1.6.0"), (True, "1.6.7", None), (True, "9.9.9", None),
    (False, "9.9.9", "9.9.9"), (False, "v1.7.0", "1.7.0"), (False, "1.6", None), (False, "latest", None),
])
def test_a_dynamo_version_reads_the_same_in_a_form_and_the_api(known, text, read):
    from graphs.version_fields import DynamoVersionField, DynamoVersionFormField

    api = DynamoVersionField(known=known)
    form = DynamoVersionFormField(known=known)
    if read is None:
        with pytest.raises(Exception) as api_error:
            api.run_validation(text)
        with pytest.raises(forms.ValidationError) as form_error:
            form.clean(text)
        assert type(api_error.value).__name__ == "ValidationError" and form_error.value.messages
    else:
        assert api.run_validation(text) == form.clean(text) == read
