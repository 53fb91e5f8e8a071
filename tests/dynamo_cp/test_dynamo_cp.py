"""The `dynamo-cp` console script against the live test server (pytest-django's live_server,
real HTTP, real PostgreSQL), run as a process (`python -m dynamo_cp`) exactly as the entry
point runs it: output formats, exit statuses, bad input, a revoked token, and waits followed
to the end through a real Celery worker."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.utils import timezone

from accounts.models import ApiToken
from accounts.tokens import token_create
from benchmarks.models import BenchmarkRun
from controlplane.celery import app as celery_app
from core.catalog import PoolFields, build_spec
from dynamo_cp import exits
from graphs import services
from graphs.models import Deployment, Operation
from tests import factories
from tests.graphs.test_operation_faults import Worker, _database_url

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]
MOCKER = ROOT / "tests" / "fixtures" / "reference" / "dgd-templates-1.6.1" / "mocker-disagg.yaml"


def mocker_graph(name: str = "cpdemo"):
    return factories.graph(name, model="m", backend="mocker", pool=factories.CPU)


class Cli:
    def __init__(self, url: str, token: str, home: Path):
        self.url, self.token, self.home = url, token, home

    def __call__(self, *args: str, token: str | None = None, stdin: bytes | None = None, env: dict | None = None,
                 timeout: float = 60) -> subprocess.CompletedProcess:
        base = {k: v for k, v in os.environ.items() if not k.startswith("DYNAMO_CP_")}
        base.update(XDG_CONFIG_HOME=str(self.home), DYNAMO_CP_URL=self.url,
                    DYNAMO_CP_TOKEN=self.token if token is None else token)
        base.update(env or {})
        base = {k: v for k, v in base.items() if v is not None}
        return subprocess.run([sys.executable, "-m", "dynamo_cp", *args], input=stdin, capture_output=True,
                              env=base, cwd=ROOT, timeout=timeout)


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


@pytest.fixture
def cli(live_server, users, tmp_path):
    _token, key = token_create(user=users["operator"], name="dynamo-cp", via="system")
    return Cli(live_server.url, key, tmp_path / "config-home")


@pytest.fixture
def worker(tmp_path):
    """A real Celery worker on the run's broker and the live server's database."""
    env = dict(os.environ, DATABASE_URL=_database_url(), CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
               CONTROLPLANE_VAR_DIR=str(settings.VAR_DIR), CELERY_TASK_ALWAYS_EAGER="0",
               # No local operator runs here: a scale succeeds once recorded, not once observed.
               OPERATION_OBSERVE_SECONDS="0")
    celery_app.conf.task_always_eager = False
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge("celery")
    with open(tmp_path / "worker.log", "ab") as log:
        w = Worker(env, log)
        w.start()
        yield w
        w.kill()


# ------------------------------------------------------------------ graphs, formats


def test_import_list_export_and_validate_in_every_output_format(cli):
    imported = cli("graphs", "import", str(MOCKER))
    assert imported.returncode == exits.OK, err(imported)
    assert out(imported).strip() == "mocker-disagg: revision 1"

    table = cli("graphs", "list")
    assert table.returncode == 0
    header, *rows = out(table).splitlines()
    assert header.split() == ["NAME", "REV", "BACKEND", "DYNAMO", "STATE", "MODEL"]
    assert rows[0].split()[:5] == ["mocker-disagg", "1", "mocker", "1.6.1", "not_deployed"]

    as_json = json.loads(out(cli("graphs", "list", "-o", "json")))
    assert [(g["name"], g["revision"], g["state"]) for g in as_json] == [("mocker-disagg", 1, "not_deployed")]
    # Global options may come before the command too.
    as_yaml = yaml.safe_load(out(cli("-o", "yaml", "graphs", "list")))
    assert as_yaml == as_json

    exported = cli("graphs", "export", "mocker-disagg", "--api-version", "v1alpha1")
    assert exported.returncode == 0, err(exported)
    manifest = yaml.safe_load(out(exported))
    assert manifest["apiVersion"] == "nvidia.com/v1alpha1"
    assert set(manifest["spec"]["services"]) >= {"Frontend", "decode", "prefill"}
    # The exported manifest imports back as the same graph (a new revision only if it changed).
    again = cli("graphs", "import", "-", stdin=exported.stdout)
    assert again.returncode == 0, err(again)
    # The identical file again makes no empty revision: the API answers 200 "unchanged".
    first = json.loads(out(cli("graphs", "import", str(MOCKER), "-o", "json")))
    same = cli("graphs", "import", str(MOCKER), "-o", "json")
    assert same.returncode == exits.OK, err(same)
    assert json.loads(out(same))["unchanged"] is True and json.loads(out(same))["revision"] == first["revision"]
    unchanged = f"mocker-disagg: revision {first['revision']} (unchanged)"
    assert out(cli("graphs", "import", str(MOCKER))).strip() == unchanged
    assert json.loads(out(cli("graphs", "export", "mocker-disagg", "-o", "json")))["kind"] == "DynamoGraphDeployment"

    valid = cli("graphs", "validate", str(MOCKER), "-o", "json")
    assert valid.returncode == exits.OK
    assert json.loads(out(valid))["valid"] is True


def test_an_invalid_manifest_is_refused_with_every_finding_and_nothing_is_stored(cli, tmp_path):
    bad = yaml.safe_load(MOCKER.read_text())
    bad["metadata"]["name"] = "Bad_Name"
    bad["spec"]["components"][1]["replicas"] = -3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))

    imported = cli("graphs", "import", str(path))
    assert imported.returncode == exits.INVALID
    assert "422" in err(imported)  # read, then refused for what it says (exit status 5, as a 400)
    assert "metadata.name" in err(imported)
    assert "replicas" in err(imported)
    assert json.loads(out(cli("graphs", "list", "-o", "json"))) == []

    checked = cli("graphs", "validate", str(path))
    assert checked.returncode == exits.INVALID
    assert out(checked).startswith("invalid: ")
    assert "error: metadata.name" in err(checked)

    garbage = cli("graphs", "validate", "-", stdin=b"spec: [unclosed\n")
    assert garbage.returncode == exits.INVALID
    assert "YAML" in err(garbage) or "yaml" in err(garbage)

    missing = cli("graphs", "import", str(tmp_path / "nope.yaml"))
    assert missing.returncode == exits.USAGE
    assert "no such file" in err(missing)


def test_unknown_names_and_bad_arguments_have_their_own_exit_statuses(cli):
    mocker_graph()
    assert cli("graphs", "status", "nosuch").returncode == exits.NOT_FOUND
    assert cli("graphs", "export", "cpdemo", "--revision", "9").returncode == exits.NOT_FOUND
    assert cli("operations", "show", "999999").returncode == exits.NOT_FOUND

    scale = cli("graphs", "scale", "cpdemo", "decode", "-1")
    assert scale.returncode == exits.INVALID
    assert "replicas" in err(scale)
    version = cli("graphs", "export", "cpdemo", "--api-version", "v9")
    assert version.returncode == exits.INVALID
    assert "apiVersion" in err(version)
    usage = cli("graphs", "scale", "cpdemo", "decode", "many")
    assert usage.returncode == exits.USAGE
    assert "invalid int value" in err(usage)
    assert cli("graphs", "frobnicate").returncode == exits.USAGE


def test_no_wrong_and_revoked_tokens_are_told_apart_from_other_failures(cli, users):
    assert cli("graphs", "list").returncode == exits.OK

    none = cli("graphs", "list", token="")
    assert none.returncode == exits.USAGE
    assert "DYNAMO_CP_TOKEN" in err(none)

    wrong = cli("graphs", "list", token="0" * 40)
    assert wrong.returncode == exits.AUTH
    assert "401" in err(wrong)
    assert "revoked" in err(wrong)

    ApiToken.objects.filter(user=users["operator"]).delete()  # revoking a token
    revoked = cli("graphs", "list")
    assert revoked.returncode == exits.AUTH
    assert "401" in err(revoked)


def test_a_viewer_token_may_read_but_not_apply(cli, users):
    mocker_graph()
    viewer_key = token_create(user=users["viewer"], name="dynamo-cp", via="system")[1]
    assert cli("graphs", "status", "cpdemo", token=viewer_key).returncode == exits.OK
    refused = cli("graphs", "apply", "cpdemo", token=viewer_key)
    assert refused.returncode == exits.AUTH
    assert "403" in err(refused)
    assert not Operation.objects.exists()


def test_an_unreachable_server_and_a_malformed_url_are_reported(cli):
    down = cli("graphs", "list", env={"DYNAMO_CP_URL": "http://127.0.0.1:9"})
    assert down.returncode == exits.UNAVAILABLE
    assert "cannot reach" in err(down)
    assert cli("graphs", "list", env={"DYNAMO_CP_URL": "ftp://x"}).returncode == exits.USAGE


def test_the_config_file_supplies_url_and_token_and_is_private(cli, tmp_path):
    written = cli("config", "set", "--url", cli.url, "--token", cli.token, env={"DYNAMO_CP_URL": None,
                                                                              "DYNAMO_CP_TOKEN": None})
    assert written.returncode == 0, err(written)
    path = cli.home / "dynamo-cp" / "config.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert yaml.safe_load(path.read_text()) == {"url": cli.url, "token": cli.token}
    listed = cli("graphs", "list", env={"DYNAMO_CP_URL": None, "DYNAMO_CP_TOKEN": None})
    assert listed.returncode == exits.OK, err(listed)
    # The environment wins over the file, and a flag over both.
    assert cli("graphs", "list", env={"DYNAMO_CP_TOKEN": "bad"}).returncode == exits.AUTH
    assert cli("graphs", "list", "--token", cli.token, env={"DYNAMO_CP_TOKEN": "bad"}).returncode == exits.OK
    other = tmp_path / "other.yaml"
    other.write_text("url: http://x\nsecret: 1\n")
    broken = cli("graphs", "list", "--config", str(other), env={"DYNAMO_CP_URL": None, "DYNAMO_CP_TOKEN": None})
    assert broken.returncode == exits.USAGE
    assert "unknown key 'secret'" in err(broken)


# ------------------------------------------------------------------ operations and waits


def test_apply_scale_and_delete_wait_for_a_real_worker_with_progress(cli, worker):
    mocker_graph()
    applied = cli("graphs", "apply", "cpdemo", "--wait", "--timeout", "60", "-o", "json")
    assert applied.returncode == exits.OK, err(applied)
    op = json.loads(out(applied))
    assert (op["kind"], op["state"], op["via"], op["requested_by"]) == ("apply", "succeeded", "cli", "operator")
    assert f"operation #{op['id']} apply cpdemo: succeeded" in err(applied)

    scaled = cli("graphs", "scale", "cpdemo", "decode", "2", "--wait", "--timeout", "60")
    assert scaled.returncode == exits.OK, err(scaled)
    assert "scale cpdemo: succeeded" in out(scaled)
    assert Deployment.objects.get(graph__name="cpdemo").replicas["decode"] == 2

    busy = cli("graphs", "delete", "cpdemo", "--definition", "--timeout", "60")
    assert busy.returncode == exits.OK, err(busy)
    assert "definition and revisions deleted" in err(busy)
    assert cli("graphs", "status", "cpdemo").returncode == exits.NOT_FOUND
    ops = json.loads(out(cli("operations", "list", "-o", "json")))
    assert [o["kind"] for o in ops] == []  # the operations went with the graph


def test_operations_wait_times_out_then_reports_a_failure(cli):
    graph = mocker_graph()
    op = Operation.objects.create(graph=graph, kind="apply", via="api", state="pending")
    waited = cli("operations", "wait", str(op.pk), "--timeout", "1.5")
    assert waited.returncode == exits.TIMEOUT
    assert f"operation #{op.pk} apply cpdemo: pending" in err(waited)
    assert "still pending after 1.5s" in err(waited)
    # Off a terminal (CI logs): a line when something changes, not one per poll.
    assert err(waited).count("apply cpdemo: pending") == 1, err(waited)

    def fail_soon():
        time.sleep(1.5)
        Operation.objects.filter(pk=op.pk).update(state="failed", result="no free port in 35000-35001",
                                                  finished_at=timezone.now())

    thread = threading.Thread(target=fail_soon)
    thread.start()
    failed = cli("operations", "wait", str(op.pk), "--timeout", "30")
    thread.join()
    assert failed.returncode == exits.FAILED
    assert "failed" in err(failed)
    assert "no free port" in out(failed)
    lines = [line for line in err(failed).splitlines() if line.startswith(f"operation #{op.pk}")]
    assert lines[0].endswith("pending (0s)") and "failed" in lines[-1]


def test_a_graph_that_is_changing_refuses_a_new_operation_with_409(cli):
    graph = mocker_graph()
    Operation.objects.create(graph=graph, kind="apply", via="api", state="running")
    refused = cli("graphs", "apply", "cpdemo")
    assert refused.returncode == exits.CONFLICT
    assert "already has a running apply operation" in err(refused)


# ------------------------------------------------------------------ benchmarks


def test_benchmarks_refuse_a_graph_that_is_not_serving_and_bad_parameters(cli):
    mocker_graph()
    refused = cli("benchmarks", "run", "cpdemo", "--profile", "streaming-chat")
    assert refused.returncode == exits.CONFLICT, err(refused)
    bad = cli("benchmarks", "run", "cpdemo", "--concurrency", "0")
    assert bad.returncode == exits.INVALID
    assert "concurrency" in err(bad)
    unknown = cli("benchmarks", "run", "cpdemo", "--set", "url=http://elsewhere")
    assert unknown.returncode == exits.INVALID
    assert "url" in err(unknown)
    assert cli("benchmarks", "show", "424242").returncode == exits.NOT_FOUND
    assert not BenchmarkRun.objects.exists()


@pytest.mark.parametrize("timeout", ["-5", "0", "nan", "inf", "1e9", "soon"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused_before_anything_is_sent(cli, timeout):
    mocker_graph()
    scale = cli("graphs", "scale", "cpdemo", "decode", "2", "--wait", "--timeout", timeout)
    assert scale.returncode == exits.USAGE, err(scale)
    assert "--timeout" in err(scale) and "Traceback" not in err(scale)
    request = cli("--request-timeout", timeout, "graphs", "list")
    assert request.returncode == exits.USAGE, err(request)
    assert "--request-timeout" in err(request)
    assert not Operation.objects.exists()  # the scale was never asked for


@pytest.mark.parametrize("args", [("--duration", "nan"), ("--request-rate", "inf"), ("--set", "seed=NaN"),
                                  ("--set", "request_rate=-Infinity")])
def test_a_number_json_cannot_carry_is_a_usage_error_not_a_traceback(cli, args):
    mocker_graph()
    result = cli("benchmarks", "run", "cpdemo", *args)
    assert result.returncode == exits.USAGE, err(result)
    assert "not a finite number" in err(result) and "Traceback" not in err(result)
    assert not BenchmarkRun.objects.exists()


def test_benchmarks_show_prints_each_load_point(cli):
    graph = mocker_graph()
    step = {"index": 0, "concurrency": 50, "artifact": "step-0", "ttft": {"p50": 11.5, "p90": 20.25},
            "itl": {"p50": 1.5, "p90": 2.75}, "request_throughput": 40.0, "output_token_throughput": 1200.0,
            "completed": 200, "errors": 0}
    run = BenchmarkRun.objects.create(graph=graph, profile="streaming-chat", state="succeeded", progress=100,
                                      results={"steps": [step]}, params={})
    shown = cli("benchmarks", "show", str(run.pk))
    assert shown.returncode == exits.OK, err(shown)
    text = out(shown)
    assert f"benchmark #{run.pk} of cpdemo: succeeded 100%" in text
    row = next(line for line in text.splitlines() if line.startswith("0 "))
    assert row.split() == ["0", "50", "11.5", "20.2", "1.50", "2.75", "40.00", "1200.0", "200", "0"]
    listed = json.loads(out(cli("benchmarks", "list", "-o", "json")))
    assert [r["id"] for r in listed] == [run.pk]


def test_the_console_script_is_declared_and_packaged(db):
    import importlib
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module, _, function = project["project"]["scripts"]["dynamo-cp"].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    assert any(module.startswith(p.rstrip("*")) for p in project["tool"]["setuptools"]["packages"]["find"]["include"])
    # It speaks HTTP only: nothing of the server is imported (pip install of the project, no settings).
    probe = subprocess.run([sys.executable, "-c", "import sys, dynamo_cp.main; "
                            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                            "{'django', 'graphs', 'controlplane', 'rest_framework'}))"],
                           capture_output=True, text=True, cwd=ROOT, env={"PATH": os.environ["PATH"]})
    assert probe.stdout.strip() == "[]", probe.stderr


def test_status_wait_ready_follows_the_status_cache_to_ready_or_failed(cli):
    graph = mocker_graph()
    deployment = Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True,
                                           state="progressing", message="1/3 pods ready",
                                           observed_at=timezone.now())

    def ready_soon():
        time.sleep(1.5)
        Deployment.objects.filter(pk=deployment.pk).update(state="ready", message="3/3 pods ready",
                                                           endpoint="http://127.0.0.1:1")

    thread = threading.Thread(target=ready_soon)
    thread.start()
    ready = cli("graphs", "status", "cpdemo", "--wait-ready", "--timeout", "30")
    thread.join()
    assert ready.returncode == exits.OK, err(ready)
    assert "cpdemo: progressing, 0/0 pods ready" in err(ready)
    assert out(ready).startswith("cpdemo: ready")

    Deployment.objects.filter(pk=deployment.pk).update(state="failed", message="need 1 free ports in 1-2")
    failed = cli("graphs", "status", "cpdemo", "--wait-ready", "-o", "json")
    assert failed.returncode == exits.FAILED
    assert json.loads(out(failed))["message"] == "need 1 free ports in 1-2"


# ------------------------------------------------------------------ bad input, every case


def test_every_bad_manifest_is_refused_by_import_and_validate_with_its_message_and_nothing_stored(
        cli, tmp_path, monkeypatch, capsys):
    """The cases of tests/badinput.py, through dynamo-cp's own entry point (in this process, to
    keep the many cases quick) against the live server: a usage or invalid-input exit, the
    server's message on stderr, nothing on stdout, nothing stored."""
    from dynamo_cp.main import main
    from graphs.models import Graph, Revision
    from tests.badinput import CASES

    monkeypatch.setenv("DYNAMO_CP_URL", cli.url)
    monkeypatch.setenv("DYNAMO_CP_TOKEN", cli.token)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cli.home))
    assert CASES
    for case in CASES:
        path = tmp_path / f"{case.id}.yaml"
        path.write_bytes(case.data)
        for verb in ("import", "validate"):
            before = (Graph.objects.count(), Revision.objects.count())
            code = main(["graphs", verb, str(path)])
            captured = capsys.readouterr()
            assert code in (exits.USAGE, exits.INVALID), (case.id, verb, code, captured.err)
            assert case.expect in captured.err, (case.id, verb, captured.err)
            # import prints nothing; validate at most its verdict ("invalid: ...") when the YAML parsed
            assert captured.out in ("",) or (verb == "validate" and captured.out.startswith("invalid: ")), case.id
            assert (Graph.objects.count(), Revision.objects.count()) == before, (case.id, verb)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * (10 * 1024 * 1024))
    assert main(["graphs", "import", str(big)]) == exits.USAGE
    assert "more than a manifest can be" in capsys.readouterr().err
    assert main(["graphs", "import", str(tmp_path / "missing.yaml")]) == exits.USAGE
    assert "no such file" in capsys.readouterr().err
    assert Graph.objects.count() == 0


def test_apply_sends_force_and_recreate_with_its_confirmation(cli):
    """--force and --recreate NAME reach the API as the page's checkbox and confirmation do: against
    a local graph the server answers that they are Kubernetes' options, naming them."""
    graph = mocker_graph("forceful")
    result = cli("graphs", "apply", graph.name, "--force", "--recreate", graph.name, "--dry-run", "-o", "json")
    op = Operation.objects.filter(graph=graph).first()
    if result.returncode == exits.OK:
        assert op is not None and json.loads(out(result))["id"] == op.pk
    else:
        assert op is None and ("force" in err(result) or "recreate" in err(result)), err(result)
    from argparse import Namespace

    from dynamo_cp.graphs import do_apply

    sent = {}

    class Recorder:  # what do_apply posts; the API itself is exercised above
        def post(self, path, json=None, **kwargs):
            sent.update(path=path, body=json)
            return {"id": 1, "kind": "apply", "state": "pending", "graph": "g"}

    args = Namespace(name="g", runtime="kubernetes", cluster="c", namespace="n", api_version="nvidia.com/v1beta1",
                     dry_run=False, force=True, recreate="g", revision=None, wait=False, output="json")
    assert do_apply(args, Recorder()) == exits.OK
    assert sent["path"] == "/api/graphs/g/apply/"
    assert (sent["body"]["force"], sent["body"]["recreate"], sent["body"]["confirm"]) == (True, True, "g")


def test_benchmarks_cancel_stops_a_run_and_a_viewer_is_refused(cli, users):
    spec = build_spec(template="mocker-disagg", name="cancel-me", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    graph = services.graph_create(spec=spec)
    from benchmarks.profiles import resolve

    run = BenchmarkRun.objects.create(graph=graph, revision=graph.head, profile="custom",
                                      params=resolve("custom").model_dump(mode="json"))
    viewer_key = token_create(user=users["viewer"], name="v", via="system")[1]
    refused = cli("benchmarks", "cancel", str(run.pk), token=viewer_key)
    assert refused.returncode == exits.AUTH, err(refused)
    assert BenchmarkRun.objects.get(pk=run.pk).state == "pending"
    done = cli("benchmarks", "cancel", str(run.pk), "-o", "json")
    assert done.returncode == exits.OK, err(done)
    assert json.loads(out(done))["state"] == "cancelled"
    run.refresh_from_db()
    assert run.state == "cancelled"


def test_rollback_runs_an_earlier_revision_again_as_a_new_one_and_says_why_it_cannot(cli):
    graph = mocker_graph()
    pools = {"gpus": 0, "shared_memory": "1Gi", "hf_token_secret": "", "engine_args": "--max-num-batched-tokens 64"}
    changed = build_spec(template="mocker-disagg", name="cpdemo", model="m", backend="mocker",
                         prefill=PoolFields(**pools), decode=PoolFields(**pools))
    services.graph_update(graph=graph, spec=changed, message="tuned")
    undeployed = cli("graphs", "rollback", "cpdemo", "1")
    assert undeployed.returncode == exits.CONFLICT and "not deployed" in err(undeployed)
    Deployment.objects.create(graph=graph, revision=graph.revisions.get(number=2), runtime="local", active=True,
                              state="ready")
    same = cli("graphs", "rollback", "cpdemo", "2")
    assert same.returncode == exits.CONFLICT and "what runs now" in err(same)
    done = cli("graphs", "rollback", "cpdemo", "1", "-o", "json")
    assert done.returncode == exits.OK, err(done)
    op = json.loads(out(done))
    assert (op["kind"], op["via"]) == ("apply", "cli")
    head = graph.revisions.order_by("-number").first()
    assert head.number == 3 and head.spec == graph.revisions.get(number=1).spec
    assert head.message == "rollback to revision 1 (revision 2 was running)"
    assert cli("graphs", "rollback", "cpdemo", "one").returncode == exits.USAGE


def test_compare_studies_and_recommendations_have_verbs(cli):
    from benchmarks.models import Study
    from tests.benchmarks.test_benchmarks_api import _finished_run

    graph = mocker_graph()
    one, two = _finished_run(graph, shape="p1d1"), _finished_run(graph, shape="p2d1", ttft=80.0)
    compared = cli("benchmarks", "compare", str(one.pk), str(two.pk))
    assert compared.returncode == exits.OK, err(compared)
    lines = out(compared).splitlines()
    assert lines[0].split()[:3] == ["RUN", "LABEL", "CONCURRENCY"]
    assert [line.split()[:2] for line in lines[1:3]] == [[str(one.pk), "p1d1"], [str(two.pk), "p2d1"]]
    report = cli("benchmarks", "compare", str(one.pk), str(two.pk), "--report", "csv")
    assert report.returncode == exits.OK and out(report).startswith("Run,Graph,Arm / label")
    missing = cli("benchmarks", "compare", "999999")
    assert missing.returncode != exits.OK

    arms = [{"shape": "p1d1", "phase": "done"}, {"shape": "p2d1", "phase": "done"}]
    study = Study.objects.create(graph=graph, profile="custom", params={}, arms=arms, state="succeeded")
    study.runs.set([one, two])
    listed = cli("studies", "list", "-o", "json")
    assert listed.returncode == exits.OK and [s["id"] for s in json.loads(out(listed))] == [study.pk]
    shown = cli("studies", "show", str(study.pk))
    assert f"dynamo-cp benchmarks compare {one.pk} {two.pk}" in out(shown)
    assert "arms: p1d1 (done), p2d1 (done)" in out(shown)
    one_arm = cli("studies", "run", "cpdemo", "--arms", "p1d1")
    assert one_arm.returncode == exits.INVALID and "arms: a study compares 2" in err(one_arm)
    started = cli("studies", "run", "cpdemo", "--arms", "p1d1,p2d1", "-o", "json")
    assert started.returncode == exits.OK, err(started)
    assert [a["shape"] for a in json.loads(out(started))["arms"]] == ["p1d1", "p2d1"]

    not_running = cli("recommendations", "create", "cpdemo")
    assert not_running.returncode == exits.CONFLICT and "cpdemo is not deployed" in err(not_running)
    assert cli("recommendations", "create", "cpdemo", "--runs", "one").returncode == exits.USAGE
    assert cli("recommendations", "list").returncode == exits.OK
