"""The Frontend's router mode in the spec: its table of flags is dynamo.frontend 1.6.1's own
(read from the installed wheel's argument parser), it survives import and render in both API
versions, an explicit edit changes only the flag, and validation says what 1.6.1 refuses."""

from __future__ import annotations

import argparse
import copy

import pytest

from core.catalog import build_spec
from core.checks import operational_findings
from core.dgd.commandline import ROUTER_FLAGS, router_mode, with_router_mode
from core.dgd.parse import import_manifest
from core.dgd.render import V1ALPHA1, V1BETA1, render
from core.facts import ROUTER_MODES
from graphs.runtimes.local.argv import build_process_argv, validate_extra_args
from tests import factories


def _wheel_parser() -> argparse.ArgumentParser:
    from dynamo.common.configuration.groups.kv_router_args import KvRouterArgGroup
    from dynamo.common.configuration.groups.router_args import RouterArgGroup

    parser = argparse.ArgumentParser()
    RouterArgGroup(default_router_mode="round-robin", include_frontend_only=True).add_arguments(parser)
    KvRouterArgGroup().add_arguments(parser)
    return parser


def test_the_router_flag_table_is_the_installed_dynamo_frontends():
    wheel: dict[str, argparse.Action] = {}
    for action in _wheel_parser()._actions:
        for option in action.option_strings:
            if option.startswith("--") and not option.startswith("--no-") and option != "--help" \
                    and action.help != argparse.SUPPRESS:
                wheel[option] = action
    ours = set(ROUTER_FLAGS)
    # --router-kv-overlap-score-weight is accepted but hidden (deprecated): we accept it too.
    assert set(wheel) <= ours
    assert ours - set(wheel) <= {"--router-kv-overlap-score-weight", "--kv-overlap-score-weight"}
    for flag, action in wheel.items():
        kind, choices, _ = ROUTER_FLAGS[flag]
        is_bool = action.nargs == 0
        assert (kind == "bool") == is_bool, flag
        if action.choices:
            assert tuple(action.choices) == choices, flag
    assert tuple(wheel["--router-mode"].choices) == ROUTER_MODES


def test_kv_only_flags_are_those_of_the_kv_router_group():
    from dynamo.common.configuration.groups.kv_router_args import KvRouterArgGroup

    parser = argparse.ArgumentParser()
    KvRouterArgGroup().add_arguments(parser)
    kv = {o for a in parser._actions for o in a.option_strings if o.startswith("--") and not o.startswith("--no-")}
    kv.discard("--help")
    assert {flag for flag, (_, _, kv_only) in ROUTER_FLAGS.items() if kv_only} == kv


@pytest.mark.parametrize(("command", "args", "expected"), [
    (["python3"], ["-m", "dynamo.frontend"], (["python3"], ["-m", "dynamo.frontend", "--router-mode", "kv"])),
    (["python3"], ["-m", "dynamo.frontend", "--router-mode", "random", "--http-port", "8000"],
     (["python3"], ["-m", "dynamo.frontend", "--router-mode", "kv", "--http-port", "8000"])),
    (["python3", "-m", "dynamo.frontend", "--router-mode=random"], None,
     (["python3", "-m", "dynamo.frontend", "--router-mode=kv"], None)),
    (["/bin/sh", "-c"], ["python3 -m dynamo.frontend --http-port 8000 && echo done"],
     (["/bin/sh", "-c"], ["python3 -m dynamo.frontend --http-port 8000 --router-mode kv && echo done"])),
    (["sh", "-c"], ["exec python3 -m dynamo.frontend --router-mode round-robin"],
     (["sh", "-c"], ["exec python3 -m dynamo.frontend --router-mode kv"])),
])
def test_an_edit_changes_only_the_router_flag(command, args, expected):
    assert with_router_mode(command, args, "kv") == expected
    assert router_mode(*expected) == "kv"


def test_an_unknown_router_mode_is_refused():
    with pytest.raises(ValueError, match="is not one of"):
        with_router_mode(["python3"], ["-m", "dynamo.frontend"], "fastest")


def _kv_spec():
    return build_spec(template="mocker-agg-kv", name="kv")


@pytest.mark.parametrize("api_version", [V1ALPHA1, V1BETA1])
def test_the_router_mode_survives_import_and_render_in_both_api_versions(api_version):
    manifest = render(_kv_spec(), api_version)
    frontend = (manifest["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"] if api_version == V1ALPHA1
                else manifest["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0])
    assert frontend["args"] == ["-m", "dynamo.frontend", "--router-mode", "kv"]
    spec = import_manifest(copy.deepcopy(manifest))
    assert spec.router_mode == "kv"
    assert render(spec, api_version) == manifest
    other = V1BETA1 if api_version == V1ALPHA1 else V1ALPHA1
    assert import_manifest(render(spec, other)).router_mode == "kv"


def test_a_frontend_without_a_command_line_gets_its_mode_through_the_env():
    manifest = render(build_spec(template="vllm-disagg", name="g"), V1BETA1)
    main = manifest["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]
    del main["command"], main["args"]
    spec = import_manifest(manifest)
    assert spec.router_mode == "round-robin"  # Dynamo's default
    edited = spec.with_router_mode("kv")
    assert edited.router_mode == "kv"
    main = render(edited, V1BETA1)["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]
    assert main["env"] == [{"name": "DYN_ROUTER_MODE", "value": "kv"}] and "args" not in main


def _findings(spec, extra_args=(), env=None):
    manifest = render(spec, V1BETA1)
    main = manifest["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]
    main["args"] = [*main["args"], *extra_args]
    if env:
        main["env"] = env
    return {(f.code, f.severity): f for f in operational_findings(manifest)
            if f.code.startswith(("router", "kv_router"))}


def test_a_valid_kv_graph_has_no_router_findings():
    assert _findings(_kv_spec(), ["--router-temperature", "0.5", "--no-router-kv-events"]) == {}


@pytest.mark.parametrize(("args", "message"), [
    (["--router-mode", "fastest"], "--router-mode 'fastest' is not one of round-robin, random"),
    (["--router-temperature", "hot"], "--router-temperature takes a number, not 'hot'"),
    (["--router-event-threads", "1.5"], "--router-event-threads takes a whole number"),
    (["--router-bogus", "1"], "dynamo.frontend 1.6.1 has no flag --router-bogus"),
    (["--router-kv-events", "yes"], "--router-kv-events takes no value"),
])
def test_a_router_flag_1_6_1_refuses_is_an_error_at_the_frontends_args(args, message):
    spec = build_spec(template="mocker-agg-kv", name="kv").with_router_mode("kv")
    manifest = render(spec, V1BETA1)
    main = manifest["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]
    main["args"] = ["-m", "dynamo.frontend", *args] if args[0] == "--router-mode" else [*main["args"], *args]
    [finding] = [f for f in operational_findings(manifest) if f.code == "router_flag_invalid"]
    assert message in finding.message
    assert finding.path == "spec.components[0].podTemplate.spec.containers[main].args"


def test_an_invalid_mode_in_the_env_is_an_error_too():
    spec = build_spec(template="vllm-disagg", name="g")
    found = _findings(spec, env=[{"name": "DYN_ROUTER_MODE", "value": "nearest"}])
    assert ("router_flag_invalid", "error") in found


def test_kv_router_flags_without_kv_routing_are_a_warning():
    spec = build_spec(template="vllm-disagg", name="g", router_mode="round-robin")
    found = _findings(spec, ["--router-temperature", "0.5"])
    warning = found[("router_flag_unused", "warning")]
    assert "--router-temperature" in warning.message and "round-robin" in warning.message


def test_kv_routing_over_workers_without_prefix_caching_is_a_warning():
    spec = _kv_spec()
    data = spec.model_dump()
    data["services"][1]["args"] = [*data["services"][1]["args"], "--no-enable-prefix-caching"]
    manifest = render(type(spec).model_validate(data), V1BETA1)
    [finding] = [f for f in operational_findings(manifest) if f.code == "kv_router_without_prefix_cache"]
    assert finding.path == "spec.components[1].podTemplate.spec.containers[main].args"


def test_the_local_frontend_runs_in_the_graphs_mode_with_its_router_tuning():
    argv = build_process_argv(kind="frontend", http_port=8000, router_mode="kv",
                              extra_args=["--router-temperature", "0.5", "--no-router-kv-events"])
    assert argv[argv.index("--router-mode") + 1] == "kv"
    assert argv[-3:] == ["--router-temperature", "0.5", "--no-router-kv-events"]
    with pytest.raises(ValueError, match="not allowed"):  # reads a file: never from a spec
        validate_extra_args("frontend", ["--router-tracking-key-file", "/etc/shadow"])
    with pytest.raises(ValueError, match="router mode"):
        build_process_argv(kind="frontend", http_port=8000, router_mode="direct")


# ------------------------------------------------------------------ through the UI and the API


@pytest.mark.django_db
def test_the_form_creates_a_kv_routed_graph(client_for):
    data = {"template": "mocker-agg-kv", "name": "kvform", "backend": "mocker", "dynamo_version": "1.6.1",
            "router_mode": "kv", "action": "create"}
    for pool in ("prefill", "decode"):
        data.update({f"{pool}_replicas": "2", f"{pool}_gpus": "0", f"{pool}_shared_memory": "16Gi"})
    response = client_for("operator").post("/graphs/new/", data)
    assert response.status_code == 302, response.content.decode()[-2000:]
    from graphs.models import Graph

    assert Graph.objects.get(name="kvform").head.graph_spec.router_mode == "kv"


@pytest.mark.django_db
def test_the_api_creates_from_a_template_with_a_router_mode_and_refuses_an_unknown_one(client_for):
    client = client_for("operator")
    ok = client.post("/api/graphs/from-template/", {"template": "vllm-disagg", "name": "kvapi", "router_mode": "kv"},
                     content_type="application/json")
    assert ok.status_code == 201, ok.content
    assert "--router-mode" in ok.json()["spec"]["services"][0]["args"] and ok.json()["router_mode"] == "kv"
    bad = client.post("/api/graphs/from-template/", {"template": "vllm-disagg", "name": "kvbad",
                                                      "router_mode": "fastest"}, content_type="application/json")
    assert bad.status_code == 400 and "router_mode" in bad.json()


# ------------------------------------------------------------------ the local runtime, without Dynamo
# tests/graphs/local/test_kv_routing_live.py sees the same through a running graph; these need no Dynamo, so
# `make test-fast` sees them.

@pytest.mark.django_db
def test_the_local_operator_starts_the_frontend_in_the_graphs_router_mode(tmp_path, settings):
    from graphs.models import Deployment
    from graphs.runtimes.local.operator import LocalOperator
    from graphs.services import graph_create

    settings.LOCAL_RUNTIME_DIR = tmp_path
    operator = LocalOperator(runtime_dir=tmp_path, port_min=25000, port_max=25999)
    try:
        plans = {}
        for mode in ("kv", "random"):
            spec = build_spec(template="mocker-agg-kv", name=f"g-{mode}", model="m", backend="mocker",
                              router_mode=mode)
            graph = graph_create(spec=spec)
            dep = Deployment.objects.create(graph=graph, revision=graph.head, runtime="local", active=True)
            [frontend] = [p for p in operator.plan(dep) if p.role == "frontend"]
            plans[mode] = frontend.argv
    finally:
        operator.shutdown()
    for mode, argv in plans.items():
        # The pod's command is argv[:3] and its args the rest (as the status page shows them).
        assert argv[1:3] == ["-m", "dynamo.frontend"]
        args = argv[3:]
        assert args.count("--router-mode") == 1 and args[args.index("--router-mode") + 1] == mode


@pytest.mark.django_db
def test_the_status_api_the_graph_page_and_the_cli_name_the_graphs_router_mode(api_for, client_for):
    from dynamo_cp.graphs import _status_table
    from graphs.models import Deployment

    graph = factories.graph("kvg", template="mocker-agg-kv", model="m", backend="mocker")
    Deployment.objects.create(graph=graph, revision=graph.head, runtime="local", active=True, state="ready")
    status = api_for("viewer").get("/api/graphs/kvg/status/").json()
    assert status["router_mode"] == "kv"
    page = client_for("viewer").get("/graphs/kvg/").content.decode()
    assert '<strong id="router-mode">kv</strong>' in page
    # dynamo-cp graphs status prints the API's answer as this table
    assert "router: kv" in _status_table(status).splitlines()
