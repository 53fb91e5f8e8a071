"""The HTML pages: login, graph list, create from a template (htmx preview), detail with the
API-version toggle, the YAML editor's live check, import (paste and upload), edit, revisions
with a diff, export, and the role matrix."""

from __future__ import annotations

import html
import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile

from core.catalog import PoolFields, build_spec
from core.dgd.render import V1ALPHA1, V1BETA1, render
from core.specio import dump_yaml
from graphs import services
from graphs.models import Graph, Operation, Revision
from tests import factories

HTMX = {"HTTP_HX_REQUEST": "true"}


def text(response) -> str:
    return html.unescape(response.content.decode())


def make_graph(name: str = "alpha", **kwargs) -> Graph:
    return factories.graph(name, template="vllm-disagg", **kwargs)


def form_data(**overrides) -> dict:
    """A complete create-from-template form."""
    data = {"template": "vllm-disagg", "name": "fresh", "namespace": "", "model": "Qwen/Qwen3-0.6B",
            "backend": "vllm", "dynamo_version": "1.6.1", "description": "from the form",
            "preview_api_version": V1BETA1}
    for pool in ("prefill", "decode"):
        data.update({f"{pool}_replicas": "1", f"{pool}_gpus": "1", f"{pool}_shared_memory": "16Gi",
                     f"{pool}_image": "", f"{pool}_engine_args": "", f"{pool}_hf_token_secret": "hf-token-secret"})
    data.update(overrides)
    return data


@pytest.fixture
def operator(client_for):
    return client_for("operator")


@pytest.fixture
def viewer(client_for):
    return client_for("viewer")


# --------------------------------------------------------------------------------- login


def test_the_login_page_renders(client):
    response = client.get("/login/")
    assert response.status_code == 200
    assert 'name="username"' in text(response) and 'name="password"' in text(response)


def test_every_page_names_its_icon_and_favicon_ico_leads_to_it(client):
    page = client.get("/login/").content.decode()
    assert '<link rel="icon" href="/static/img/favicon.svg"' in page
    response = client.get("/favicon.ico")  # what a browser asks for on pages that name none
    assert response.status_code == 301 and response["Location"] == "/static/img/favicon.svg"


def test_logging_in_leads_to_the_graph_list(client, users):
    response = client.post("/login/", {"username": "viewer", "password": "pw-12345678"})
    assert response.status_code == 302
    assert response["Location"] == "/graphs/"
    assert client.get("/graphs/").status_code == 200


def test_a_wrong_password_stays_on_the_login_page(client, users):
    response = client.post("/login/", {"username": "viewer", "password": "wrong"})
    assert response.status_code == 200
    assert "/graphs/" not in response.get("Location", "")
    assert client.get("/graphs/").status_code == 302


def test_logging_out_returns_to_the_login_page(viewer):
    response = viewer.post("/logout/")
    assert response.status_code == 302
    assert response["Location"] == "/login/"
    assert viewer.get("/graphs/").status_code == 302


def test_the_home_page_redirects_to_the_graph_list(viewer):
    response = viewer.get("/")
    assert response.status_code == 302 and response["Location"] == "/graphs/"


# ---------------------------------------------------------------------------- graph list


def test_the_graph_list_shows_each_graph(viewer):
    make_graph("alpha")
    factories.graph("bravo", template="sglang-disagg", dynamo_version="1.5.1")
    response = viewer.get("/graphs/")
    assert response.status_code == 200
    page = text(response)
    assert 'href="/graphs/alpha/"' in page and 'href="/graphs/bravo/"' in page
    assert "sglang" in page and "1.5.1" in page
    assert "Not deployed" in page


def test_the_graph_list_shows_every_change_at_once(viewer):
    """The rows are rendered once per process for what they show (graphs/fragments.py): a new
    state, pod count, revision, model or description is on the next view, never a stale copy."""
    from graphs.models import Deployment, Pod

    graph = make_graph("alpha")
    def rows(response) -> str:  # the table's rows (the filters above it name every state)
        return text(response).split('<tbody id="graph-rows"', 1)[1]

    first = rows(viewer.get("/graphs/"))
    assert "Not deployed" in first and "—" in first
    dep = Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready")
    Pod.objects.create(deployment=dep, name="alpha-decode-0", service="decode", role="decode", ready=True)
    Pod.objects.create(deployment=dep, name="alpha-decode-1", service="decode", role="decode", ready=False)
    second = rows(viewer.get("/graphs/"))
    assert "Ready" in second and "1/2" in second and "Not deployed" not in second
    Pod.objects.filter(name="alpha-decode-1").update(ready=True)
    assert "2/2" in text(viewer.get("/graphs/"))
    services.graph_update(graph=graph, spec=build_spec(template="vllm-disagg", name="alpha", model="org/changed"))
    Graph.objects.filter(pk=graph.pk).update(description="now described")
    third = text(viewer.get("/graphs/"))
    assert "org/changed" in third and "now described" in third


def test_the_graph_list_filters_by_name(viewer):
    make_graph("alpha")
    make_graph("bravo")
    page = text(viewer.get("/graphs/?q=alp"))
    assert 'href="/graphs/alpha/"' in page and 'href="/graphs/bravo/"' not in page


def test_an_empty_list_offers_to_create_only_to_operators(viewer, operator):
    assert "Create one from a template" not in text(viewer.get("/graphs/"))
    assert "Create one from a template" in text(operator.get("/graphs/"))


# ------------------------------------------------------------------ create from template


def test_the_create_form_renders_for_each_template(operator):
    for key in ("vllm-disagg", "vllm-agg", "sglang-disagg", "trtllm-disagg", "mocker-disagg"):
        response = operator.get(f"/graphs/new/?template={key}")
        assert response.status_code == 200
        assert f'name="template" value="{key}"' in text(response)


def test_the_htmx_preview_returns_the_manifest_fragment_and_findings(operator):
    response = operator.post("/graphs/new/", form_data(action="preview"), **HTMX)
    assert response.status_code == 200
    page = text(response)
    assert page.lstrip().startswith('<section id="preview"')
    assert "<html" not in page
    assert "apiVersion: nvidia.com/v1beta1" in page
    assert "- --disaggregation-mode\n" in page and "- prefill\n" in page
    assert "Valid: 0 errors" in page
    assert Graph.objects.count() == 0


def test_the_preview_follows_the_chosen_api_version_and_release(operator):
    response = operator.post("/graphs/new/", form_data(action="preview", preview_api_version=V1ALPHA1,
                                                       dynamo_version="0.5.1"), **HTMX)
    page = text(response)
    assert "apiVersion: nvidia.com/v1alpha1" in page
    assert "subComponentType: prefill" in page
    assert "- --is-prefill-worker" in page
    assert "vllm-runtime:0.5.1" in page


def test_the_preview_shows_findings_for_a_risky_choice(operator):
    page = text(operator.post("/graphs/new/", form_data(action="preview", prefill_shared_memory="256Mi"), **HTMX))
    assert "Invalid" in page
    assert "shm_too_small" in page or "gets only 256Mi of /dev/shm" in page


def test_create_redirects_to_the_detail_page(operator, users):
    response = operator.post("/graphs/new/", form_data(action="create"))
    assert response.status_code == 302
    assert response["Location"] == "/graphs/fresh/"
    graph = Graph.objects.get(name="fresh")
    assert graph.head.number == 1
    assert graph.description == "from the form"
    assert graph.created_by == users["operator"]
    assert graph.head.message == "created from template vllm-disagg"
    detail = operator.get(response["Location"])
    assert "Graph fresh created (revision 1)." in text(detail)


def test_create_through_htmx_also_redirects(operator):
    response = operator.post("/graphs/new/", form_data(action="create", name="viahtmx"), **HTMX)
    assert response.status_code == 302
    assert response["Location"] == "/graphs/viahtmx/"


def test_create_keeps_the_pool_fields(operator):
    operator.post("/graphs/new/", form_data(action="create", decode_replicas="3", decode_engine_args="--block-size 16",
                                            prefill_image="registry.example.com/vllm:custom"))
    spec = Graph.objects.get(name="fresh").head.graph_spec
    assert spec.service("decode").replicas == 3
    assert spec.service("decode").args[-4:] == ["--block-size", "16", "--disaggregation-mode", "decode"]
    assert spec.service("prefill").image == "registry.example.com/vllm:custom"


@pytest.mark.parametrize(("overrides", "error"), [
    ({"name": ""}, "This field is required."),
    ({"prefill_replicas": "-1"}, "Ensure this value is greater than or equal to 0."),
    ({"decode_gpus": "lots"}, "Enter a whole number."),
    ({"prefill_shared_memory": "plenty"}, "'plenty' is not a Kubernetes quantity"),
    ({"dynamo_version": "latest"}, "'latest' is not a Dynamo version"),
    ({"backend": "tensorflow"}, "Select a valid choice."),
])
def test_bad_form_input_is_a_400_with_field_errors_and_nothing_stored(operator, overrides, error):
    response = operator.post("/graphs/new/", form_data(action="create", **overrides))
    assert response.status_code == 400
    page = text(response)
    assert error in page
    assert 'class="field-error"' in page
    assert Graph.objects.count() == 0


@pytest.mark.parametrize(("overrides", "message"), [
    ({"name": "Bad_Name"}, "is not a valid Kubernetes name"),
    ({"decode_engine_args": "--x 'unclosed"}, "engine arguments cannot be parsed"),
    ({"prefill_hf_token_secret": "Not A Secret"}, "is not a valid Kubernetes name"),
])
def test_input_the_spec_refuses_is_a_400_naming_the_problem(operator, overrides, message):
    response = operator.post("/graphs/new/", form_data(action="create", **overrides))
    assert response.status_code == 400
    assert message in text(response)
    assert Graph.objects.count() == 0


def test_creating_a_taken_name_is_a_400_saying_so(operator):
    make_graph("fresh")
    response = operator.post("/graphs/new/", form_data(action="create"))
    assert response.status_code == 400
    assert "a graph named 'fresh' already exists" in text(response)
    assert Revision.objects.count() == 1


# ---------------------------------------------------------------------------- detail page


def test_the_detail_page_shows_the_spec_and_the_v1beta1_manifest(viewer):
    make_graph("alpha")
    response = viewer.get("/graphs/alpha/")
    assert response.status_code == 200
    page = text(response)
    assert "Qwen/Qwen3-0.6B" in page
    assert "apiVersion: nvidia.com/v1beta1" in page
    assert 'id="manifest"' in page
    assert "<html" in page


def test_the_api_version_toggle_returns_only_the_manifest_fragment(viewer):
    graph = make_graph("alpha")
    response = viewer.get("/graphs/alpha/?apiVersion=nvidia.com/v1alpha1&fragment=manifest", **HTMX)
    assert response.status_code == 200
    page = text(response)
    assert page.lstrip().startswith('<section class="card" id="manifest"')
    assert "<html" not in page
    assert dump_yaml(render(graph.head.graph_spec, V1ALPHA1)) in page
    assert 'class="button current" href="?apiVersion=nvidia.com/v1alpha1"' in page


def test_the_toggle_without_htmx_renders_the_whole_page_in_that_version(viewer):
    make_graph("alpha")
    page = text(viewer.get("/graphs/alpha/?apiVersion=v1alpha1"))
    assert "<html" in page and "apiVersion: nvidia.com/v1alpha1" in page


def test_an_unknown_api_version_on_the_detail_page_falls_back_to_v1beta1(viewer):
    make_graph("alpha")
    response = viewer.get("/graphs/alpha/?apiVersion=v9")
    assert response.status_code == 200
    assert "apiVersion: nvidia.com/v1beta1" in text(response)


def test_an_old_release_is_shown_in_v1alpha1_and_its_findings_as_v1beta1_on_request(operator):
    make_graph("old", dynamo_version="0.5.1")
    page = text(operator.get("/graphs/old/"))
    # The release's own version by default, and the Apply form offers only what it serves.
    assert "apiVersion: nvidia.com/v1alpha1" in page and "serve only nvidia.com/v1alpha1" not in page
    assert '<option value="nvidia.com/v1alpha1" selected>' in page
    assert '<option value="nvidia.com/v1beta1"' not in page.split('id="apply-api-version"')[1].split("</select>")[0]
    page = text(operator.get("/graphs/old/?apiVersion=nvidia.com/v1beta1"))
    assert "serve only nvidia.com/v1alpha1" in page


def test_an_unknown_graph_is_404(viewer, db):
    assert viewer.get("/graphs/nope/").status_code == 404


# ------------------------------------------------------------------------ the live check


def test_the_live_check_reports_a_valid_manifest(viewer, reference_dir):
    response = viewer.post("/graphs/check/", {"yaml": (reference_dir / "seed-disagg.yaml").read_text()})
    assert response.status_code == 200
    page = text(response)
    assert page.lstrip().startswith('<div class="findings" id="findings">')
    assert "Valid: 0 errors, 0 warnings, 3 notes" in page


def test_the_live_check_for_a_target_release_shows_flag_removed(viewer, reference_dir):
    response = viewer.post("/graphs/check/", {"yaml": (reference_dir / "seed-disagg.yaml").read_text(),
                                              "dynamo_version": "1.6.1"})
    page = text(response)
    assert "Invalid: 2 errors, 4 warnings, 6 notes" in page
    assert "--is-prefill-worker was removed" in page
    assert "spec.services.VllmPrefillWorker.extraPodSpec.mainContainer.args" in page


def test_the_live_check_names_a_bad_release(viewer, reference_dir):
    response = viewer.post("/graphs/check/", {"yaml": "x: 1", "dynamo_version": "soon"})
    assert response.status_code == 200
    assert "'soon' is not a Dynamo version" in text(response)


def test_the_live_check_only_accepts_post(viewer):
    assert viewer.get("/graphs/check/").status_code == 405


# ------------------------------------------------------------------------------- import


def test_importing_a_pasted_manifest_creates_the_graph(operator, reference_dir):
    seed = (reference_dir / "seed-disagg.yaml").read_text()
    response = operator.post("/graphs/import/", {"yaml": seed, "message": "from the recipe"})
    assert response.status_code == 302
    assert response["Location"] == "/graphs/vllm-disagg/"
    graph = Graph.objects.get(name="vllm-disagg")
    assert graph.head.message == "from the recipe"
    assert graph.head.source_yaml == seed  # kept exactly as pasted
    assert render(graph.head.graph_spec, V1ALPHA1) == yaml.safe_load(seed)
    assert "Saved vllm-disagg as revision 1." in text(operator.get(response["Location"]))


def test_importing_an_uploaded_file_creates_the_graph_then_a_revision(operator, reference_dir):
    data = (reference_dir / "dgd-templates-1.6.1" / "trtllm-disagg.yaml").read_bytes()
    for expected in (1, 2):
        upload = SimpleUploadedFile("trtllm.yaml", data, content_type="application/yaml")
        response = operator.post("/graphs/import/", {"upload": upload})
        assert response.status_code == 302
        assert Graph.objects.get(name="trtllm-disagg").head.number == expected
        # The same file again makes no empty revision, and says so.
        data = data if expected == 2 else data.replace(b"replicas: 1", b"replicas: 2", 1)
    upload = SimpleUploadedFile("trtllm.yaml", data, content_type="application/yaml")
    response = operator.post("/graphs/import/", {"upload": upload}, follow=True)
    assert Graph.objects.get(name="trtllm-disagg").head.number == 2
    assert "trtllm-disagg is unchanged: the manifest is its revision 2" in text(response)


def test_importing_with_a_target_release(operator, reference_dir):
    seed = (reference_dir / "seed-disagg.yaml").read_text()
    response = operator.post("/graphs/import/", {"yaml": seed, "dynamo_version": "1.6.1"})
    assert response.status_code == 302
    assert Graph.objects.get().head.graph_spec.dynamo_version == "1.6.1"


def test_the_import_page_says_why_a_bad_target_release_was_refused(operator, reference_dir):
    seed = (reference_dir / "seed-disagg.yaml").read_text()
    response = operator.post("/graphs/import/", {"yaml": seed, "dynamo_version": "latest"})
    assert response.status_code == 400
    assert "'latest' is not a Dynamo version" in text(response)


def test_a_bad_target_release_on_the_import_page_stores_nothing(operator, reference_dir):
    seed = (reference_dir / "seed-disagg.yaml").read_text()
    response = operator.post("/graphs/import/", {"yaml": seed, "dynamo_version": "latest"})
    assert response.status_code == 400
    assert Graph.objects.count() == 0


def test_the_import_page_renders_empty(operator):
    response = operator.get("/graphs/import/")
    assert response.status_code == 200
    assert "Import a DynamoGraphDeployment" in text(response)


# ---------------------------------------------------------------------------------- edit


def test_the_edit_page_is_prefilled_with_the_manifest_and_the_revision(operator):
    graph = make_graph("alpha")
    page = text(operator.get("/graphs/alpha/edit/?apiVersion=v1alpha1"))
    assert dump_yaml(render(graph.head.graph_spec, V1ALPHA1)) in page
    assert 'name="expected_revision" value="1"' in page


def test_editing_the_yaml_makes_a_new_revision(operator):
    graph = make_graph("alpha")
    manifest = render(graph.head.graph_spec, V1BETA1)
    manifest["spec"]["components"][2]["replicas"] = 6
    response = operator.post("/graphs/alpha/edit/", {"yaml": dump_yaml(manifest), "expected_revision": "1"})
    assert response.status_code == 302
    graph.refresh_from_db()
    assert graph.head.number == 2
    assert graph.head.message == "edited YAML"
    assert graph.head.graph_spec.service("decode").replicas == 6


def test_editing_from_a_stale_revision_is_refused_with_the_conflict(operator):
    graph = make_graph("alpha")
    services.graph_update(graph=graph, spec=build_spec(template="vllm-disagg", name="alpha",
                                                       decode=PoolFields(replicas=2)))
    manifest = render(graph.head.graph_spec, V1BETA1)
    response = operator.post("/graphs/alpha/edit/", {"yaml": dump_yaml(manifest), "expected_revision": "1"})
    assert response.status_code == 400
    assert "alpha is now at revision 2, not 1" in text(response)
    assert Revision.objects.count() == 2


def test_editing_cannot_rename_the_graph(operator):
    graph = make_graph("alpha")
    manifest = render(graph.head.graph_spec, V1BETA1)
    manifest["metadata"]["name"] = "beta"
    response = operator.post("/graphs/alpha/edit/", {"yaml": dump_yaml(manifest)})
    assert response.status_code == 400
    assert "a graph cannot be renamed" in text(response)
    assert not Graph.objects.filter(name="beta").exists()


# ----------------------------------------------------------------------- revisions, export


@pytest.fixture
def two_revisions(db):
    graph = make_graph("alpha")
    services.graph_update(graph=graph, spec=build_spec(template="vllm-disagg", name="alpha",
                                                       decode=PoolFields(replicas=4)), message="four decoders")
    return graph


def test_the_revisions_page_lists_revisions_newest_first(viewer, two_revisions):
    response = viewer.get("/graphs/alpha/revisions/")
    assert response.status_code == 200
    page = text(response)
    assert page.index("four decoders") < page.index("<td>created</td>")
    assert 'href="/graphs/alpha/export/?revision=1&apiVersion=nvidia.com/v1alpha1"' in page


def test_the_revisions_page_shows_a_diff(viewer, two_revisions):
    page = text(viewer.get("/graphs/alpha/revisions/?from=1&to=2"))
    assert '<span class="hdr">--- alpha@1</span>' in page
    assert '<span class="del">-    replicas: 1</span>' in page
    assert '<span class="add">+    replicas: 4</span>' in page


def test_the_revisions_page_diff_in_v1alpha1(viewer, two_revisions):
    page = text(viewer.get("/graphs/alpha/revisions/?from=1&to=2&apiVersion=v1alpha1"))
    assert '<span class="add">+      replicas: 4</span>' in page


def test_the_same_revision_twice_has_no_difference(viewer, two_revisions):
    page = text(viewer.get("/graphs/alpha/revisions/?from=2&to=2"))
    assert "(no difference in the rendered manifest)" in page


def test_comparing_a_missing_revision_says_so(viewer, two_revisions):
    response = viewer.get("/graphs/alpha/revisions/?from=1&to=9")
    assert response.status_code == 200
    assert "Pick two existing revisions to compare." in text(response)
    assert viewer.get("/graphs/alpha/revisions/?from=x&to=2").status_code == 200


@pytest.mark.parametrize(("query", "api_version", "filename"), [
    ("", V1BETA1, "alpha-r2-v1beta1.yaml"),
    ("?apiVersion=nvidia.com/v1alpha1", V1ALPHA1, "alpha-r2-v1alpha1.yaml"),
    ("?apiVersion=v1alpha1&revision=1", V1ALPHA1, "alpha-r1-v1alpha1.yaml"),
])
def test_export_downloads_the_manifest(viewer, two_revisions, query, api_version, filename):
    response = viewer.get(f"/graphs/alpha/export/{query}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/yaml")
    assert response["Content-Disposition"] == f'attachment; filename="{filename}"'
    number = int(filename.split("-r")[1].split("-")[0])
    assert yaml.safe_load(response.content) == render(two_revisions.revisions.get(number=number).graph_spec,
                                                      api_version)


def test_exporting_a_missing_revision_is_404(viewer, two_revisions):
    assert viewer.get("/graphs/alpha/export/?revision=9").status_code == 404


@pytest.mark.parametrize("revision", ["x", "0", "9" * 30])
def test_exporting_a_malformed_revision_is_a_400_naming_it(viewer, two_revisions, revision):
    response = viewer.get(f"/graphs/alpha/export/?revision={revision}")
    assert response.status_code == 400
    assert "?revision:" in response.content.decode()


# --------------------------------------------------------------------------- role matrix

READ_PAGES = ["/graphs/", "/graphs/alpha/", "/graphs/alpha/revisions/", "/graphs/alpha/export/",
              "/graphs/alpha/status/"]
OPERATOR_PAGES = ["/graphs/new/", "/graphs/import/", "/graphs/alpha/edit/"]
OPERATOR_POSTS = ["/graphs/new/", "/graphs/import/", "/graphs/alpha/edit/", "/graphs/alpha/apply/",
                  "/graphs/alpha/scale/", "/graphs/alpha/undeploy/", "/graphs/alpha/delete/"]


@pytest.fixture
def alpha(db):
    return make_graph("alpha")


@pytest.mark.parametrize("path", READ_PAGES + OPERATOR_PAGES)
def test_anonymous_visitors_are_sent_to_the_login_page(client, alpha, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


@pytest.mark.parametrize("path", [*OPERATOR_POSTS, "/graphs/check/"])
def test_anonymous_posts_are_sent_to_the_login_page_and_change_nothing(client, alpha, path):
    response = client.post(path, form_data(action="create"))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert Graph.objects.count() == 1 and not Operation.objects.exists()


@pytest.mark.parametrize("path", READ_PAGES + OPERATOR_PAGES)
def test_a_user_without_a_role_gets_403_everywhere(client_for, alpha, path):
    assert client_for("norole").get(path).status_code == 403


def test_a_user_without_a_role_cannot_use_the_live_check(client_for, alpha):
    assert client_for("norole").post("/graphs/check/", {"yaml": "x: 1"}).status_code == 403


@pytest.mark.parametrize("path", READ_PAGES)
def test_a_viewer_can_read(viewer, alpha, path):
    assert viewer.get(path).status_code == 200


@pytest.mark.parametrize("path", OPERATOR_PAGES)
def test_a_viewer_cannot_open_the_editing_pages(viewer, alpha, path):
    assert viewer.get(path).status_code == 403


@pytest.mark.parametrize("path", OPERATOR_POSTS)
def test_a_viewer_cannot_post_to_create_import_edit_or_apply(viewer, alpha, reference_dir, path):
    data = form_data(action="create", yaml=(reference_dir / "seed-disagg.yaml").read_text())
    response = viewer.post(path, data)
    assert response.status_code == 403
    assert list(Graph.objects.values_list("name", flat=True)) == ["alpha"]
    assert Revision.objects.count() == 1
    assert not Operation.objects.exists()


def test_the_viewer_sees_no_edit_links(viewer, alpha):
    page = text(viewer.get("/graphs/alpha/"))
    assert "/graphs/alpha/edit/" not in page
    assert "/graphs/new/" not in text(viewer.get("/graphs/"))


def test_an_operator_can_create(operator):
    assert operator.post("/graphs/new/", form_data(action="create")).status_code == 302
    assert Graph.objects.filter(name="fresh").exists()


def test_an_operator_can_import(operator, reference_dir):
    response = operator.post("/graphs/import/", {"yaml": (reference_dir / "seed-disagg.yaml").read_text()})
    assert response.status_code == 302
    assert Graph.objects.filter(name="vllm-disagg").exists()


def test_an_operator_can_apply(operator, alpha, users):
    response = operator.post("/graphs/alpha/apply/", {"runtime": "local", "apiVersion": V1BETA1, "dry_run": "1"},
                             **HTMX)
    assert response.status_code == 200
    assert 'id="status"' in text(response)
    op = Operation.objects.get()
    assert (op.kind, op.state, op.via, op.requested_by) == ("apply", "pending", "ui", users["operator"])
    assert op.params["dryRun"] is True


def test_an_apply_of_a_graph_with_errors_is_refused_with_409(operator, users):
    make_graph("old", dynamo_version="0.5.1")
    response = operator.post("/graphs/old/apply/", {"apiVersion": V1BETA1}, **HTMX)
    assert response.status_code == 409
    # Into the line above the status, which the status poll never replaces.
    assert response["HX-Retarget"] == "#action-message"
    assert "cannot be applied" in text(response)
    assert not Operation.objects.exists()


def test_an_operator_can_delete_a_graph_that_is_not_deployed(operator, alpha):
    response = operator.post("/graphs/alpha/delete/")
    assert response.status_code == 302 and response["Location"] == "/graphs/"
    assert not Graph.objects.exists()


def test_an_admin_can_do_what_an_operator_can(client_for, alpha):
    admin = client_for("admin")
    assert admin.get("/graphs/new/").status_code == 200
    assert admin.post("/graphs/new/", form_data(action="create", name="byadmin")).status_code == 302


def test_error_pages_explain_themselves(client_for, settings):
    settings.DEBUG = False
    viewer = client_for("viewer")
    missing = viewer.get("/graphs/no-such-graph/")
    assert missing.status_code == 404 and "There is nothing at" in missing.content.decode()
    refused = viewer.get("/graphs/new/")
    assert refused.status_code == 403 and "needs the operator role" in refused.content.decode()


@pytest.mark.parametrize("name", ["new", "import", "check"])
def test_a_graph_is_not_named_after_a_page_of_the_list_it_would_be_hidden_by(operator, api_for, name):
    """/graphs/new/ is the create form: a graph named "new" would have a page nobody reaches (its
    list row would link to the form). Every way in says so at metadata.name and stores nothing,
    a Git file too (its link is refused, the rest of the sync goes on)."""
    from graphs.services import PAGE_NAMES
    from graphs.urls import urlpatterns

    literal = {str(p.pattern).split("/")[0] for p in urlpatterns if str(p.pattern) and "<" not in str(p.pattern)}
    assert literal == PAGE_NAMES
    from tests.graphs.test_truthful_actions import _template_form

    fields = _template_form(text(operator.get("/graphs/new/?template=mocker-disagg")))
    form = operator.post("/graphs/new/", {**fields, "name": name, "action": "create"})
    assert form.status_code == 400 and "is the address of a page of this product" in text(form)
    api = api_for("operator").post("/api/graphs/", {"spec": build_spec(template="vllm-disagg", name=name)
                                                    .model_dump(mode="json")}, format="json")
    assert api.status_code == 422 and f"/graphs/{name}/" in json.dumps(api.json())
    assert api.json()["findings"][0]["path"] == "metadata.name"
    manifest = dump_yaml(render(build_spec(template="vllm-disagg", name=name), V1BETA1))
    imported = operator.post("/graphs/import/", {"yaml": manifest})
    assert imported.status_code == 400 and "is the address of a page of this product" in text(imported)
    assert not Graph.objects.filter(name=name).exists()
    make_graph(f"{name}-1")  # a name that only starts with one is a graph like any other
    assert f"<h1>{name}-1" in text(operator.get(f"/graphs/{name}-1/")).replace("\n", "")
