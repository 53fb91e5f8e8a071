"""A YAML mapping key that is not text (a list or a map, a number, a boolean, null) is refused
with its path, on every way in: nothing is stored, never a 500, and never a manifest that
comes back changed on export (``~`` would come back as ``None``, ``1`` as ``"1"``)."""

from __future__ import annotations

import pytest
import yaml

from graphs.models import Graph

pytestmark = pytest.mark.django_db


@pytest.fixture
def seed(reference_dir) -> dict:
    return yaml.safe_load((reference_dir / "seed-disagg.yaml").read_text())


def _with_labels(manifest: dict, labels_yaml: str) -> str:
    """The manifest as YAML text, with ``labels_yaml`` as its metadata.labels block."""
    text = yaml.safe_dump(manifest, sort_keys=False)
    assert "\nmetadata:\n" in text
    return text.replace("\nmetadata:\n", "\nmetadata:\n  labels:\n" + labels_yaml, 1)


@pytest.mark.parametrize("key, what", [
    ("1", "the key 1 is a number"),
    ("1.5", "the key 1.5 is a number"),
    ("~", "the key null is null"),
    ("null", "the key null is null"),
    ("true", "the key true is a boolean"),
    ("[a, b]", "a key is a list"),
    ("{a: b}", "a key is a map"),
])
@pytest.mark.parametrize("url", ["/api/validate/", "/api/graphs/import/"])
def test_a_key_that_is_not_text_is_refused_with_its_path(operator_api, seed, key, what, url):
    body = _with_labels(seed, f"    {key}: value\n")
    response = operator_api.post(url, data=body.encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content
    findings = response.json()["findings"]
    assert [(f["path"], what in f["message"]) for f in findings] == [("metadata.labels", True)], findings
    assert Graph.objects.count() == 0


def test_a_key_that_is_a_list_deep_inside_names_its_path(viewer_api, seed):
    body = yaml.safe_dump(seed, sort_keys=False).replace(
        "\nspec:\n", "\nspec:\n  extra:\n  - one:\n      ? [x]\n      : 1\n", 1)
    response = viewer_api.post("/api/validate/", data=body.encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content
    (finding,) = response.json()["findings"]
    assert finding["path"] == "spec.extra[0].one" and "a key is a list (line" in finding["message"]


def test_quoted_keys_are_text_and_come_back_the_same(operator_api, seed):
    body = _with_labels(seed, '    "1": a\n    "~": b\n    "true": c\n')
    response = operator_api.post("/api/graphs/import/", data=body.encode(), content_type="application/yaml")
    assert response.status_code == 201, response.content
    name = response.json()["name"]
    exported = operator_api.get(f"/api/graphs/{name}/export/?apiVersion=v1alpha1")
    assert exported.status_code == 200
    labels = yaml.safe_load(exported.content)["metadata"]["labels"]
    assert {k: labels[k] for k in ("1", "~", "true")} == {"1": "a", "~": "b", "true": "c"}
