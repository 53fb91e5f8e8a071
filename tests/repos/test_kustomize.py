"""A kustomize directory imports as ``kubectl kustomize`` builds it: uploaded as an archive (page
and API), kept in Git (a real repository), given to the CLI. The inputs are upstream's own
kustomize recipes, verbatim (tests/fixtures/upstream-kustomize), built by the real kubectl; the
results are compared with upstream's own rendered files (tests/fixtures/upstream-2a6da14c)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from core.documents import load_bundle
from core.errors import ManifestError
from graphs.archive import MAX_FILES
from graphs.kustomize import build
from graphs.models import Graph
from graphs.services import graph_update, revision_manifest

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.git_fixtures"]

FIXTURES = Path(__file__).parents[1] / "fixtures"
TREE = FIXTURES / "upstream-kustomize"
QWEN32 = "recipes/qwen3-32b/vllm/cloud-providers/kustomize/overlays/aws-p5.48xlarge"
QWEN235 = "recipes/qwen3-235b-a22b-fp8/trtllm/disagg/blackwell/kustomize/overlays/generic"
RENDERED_32 = FIXTURES / "upstream-2a6da14c" / "recipes__qwen3-32b__vllm__cloud-providers__deploy-aws-p5.48xlarge.yaml"
RENDERED_235 = (FIXTURES / "upstream-2a6da14c"
                / "recipes__qwen3-235b-a22b-fp8__trtllm__disagg__blackwell__deploy-generic.yaml")
IMPORT = "/api/graphs/import/"


def objects(text: str | bytes) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def tar_gz(files: dict[str, bytes | None], *, links: dict[str, str] | None = None, extra=None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data or b""))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for info in extra or []:
            tar.addfile(info)
    return buffer.getvalue()


def tree_files(*prefixes: str) -> dict[str, bytes]:
    return {p.relative_to(TREE).as_posix(): p.read_bytes() for p in sorted(TREE.rglob("*"))
            if p.is_file() and p.name != "SOURCE.txt"
            and any(p.relative_to(TREE).as_posix().startswith(x) for x in prefixes)}


def upload(api_for, data: bytes, content_type="application/gzip", path: str = ""):
    return api_for("operator").post(IMPORT + (f"?path={path}" if path else ""), data=data, content_type=content_type)


# -- the builder -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("overlay", "rendered"), [(QWEN32, RENDERED_32), (QWEN235, RENDERED_235)])
def test_upstreams_overlays_build_to_upstreams_rendered_files(overlay, rendered):
    text = build(TREE / overlay, root=TREE, max_bytes=1 << 20)
    assert objects(text) == objects(rendered.read_bytes())


def test_the_build_of_a_base_with_configmaps_gives_the_dgd_and_its_companions():
    bundle = load_bundle(build(TREE / QWEN235, root=TREE, max_bytes=1 << 20), max_bytes=1 << 20)
    assert [g["metadata"]["name"] for g in bundle.graphs] == ["qwen3-235b-a22b-disagg"]
    assert [(c["kind"], c["metadata"]["name"]) for c in bundle.companions] == [
        ("ConfigMap", "prefill-config"), ("ConfigMap", "decode-config")]


@pytest.mark.parametrize(("kustomization", "code", "words"), [
    ("resources:\n- https://github.com/ai-dynamo/dynamo//recipes?ref=main\n", "kustomize_remote", "is remote"),
    ("resources:\n- github.com/ai-dynamo/dynamo/recipes\n", "kustomize_remote", "is remote"),
    ("resources:\n- git@github.com:ai-dynamo/dynamo.git\n", "kustomize_remote", "is remote"),
    ("resources:\n- ../../../../../../../../etc\n", "kustomize_outside", "leaves the directory"),
    ("resources:\n- /etc\n", "kustomize_outside", "leaves the directory"),
    ("components:\n- ../missing\n", "kustomize_missing", "neither a file nor a folder"),
    ("helmCharts:\n- name: x\n  repo: https://charts.example\n", "kustomize_helm", "Helm"),
    ("resources: deploy.yaml\n", "kustomize_yaml", "is not a list"),
])
def test_what_would_leave_the_directory_or_reach_the_network_is_refused_before_kubectl_runs(tmp_path, kustomization,
                                                                                             code, words):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "kustomization.yaml").write_text(kustomization)
    with pytest.raises(ManifestError) as refused:
        build(tmp_path / "k", root=tmp_path, max_bytes=1 << 20)
    assert refused.value.findings[0].code == code
    assert words in refused.value.findings[0].message
    assert "kustomization.yaml" in refused.value.findings[0].path


def test_a_build_beyond_the_output_bound_is_killed_and_refused():
    with pytest.raises(ManifestError) as refused:
        build(TREE / QWEN32, root=TREE, max_bytes=1000)
    assert refused.value.findings[0].code == "too_large"


def test_a_failing_build_says_what_kubectl_said_without_the_servers_folders(tmp_path):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "kustomization.yaml").write_text("resources:\n- deploy.yaml\n")
    (tmp_path / "k" / "deploy.yaml").write_text("kind: [\n")
    with pytest.raises(ManifestError) as refused:
        build(tmp_path / "k", root=tmp_path, max_bytes=1 << 20)
    assert refused.value.findings[0].code == "kustomize_failed"
    assert str(tmp_path) not in str(refused.value)


# -- uploads -----------------------------------------------------------------------------------------
def test_an_archive_of_upstreams_kustomize_tree_imports_the_overlay_it_names(api_for):
    data = tar_gz(tree_files("recipes/"))
    response = upload(api_for, data, path=QWEN235)
    assert response.status_code == 201, response.json()
    graph = Graph.objects.get(name="qwen3-235b-a22b-disagg")
    rendered = objects(RENDERED_235.read_bytes())
    assert graph.head.companions == rendered[:2]
    assert revision_manifest(graph.head) == load_bundle(RENDERED_235.read_bytes(), max_bytes=1 << 20).manifest


def test_an_archive_with_several_overlays_and_no_path_says_which_it_could_build(api_for):
    response = upload(api_for, tar_gz(tree_files("recipes/")))
    assert response.status_code == 400
    finding = response.json()["findings"][0]
    assert finding["code"] == "kustomize_ambiguous"
    assert QWEN32 in finding["message"] and QWEN235 in finding["message"] and "?path=" in finding["fix"]
    assert not Graph.objects.exists()


def test_a_zip_with_one_overlay_is_built_without_a_path_from_the_import_page(client_for):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in tree_files("recipes/qwen3-32b/", "recipes/kustomize/").items():
            archive.writestr(name, data)
    buffer.seek(0)
    buffer.name = "qwen3-32b.zip"
    response = client_for("operator").post("/graphs/import/", {"upload": buffer}, follow=True)
    assert response.status_code == 200
    assert f"built with kubectl kustomize from {QWEN32}" in response.content.decode()
    graph = Graph.objects.get(name="q32b-1p1d-cloud-provider")
    assert revision_manifest(graph.head) == load_bundle(RENDERED_32.read_bytes(), max_bytes=1 << 20).manifest


def _fifo() -> tarfile.TarInfo:
    info = tarfile.TarInfo("k/pipe")
    info.type = tarfile.FIFOTYPE
    return info


def _hardlink() -> tarfile.TarInfo:
    info = tarfile.TarInfo("k/hard.yaml")
    info.type, info.linkname = tarfile.LNKTYPE, "/etc/passwd"
    return info


KUSTOMIZATION = b"resources:\n- deploy.yaml\n"


def _zip_with_symlink() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("k/kustomization.yaml", KUSTOMIZATION)
        link = zipfile.ZipInfo("k/deploy.yaml")
        link.external_attr = (0o120777 << 16)  # what zip --symlinks writes
        archive.writestr(link, "/etc/passwd")
    return buffer.getvalue()


@pytest.mark.parametrize(("data", "words"), [
    (tar_gz({"/k/kustomization.yaml": KUSTOMIZATION}), "an absolute path"),
    (tar_gz({"k/../../kustomization.yaml": KUSTOMIZATION}), "a path with '..'"),
    (tar_gz({"k/kustomization.yaml": KUSTOMIZATION}, links={"k/deploy.yaml": "/etc/passwd"}), "a link"),
    (tar_gz({"k/kustomization.yaml": KUSTOMIZATION}, extra=[_hardlink()]), "a link"),
    (tar_gz({"k/kustomization.yaml": KUSTOMIZATION}, extra=[_fifo()]), "a special file"),
    (tar_gz({f"k/{i}.yaml": b"" for i in range(MAX_FILES + 1)}), f"more than {MAX_FILES} files"),
    (b"\x1f\x8b" + b"not gzip at all" * 10, "not a readable .tar.gz or .zip archive"),
    (_zip_with_symlink(), "a link"),
    (tar_gz({"k/deploy.yaml": b"kind: ConfigMap\n"}), "holds no kustomization.yaml"),
    (tar_gz({"k/kustomization.yaml": b"resources:\n- ../../../etc\n"}), "leaves the directory"),
])
def test_a_hostile_or_broken_archive_is_refused_saying_what_and_nothing_is_stored(api_for, data, words):
    response = upload(api_for, data)
    assert response.status_code == 400, response.content
    assert words in response.content.decode()
    assert not Graph.objects.exists()


def test_an_archive_that_unpacks_past_the_bound_is_refused(api_for, monkeypatch):
    monkeypatch.setattr("graphs.archive.MAX_TOTAL_BYTES", 10_000)
    response = upload(api_for, tar_gz({"k/kustomization.yaml": KUSTOMIZATION, "k/deploy.yaml": b"#" * 20_000}))
    assert response.status_code == 400
    assert "unpacks to more than 10,000 bytes" in response.json()["detail"]


def test_a_secret_generated_by_kustomize_is_refused_like_one_written_in_a_file(api_for):
    files = tree_files("recipes/qwen3-32b/", "recipes/kustomize/")
    overlay = f"{QWEN32}/kustomization.yaml"
    files[overlay] += b"secretGenerator:\n- name: hf-token\n  literals:\n  - HF_TOKEN=hf_live_value\n"
    response = upload(api_for, tar_gz(files))
    assert response.status_code == 400
    assert response.json()["findings"][0]["code"] == "companion_secret"
    assert "hf_live_value" not in response.content.decode()


# -- Git ---------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _mirrors(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


def _push_tree(remote, message="upstream recipes"):
    for name, data in tree_files("recipes/").items():
        remote.write(name, data.decode())
    remote.commit(message)
    remote.push()


def test_a_kustomize_folder_in_git_is_built_as_one_graph_and_follows_its_bases(remote, users,
                                                                              django_capture_on_commit_callbacks):
    from repos import services
    from repos.export import repository_export
    from repos.models import ExportState, GraphLink
    from repos.sync import repository_sync

    _push_tree(remote)
    repo = services.repository_create(name="recipes", url=remote.url, path=str(Path(QWEN235).parent))
    result = repository_sync(repository=repo)
    assert result.error == "" and result.refused == [], result.refused
    assert [(i["graph"], i["path"]) for i in result.imported] == [
        ("qwen3-235b-a22b-disagg", f"{QWEN235}/kustomization.yaml")]
    graph = Graph.objects.get(name="qwen3-235b-a22b-disagg")
    assert [c["metadata"]["name"] for c in graph.head.companions] == ["prefill-config", "decode-config"]
    assert list(GraphLink.objects.values_list("path", flat=True)) == [f"{QWEN235}/kustomization.yaml"]
    assert repository_sync(repository=repo).imported == []  # nothing new: nothing imported

    # A change to the base, outside the synced folder, is a change of what the overlay builds.
    base = f"{Path(QWEN235).parent.parent}/base/deploy.yaml"
    remote.write(base, (TREE / base).read_text().replace("max_num_tokens: 8192", "max_num_tokens: 4096", 1))
    remote.commit("smaller prefill batches")
    remote.push()
    result = repository_sync(repository=repo)
    assert [i["revision"] for i in result.imported] == [2]
    graph.refresh_from_db()
    assert "max_num_tokens: 4096" in graph.head.companions[0]["data"]["prefill.yaml"]
    assert graph.head.git_commit.message.startswith("smaller prefill batches")

    # The product never writes a kustomize source: an edit here is refused at export, saying why.
    with django_capture_on_commit_callbacks(execute=False):
        graph_update(graph=graph, spec=graph.head.graph_spec, user=users["operator"], message="here",
                     companions=[])
    [export] = repository_export(repository=repo)
    assert export.state == ExportState.FAILED
    assert "kustomize directory" in export.error and "make the change there" in export.error


def test_a_folder_that_is_a_kustomize_directory_imports_its_build_and_not_its_files(remote):
    from repos import services
    from repos.sync import repository_sync

    _push_tree(remote)
    base = str(Path(QWEN235).parent.parent / "base")
    repo = services.repository_create(name="base", url=remote.url, path=base)
    result = repository_sync(repository=repo)
    assert [i["path"] for i in result.imported] == [f"{base}/kustomization.yaml"]  # not base/deploy.yaml


def test_a_broken_kustomize_folder_is_refused_once_with_kubectls_reason(remote):
    from repos import services
    from repos.sync import repository_sync

    remote.write("graphs/broken/kustomization.yaml", "resources:\n- https://example.com/x.yaml\n")
    remote.commit("broken")
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url, path="graphs")
    first = repository_sync(repository=repo)
    assert [r["path"] for r in first.refused] == ["graphs/broken/kustomization.yaml"]
    assert "is remote" in first.refused[0]["findings"][0]["message"]
    remote.commit("unrelated")
    remote.push()
    assert repository_sync(repository=repo).refused == []  # the same refusal is not recorded twice


def test_a_graph_with_companions_is_exported_to_its_git_file_with_them_and_syncs_back_unchanged(
        remote, users, django_capture_on_commit_callbacks):
    from repos import services
    from repos.export import repository_export
    from repos.models import ExportState
    from repos.sync import repository_sync
    from tests.git_fixtures import manifest

    configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: alpha-config\ndata:\n  a.yaml: |\n    x: 1\n"
    remote.write("graphs/alpha.yaml", manifest("alpha") + "---\n" + configmap)  # the DGD first, here
    remote.commit("alpha with its config")
    remote.push()
    repo = services.repository_create(name="fleet", url=remote.url, path="graphs")
    repository_sync(repository=repo)
    graph = Graph.objects.get(name="alpha")
    spec = graph.head.graph_spec
    pools = list(spec.services)
    pools[1] = pools[1].model_copy(update={"replicas": 3})
    with django_capture_on_commit_callbacks(execute=False):
        graph_update(graph=graph, spec=spec.model_copy(update={"services": pools}), user=users["operator"],
                     message="three")
    [export] = repository_export(repository=repo)
    assert export.state == ExportState.PUSHED, export.error
    written = objects(remote.show("main", "graphs/alpha.yaml"))
    assert [d["kind"] for d in written] == ["DynamoGraphDeployment", "ConfigMap"]  # the file's order kept
    assert written[1] == yaml.safe_load(configmap)
    assert written[0]["spec"]["components"][1]["replicas"] == 3
    assert repository_sync(repository=repo).imported == []
    graph.refresh_from_db()
    assert graph.head.number == 2 and graph.head.companions == [yaml.safe_load(configmap)]


# -- the CLI -----------------------------------------------------------------------------------------
@pytest.fixture
def cli(live_server, users, tmp_path):
    from accounts.tokens import token_create

    _token, key = token_create(user=users["operator"], name="dynamo-cp", via="system")

    def run(*args: str, stdin: bytes | None = None, pass_fds=()) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAMO_CP_")}
        env.update(XDG_CONFIG_HOME=str(tmp_path / "home"), DYNAMO_CP_URL=live_server.url, DYNAMO_CP_TOKEN=key)
        return subprocess.run([sys.executable, "-m", "dynamo_cp", *args], input=stdin, capture_output=True, env=env,
                              cwd=Path(__file__).resolve().parents[2], timeout=60, pass_fds=pass_fds)

    return run


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl builds the directory")
def test_the_cli_builds_a_kustomize_directory_with_kubectl_and_imports_the_result(cli):
    done = cli("graphs", "import", str(TREE / QWEN235))
    assert done.returncode == 0, done.stderr.decode()
    graph = Graph.objects.get(name="qwen3-235b-a22b-disagg")
    assert [c["metadata"]["name"] for c in graph.head.companions] == ["prefill-config", "decode-config"]
    bad = cli("graphs", "import", str(TREE / "recipes/kustomize/components"))
    assert bad.returncode == 2 and "without kustomization.yaml" in bad.stderr.decode()


def test_the_cli_reads_stdin_and_a_pipe_from_process_substitution(cli):
    text = RENDERED_32.read_bytes()
    assert cli("graphs", "import", "-", stdin=text).returncode == 0
    read, write = os.pipe()
    os.write(write, RENDERED_235.read_bytes())
    os.close(write)
    try:
        done = cli("graphs", "import", f"/dev/fd/{read}", pass_fds=(read,))
    finally:
        os.close(read)
    assert done.returncode == 0, done.stderr.decode()
    assert set(Graph.objects.values_list("name", flat=True)) == {"q32b-1p1d-cloud-provider", "qwen3-235b-a22b-disagg"}
