"""Which schema validated a manifest: SOURCE.txt tells the truth about the CRD files, and the
validation page and API name the schema that judged each manifest and how it relates to the
release the graph targets."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from core.schema import CRD_DIR, schema_source, schema_used, served_versions
from core.validation import validate_manifest
from tests import factories

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "operator-manifests"
SOURCE = (CRD_DIR / "SOURCE.txt").read_text()


def test_source_txt_lists_every_crd_file_here_with_its_real_sha256():
    listed = dict((name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+\.yaml)$", SOURCE, re.M))
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in CRD_DIR.glob("*.yaml")}
    assert listed == files


def test_source_txt_says_the_files_are_a_main_snapshot_used_for_every_release():
    assert "snapshot of upstream main from August 2026" in SOURCE
    assert "declares 1.5.0" in SOURCE
    assert "public mirror" in SOURCE
    assert "Used for every target release" in SOURCE
    assert "1.6.x" in SOURCE and "1.7.0" in SOURCE and "v1beta2" in SOURCE


def test_the_crd_snapshot_serves_no_v1beta2_so_the_source_note_is_consistent():
    assert served_versions() == ["nvidia.com/v1alpha1", "nvidia.com/v1beta1"]


def test_the_schema_used_names_the_api_version_the_commit_and_the_file_hash():
    used = schema_used("nvidia.com/v1beta1", "1.6.1")
    assert used["api_version"] == "nvidia.com/v1beta1"
    assert used["commit"] == "2a6da14c83617f5412caba5777dbf0e2399e9c5f"
    assert used["date"] == "2026-08-21"
    assert used["sha256"] == hashlib.sha256((CRD_DIR / used["file"]).read_bytes()).hexdigest()
    assert schema_source()["declares"] == "1.5.0"


@pytest.mark.parametrize(("release", "words"), [
    ("1.6.1", "The CRD shipped with 1.6.1 could not be obtained here"),
    ("1.7.0", "The CRD shipped with 1.7.0 could not be obtained here"),
    ("1.5.1", "declares 1.5, the target release's line"),
    ("0.5.1", "newer than 0.5.1"),
])
def test_the_note_says_how_the_snapshot_relates_to_the_target_release(release, words):
    assert words in schema_used("nvidia.com/v1alpha1", release)["note"]


def test_no_schema_is_named_for_an_api_version_the_crd_does_not_serve():
    assert schema_used("nvidia.com/v1beta2", "1.7.0") is None
    report = validate_manifest({"apiVersion": "nvidia.com/v1beta2", "kind": "DynamoGraphDeployment",
                                "metadata": {"name": "x"}, "spec": {}})
    assert report.schema is None
    assert [f.code for f in report.findings][:1] == ["api_version"]


def test_a_report_names_the_schema_of_the_manifests_own_api_version_and_inferred_release():
    manifest = yaml.safe_load((CORPUS / "alpha-llama70b-disagg.yaml").read_text())
    report = validate_manifest(manifest)
    assert report.schema["api_version"] == "nvidia.com/v1alpha1"
    assert report.schema["target_release"] == "0.5.1"  # from the image tags
    assert report.as_dict()["schema"] == report.schema


def test_the_validate_api_returns_the_schema_that_judged_the_manifest(api_for):
    body = (CORPUS / "beta-qwen-disagg-kv.yaml").read_text()
    response = api_for("viewer").post("/api/validate/?dynamoVersion=1.6.1", data=body,
                                      content_type="application/yaml")
    assert response.status_code == 200
    schema = response.json()["schema"]
    assert schema["api_version"] == "nvidia.com/v1beta1"
    assert schema["target_release"] == "1.6.1"
    assert "could not be obtained" in schema["note"]


def test_the_live_check_on_the_import_page_says_which_schema_it_used(client_for):
    text = (CORPUS / "alpha-llama70b-disagg.yaml").read_text()
    response = client_for("viewer").post("/graphs/check/", {"yaml": text, "dynamo_version": "1.6.1"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Structure checked against the" in page
    assert "nvidia.com/v1alpha1 schema of the DynamoGraphDeployment CRD" in page
    assert "2a6da14" in page and "declaring 1.5.0" in page
    assert "The CRD shipped with 1.6.1 could not be obtained here" in page


@pytest.mark.django_db
def test_validating_a_stored_graph_names_the_schema_of_the_rendered_api_version(api_for):

    factories.graph("stored", template="vllm-disagg", dynamo_version="0.5.1")
    api = api_for("viewer")
    # By default the version the graph's release serves (0.5.1: v1alpha1 only); either on request.
    default = api.get("/api/graphs/stored/validate/").json()["schema"]
    beta = api.get("/api/graphs/stored/validate/?apiVersion=v1beta1").json()["schema"]
    alpha = api.get("/api/graphs/stored/validate/?apiVersion=v1alpha1").json()["schema"]
    assert default["api_version"] == "nvidia.com/v1alpha1"
    assert (beta["api_version"], alpha["api_version"]) == ("nvidia.com/v1beta1", "nvidia.com/v1alpha1")
    assert beta["target_release"] == alpha["target_release"] == "0.5.1"
    assert "newer than 0.5.1" in alpha["note"]


@pytest.mark.django_db
def test_the_graph_page_says_which_schema_checked_its_manifest(client_for):

    factories.graph("shown", template="vllm-disagg")
    page = client_for("viewer").get("/graphs/shown/?apiVersion=v1alpha1").content.decode()
    assert "Structure checked against the" in page and "nvidia.com/v1alpha1 schema" in page
