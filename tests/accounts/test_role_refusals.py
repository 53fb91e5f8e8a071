"""A refusal for want of a role says which role the request needs, and which one the caller has
(a bare "You do not have permission" sends the user to guess)."""

import pytest

pytestmark = pytest.mark.django_db


def test_an_api_write_refused_to_a_viewer_names_the_operator_role(api_for):
    response = api_for("viewer").post("/api/graphs/from-template/", {"template": "mocker-disagg", "name": "g"},
                                      format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "This needs the operator role; you have the viewer role."


def test_an_admin_only_api_call_refused_to_an_operator_names_the_admin_role(api_for):
    response = api_for("operator").get("/api/audit/")
    assert response.status_code == 403
    assert response.json()["detail"] == "This needs the admin role; you have the operator role."
