"""The CLI: ``manage.py graphs list|import|export|validate``."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from graphs import services
from graphs.catalog import PoolFields, build_spec
from graphs.dgd.render import V1ALPHA1, V1BETA1, render
from graphs.models import Graph, Revision

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    """(stdout, stderr) of a successful command."""
    out, err = io.StringIO(), io.StringIO()
    call_command("graphs", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def fail(*args) -> tuple[CommandError, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as info:
        call_command("graphs", *args, stdout=out, stderr=err)
    return info.value, out.getvalue(), err.getvalue()


@pytest.fixture
def seed_path(reference_dir):
    return str(reference_dir / "seed-disagg.yaml")


@pytest.fixture
def template_path(reference_dir):
    return str(reference_dir / "dgd-templates-1.6.1" / "vllm-disagg.yaml")


# ---------------------------------------------------------------------------------- list


def test_list_with_no_graphs_prints_only_the_header(db):
    out, _ = run("list")
    assert out.split() == ["NAME", "REV", "BACKEND", "DYNAMO", "STATE"]


def test_list_shows_each_graph_with_revision_backend_release_and_state(db):
    services.graph_create(spec=build_spec(template="sglang-disagg", name="bravo", dynamo_version="1.5.1"))
    graph = services.graph_create(spec=build_spec(template="vllm-disagg", name="alpha"))
    services.graph_update(graph=graph, spec=build_spec(template="vllm-disagg", name="alpha",
                                                       decode=PoolFields(replicas=2)))
    out, _ = run("list")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows == [["alpha", "2", "vllm", "1.6.1", "not_deployed"], ["bravo", "1", "sglang", "1.5.1", "not_deployed"]]


# -------------------------------------------------------------------------------- import


def test_import_of_the_seed_creates_the_graph(seed_path):
    out, err = run("import", seed_path)
    assert out.strip() == "vllm-disagg: revision 1"
    assert err == ""  # only notes (info) for the seed on its own release: not printed
    graph = Graph.objects.get(name="vllm-disagg")
    assert graph.head.source_api_version == V1ALPHA1
    assert graph.head.message == "imported"
    assert render(graph.head.graph_spec, V1ALPHA1) == yaml.safe_load(Path(seed_path).read_text())


def test_import_of_a_1_6_1_template_prints_its_warnings_on_stderr(template_path):
    out, err = run("import", template_path, "--message", "from upstream")
    assert out.strip() == "vllm-disagg: revision 1"
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("warning: ")]
    assert "spec.components[1].sharedMemorySize" in err
    assert "spec.components[2].sharedMemorySize" in err
    assert Graph.objects.get().head.message == "from upstream"


def test_importing_again_adds_a_revision(seed_path, template_path):
    run("import", seed_path)
    out, _ = run("import", template_path)  # same graph name: vllm-disagg
    assert out.strip() == "vllm-disagg: revision 2"
    assert Graph.objects.count() == 1
    assert Revision.objects.count() == 2


def test_import_with_a_target_release_and_a_user(seed_path, users):
    run("--user", "operator", "import", seed_path, "--dynamo-version", "1.6.1")
    graph = Graph.objects.get()
    assert graph.head.graph_spec.dynamo_version == "1.6.1"
    assert graph.head.created_by == users["operator"]


def test_import_from_stdin(seed_path, monkeypatch):
    data = Path(seed_path).read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    out, _ = run("import", "-")
    assert out.strip() == "vllm-disagg: revision 1"


def test_import_refuses_an_unknown_user(seed_path, db):
    error, _, _ = fail("--user", "nobody", "import", seed_path)
    assert "no user named 'nobody'" in str(error)
    assert Graph.objects.count() == 0


def test_import_refuses_a_bad_release_name(seed_path, db):
    error, _, _ = fail("import", seed_path, "--dynamo-version", "newest")
    assert "not a Dynamo version" in str(error)
    assert Graph.objects.count() == 0


# -------------------------------------------------------------------------------- export


@pytest.fixture
def imported(seed_path):
    run("import", seed_path)
    changed = Path(seed_path).read_text().replace("replicas: 2", "replicas: 5")
    return Graph.objects.get(name="vllm-disagg"), changed


@pytest.mark.parametrize("api_version", [V1BETA1, V1ALPHA1, "v1alpha1", "v1beta1"])
def test_export_prints_the_rendered_manifest_as_yaml(imported, api_version):
    graph, _ = imported
    out, _ = run("export", "vllm-disagg", "--api-version", api_version)
    obj = yaml.safe_load(out)
    expected_version = V1ALPHA1 if "alpha" in api_version else V1BETA1
    assert obj["apiVersion"] == expected_version
    assert obj == render(graph.head.graph_spec, expected_version)


def test_export_in_v1alpha1_gives_back_the_imported_seed(imported, seed_path):
    out, _ = run("export", "vllm-disagg", "--api-version", "v1alpha1")
    assert yaml.safe_load(out) == yaml.safe_load(Path(seed_path).read_text())


def test_export_defaults_to_the_version_the_graph_was_imported_in(imported):
    out, _ = run("export", "vllm-disagg")
    assert yaml.safe_load(out)["apiVersion"] == V1ALPHA1


@pytest.mark.parametrize("api_version", [V1BETA1, V1ALPHA1])
def test_export_of_a_given_revision(imported, tmp_path, api_version):
    graph, changed = imported
    path = tmp_path / "changed.yaml"
    path.write_text(changed)
    run("import", str(path))
    first, _ = run("export", "vllm-disagg", "--api-version", api_version, "--revision", "1")
    second, _ = run("export", "vllm-disagg", "--api-version", api_version, "--revision", "2")
    latest, _ = run("export", "vllm-disagg", "--api-version", api_version)
    assert latest == second != first
    assert yaml.safe_load(first) == render(graph.revisions.get(number=1).graph_spec, api_version)
    assert yaml.safe_load(second) == render(graph.revisions.get(number=2).graph_spec, api_version)
    replicas = [yaml.safe_load(text)["spec"] for text in (first, second)]
    if api_version == V1ALPHA1:
        assert [r["services"]["VllmDecodeWorker"]["replicas"] for r in replicas] == [2, 5]
    else:
        assert [r["components"][2]["replicas"] for r in replicas] == [2, 5]


def test_export_for_another_dynamo_release_translates_the_role_flags(imported):
    out, _ = run("export", "vllm-disagg", "--dynamo-version", "1.6.1", "--api-version", "v1beta1")
    prefill = yaml.safe_load(out)["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]
    assert prefill["args"] == ["python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --disaggregation-mode prefill"]


@pytest.mark.parametrize(("args", "message"), [
    (["export", "missing"], "no graph named 'missing'"),
    (["export", "vllm-disagg", "--revision", "7"], "has no revision 7"),
    (["export", "vllm-disagg", "--api-version", "v2"], "unknown apiVersion"),
])
def test_export_errors_are_command_errors(imported, args, message):
    error, out, _ = fail(*args)
    assert message in str(error)
    assert out == ""


# ------------------------------------------------------------------------------ validate


def test_validate_of_a_clean_manifest_succeeds_and_prints_a_summary(seed_path, db):
    out, err = run("validate", seed_path)
    assert out.strip() == "valid: 0 error(s), 0 warning(s), 4 note(s)"
    lines = err.splitlines()
    assert len(lines) == 4
    assert all(line.startswith("info: ") for line in lines)
    assert Graph.objects.count() == 0


def test_validate_succeeds_with_warnings_unless_strict(template_path, db):
    out, err = run("validate", template_path)
    assert out.strip() == "valid: 0 error(s), 2 warning(s), 0 note(s)"
    assert err.count("warning: ") == 2
    error, _, err = fail("validate", template_path, "--strict")
    assert str(error) == "invalid: 0 error(s), 2 warning(s), 0 note(s)"
    assert "sharedMemorySize" in err


def test_validate_fails_on_errors_and_lists_every_finding_on_stderr(seed_path, db):
    error, out, err = fail("validate", seed_path, "--dynamo-version", "1.6.1")
    assert str(error).startswith("invalid: 1 error(s), 7 warning(s)")
    assert out == ""
    lines = err.splitlines()
    assert lines[0].startswith("error: spec.services.VllmPrefillWorker.extraPodSpec.mainContainer.args: "
                               "--is-prefill-worker was removed")
    assert "(fix: replace it with --disaggregation-mode prefill" in lines[0]
    assert sum(line.startswith("warning: ") for line in lines) == 7
    assert Graph.objects.count() == 0


def test_validate_fails_on_a_structural_error(tmp_path, reference_dir, db):
    obj = yaml.safe_load((reference_dir / "dgd-templates-1.6.1" / "vllm-agg.yaml").read_text())
    obj["spec"]["components"][0]["replicaCount"] = 1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(obj))
    error, _, err = fail("validate", str(path))
    assert str(error).startswith("invalid: 1 error(s)")
    assert "error: spec.components[0].replicaCount: unknown field" in err


def test_validate_of_a_missing_file(db, tmp_path):
    error, _, _ = fail("validate", str(tmp_path / "none.yaml"))
    assert "no such file" in str(error)


def test_an_unknown_verb_is_refused(db):
    with pytest.raises(CommandError):
        call_command("graphs", "frobnicate", stdout=io.StringIO(), stderr=io.StringIO())


# ------------------------------------------------------------------------------------ roles

def _mocker(users) -> Graph:
    spec = build_spec(template="mocker-disagg", name="clidemo", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    return services.graph_create(spec=spec, user=users["operator"])


def test_a_viewer_cannot_apply_through_the_cli_and_nothing_is_recorded(users):
    from audit.models import AuditRecord
    from graphs.models import Operation

    _mocker(users)
    before = (Operation.objects.count(), AuditRecord.objects.count())
    error, _, _ = fail("--user", "viewer", "apply", "clidemo")
    assert str(error) == "viewer has the viewer role; graphs apply needs the operator role"
    error, _, _ = fail("--user", "norole", "list")
    assert "norole has no role" in str(error)
    assert (Operation.objects.count(), AuditRecord.objects.count()) == before


def test_an_operator_applies_as_themself(users):
    from graphs.models import Operation

    _mocker(users)
    run("--user", "operator", "apply", "clidemo")
    op = Operation.objects.get(graph__name="clidemo")
    assert (op.requested_by, op.via) == (users["operator"], "cli")


def test_without_user_the_cli_acts_as_the_server_administrator_and_the_audit_log_says_so(users, seed_path):
    from audit.models import AuditRecord
    from audit.services import SERVER_ADMIN

    run("import", seed_path)
    record = AuditRecord.objects.get(action="graph.create")
    assert (record.actor, record.actor_name, record.via) == (None, SERVER_ADMIN, "cli")
    assert "without --user" in SERVER_ADMIN
