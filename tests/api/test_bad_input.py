"""The bad-input corpus (tests/badinput.py) through every entry point: API import and validate,
the CLI, the HTML import form (paste and upload), the editor's live check and the YAML edit
page of an existing graph. Each refuses with a message naming the problem, stores nothing,
and never answers 500. Plus oversized bodies."""

from __future__ import annotations

import html

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from core.catalog import build_spec
from graphs import services
from graphs.models import Graph, Revision
from tests.badinput import CASES, GRAPH_NAME, PARSABLE_CASES, TEXT_CASES, UNPARSABLE_CASES, alias_bomb

TEN_MB = b"# padding\n" + b"#" * (10 * 1024 * 1024) + b"\n"


@pytest.fixture
def existing(users):
    """A graph named like the corpus manifests, so refusals must not add revisions to it."""
    return services.graph_create(spec=build_spec(template="vllm-disagg", name=GRAPH_NAME), user=users["operator"])


def stored() -> tuple[int, int]:
    return Graph.objects.count(), Revision.objects.count()


def named_in(payload: dict, expect: str) -> bool:
    texts = [payload.get("detail", "")]
    texts += [f"{f.get('path', '')} {f.get('message', '')}" for f in payload.get("findings", [])]
    return any(expect in str(t) for t in texts)


def page_text(response) -> str:
    return html.unescape(response.content.decode())


# ------------------------------------------------------------------------------- the API


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_api_import_refuses_bad_input_naming_the_problem(case, api_for, existing):
    """400 for a text that is not one readable YAML document; 422 for a document the rules refuse."""
    before = stored()
    response = api_for("operator").post("/api/graphs/import/", data=case.data, content_type="application/yaml")
    assert response.status_code == (422 if case.parsable else 400), response.content
    assert response["Content-Type"].startswith("application/json")
    payload = response.json()
    assert named_in(payload, case.expect), payload
    assert stored() == before


@pytest.mark.parametrize("case", UNPARSABLE_CASES, ids=str)
def test_the_api_validate_answers_400_for_input_that_is_not_one_yaml_document(case, api_for):
    response = api_for("operator").post("/api/validate/", data=case.data, content_type="application/yaml")
    assert response.status_code == 400, response.content
    assert named_in(response.json(), case.expect)


@pytest.mark.parametrize("case", PARSABLE_CASES, ids=str)
def test_the_api_validate_answers_200_valid_false_for_a_parsable_but_invalid_manifest(case, api_for):
    before = stored()
    response = api_for("operator").post("/api/validate/", data=case.data, content_type="application/yaml")
    assert response.status_code == 200, response.content
    payload = response.json()
    assert payload["valid"] is False
    assert payload["counts"]["error"] >= 1
    assert named_in(payload, case.expect), payload
    assert all(f["severity"] in ("error", "warning", "info") for f in payload["findings"])
    assert stored() == before


@pytest.mark.parametrize("content_type", ["application/yaml", "text/yaml", "application/x-yaml", "text/plain"])
def test_every_yaml_content_type_reaches_the_same_refusal(content_type, api_for):
    case = next(c for c in CASES if c.id == "unknown-field")
    response = api_for("operator").post("/api/graphs/import/", data=case.data, content_type=content_type)
    assert response.status_code == 422  # read, then refused for what it says
    assert named_in(response.json(), case.expect)


def test_the_api_import_refuses_a_json_body_instead_of_yaml(api_for):
    response = api_for("operator").post("/api/graphs/import/", data={"apiVersion": "x"}, format="json")
    assert response.status_code in (400, 415)
    assert Graph.objects.count() == 0


def test_a_10_mb_body_to_the_api_import_is_refused_with_400(api_for):
    response = api_for("operator").post("/api/graphs/import/", data=TEN_MB, content_type="application/yaml")
    assert response.status_code == 400
    assert "limit" in response.json()["detail"]
    assert Graph.objects.count() == 0


def test_a_10_mb_body_to_the_api_validate_is_refused_with_400(api_for):
    response = api_for("operator").post("/api/validate/", data=TEN_MB, content_type="application/yaml")
    assert response.status_code == 400
    assert "limit" in response.json()["detail"]


def test_a_10_mb_json_body_to_the_api_create_is_refused_with_400(api_for):
    response = api_for("operator").post("/api/graphs/", data=b'{"spec": "' + TEN_MB + b'"}',
                                        content_type="application/json")
    assert response.status_code == 400
    assert Graph.objects.count() == 0


def test_a_bad_dynamo_version_parameter_is_a_400(api_for, reference_dir):
    body = (reference_dir / "seed-disagg.yaml").read_bytes()
    response = api_for("operator").post("/api/graphs/import/?dynamoVersion=latest", data=body,
                                        content_type="application/yaml")
    assert response.status_code == 400
    assert "dynamoVersion" in response.json()
    assert Graph.objects.count() == 0


def test_a_yaml_alias_bomb_is_refused_by_the_api_import(api_for):
    text = alias_bomb(6)  # ~600 bytes that expand to a million strings (about 6 MB of JSON)
    assert len(text) < 1000
    response = api_for("operator").post("/api/graphs/import/", data=text.encode(), content_type="application/yaml")
    assert response.status_code == 400
    assert Graph.objects.count() == 0


# ----------------------------------------------------------------------------- the pages


@pytest.mark.parametrize("case", TEXT_CASES, ids=str)
def test_the_import_form_refuses_a_pasted_bad_manifest_with_400(case, client_for, existing):
    before = stored()
    response = client_for("operator").post("/graphs/import/", {"yaml": case.body})
    assert response.status_code == 400
    expect = "paste a manifest or choose a file" if not case.body.strip() else case.expect
    assert expect in page_text(response)
    assert stored() == before


@pytest.mark.parametrize("case", [c for c in CASES if c.data], ids=str)
def test_the_import_form_refuses_an_uploaded_bad_manifest_with_400(case, client_for, existing):
    before = stored()
    upload = SimpleUploadedFile(f"{case.id}.yaml", case.data, content_type="application/yaml")
    response = client_for("operator").post("/graphs/import/", {"upload": upload})
    assert response.status_code == 400
    assert case.expect in page_text(response)
    assert stored() == before


def test_the_import_form_refuses_an_empty_uploaded_file_with_400(client_for):
    upload = SimpleUploadedFile("empty.yaml", b"", content_type="application/yaml")
    response = client_for("operator").post("/graphs/import/", {"upload": upload})
    assert response.status_code == 400
    assert Graph.objects.count() == 0


def test_the_import_form_says_why_an_empty_uploaded_file_was_refused(client_for):
    upload = SimpleUploadedFile("empty.yaml", b"", content_type="application/yaml")
    response = client_for("operator").post("/graphs/import/", {"upload": upload})
    assert "The submitted file is empty" in page_text(response)


@pytest.mark.parametrize("case", TEXT_CASES, ids=str)
def test_editing_an_existing_graph_with_a_bad_manifest_is_refused_and_adds_no_revision(case, client_for, existing):
    before = stored()
    response = client_for("operator").post(f"/graphs/{GRAPH_NAME}/edit/", {"yaml": case.body, "expected_revision": 1})
    assert response.status_code == 400
    assert stored() == before
    assert Graph.objects.get(name=GRAPH_NAME).head.number == 1


@pytest.mark.parametrize("case", TEXT_CASES, ids=str)
def test_the_live_check_shows_the_problem_and_stores_nothing(case, client_for):
    response = client_for("viewer").post("/graphs/check/", {"yaml": case.body})
    assert response.status_code == 200
    text = page_text(response)
    if case.body.strip():
        assert "Invalid" in text
        assert case.expect in text
    else:
        assert "Type or paste a manifest" in text or "empty" in text
    assert Graph.objects.count() == 0


def test_a_10_mb_upload_to_the_import_form_is_refused_with_400(client_for):
    upload = SimpleUploadedFile("big.yaml", TEN_MB, content_type="application/yaml")
    response = client_for("operator").post("/graphs/import/", {"upload": upload})
    assert response.status_code == 400
    assert "the limit is 1,048,576" in page_text(response)
    assert Graph.objects.count() == 0


def test_10_mb_pasted_into_the_import_form_is_refused_with_400(client_for):
    response = client_for("operator").post("/graphs/import/", {"yaml": TEN_MB.decode()})
    assert response.status_code == 400
    assert Graph.objects.count() == 0


def test_10_mb_pasted_into_the_live_check_is_refused_with_400(client_for):
    response = client_for("viewer").post("/graphs/check/", {"yaml": TEN_MB.decode()})
    assert response.status_code == 400


def test_a_manifest_just_over_the_limit_pasted_into_the_form_names_the_limit(client_for, settings):
    settings.MAX_MANIFEST_BYTES = 2000
    response = client_for("operator").post("/graphs/import/", {"yaml": "# " + "x" * 3000 + "\n"})
    assert response.status_code == 400
    assert "2,000-byte limit" in page_text(response)
