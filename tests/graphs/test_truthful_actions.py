"""Every action ends in a visible, specific result, and the UI, the API and the CLI agree on what
is allowed: the rules at the lowest level that sees each (services, views through the test
client). tests/graphs/test_browser_truthful.py proves the same from Chromium."""

from __future__ import annotations

import html
import re
import threading
import time
from pathlib import Path

import pytest
import yaml
from django.db import connections

from core.catalog import TEMPLATES, PoolFields, build_spec
from core.dgd.render import V1ALPHA1, V1BETA1, conversion_losses, render
from core.errors import OperationRefused
from core.planner_config import PlannerSettings
from core.specio import dump_yaml
from graphs import operations, services
from graphs.diagnosis import diagnose
from graphs.models import Deployment, Graph, Operation, Pod
from graphs.runtimes.base import Observation, PodStatus
from graphs.runtimes.local import hostlimits
from graphs.status_cache import observation_record
from tests import factories

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
ROOT_EXAMPLE = Path(__file__).resolve().parents[2] / "graphs" / "examples" / "vllm-disagg.yaml"

# A v1alpha1 graph as operators write it: resources with requests and limits (cpu, memory, gpu)
# and probes on the service, none of which v1beta1 spells the same way.
ALPHA_WITH_RESOURCES = """
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {name: resourced}
spec:
  services:
    Frontend:
      componentType: frontend
      replicas: 1
      extraPodSpec: {mainContainer: {image: "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"}}
    decode:
      componentType: worker
      subComponentType: decode
      replicas: 1
      sharedMemory: {size: 16Gi}
      resources:
        requests: {cpu: "4", memory: 40Gi, gpu: "1"}
        limits: {cpu: "8", memory: 64Gi, gpu: "1"}
      readinessProbe: {httpGet: {path: /health, port: 9090}, periodSeconds: 10}
      extraPodSpec:
        mainContainer:
          image: "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
          command: [python3, -m, dynamo.vllm]
          args: [--model, Qwen/Qwen3-0.6B, --disaggregation-mode, decode]
    prefill:
      componentType: worker
      subComponentType: prefill
      replicas: 1
      sharedMemory: {size: 16Gi}
      resources:
        requests: {cpu: "2", memory: 20Gi, gpu: "1"}
        limits: {gpu: "1"}
      extraPodSpec:
        mainContainer:
          image: "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
          command: [python3, -m, dynamo.vllm]
          args: [--model, Qwen/Qwen3-0.6B, --disaggregation-mode, prefill]
"""


def text(response) -> str:
    return html.unescape(response.content.decode())


@pytest.fixture
def operator(client_for):
    return client_for("operator")


def _deploy(graph: Graph, **fields) -> Deployment:
    """A graph the local runtime runs (the status cache as the local operator leaves it)."""
    return Deployment.objects.create(graph=graph, runtime="local", revision=graph.head, active=True, state="ready",
                                     manifest=render(graph.head.graph_spec), **fields)


def _template_form(page: str) -> dict:
    """The create form as the page renders it: every named input with its value, every select
    with its selected option."""
    data = {}
    for tag in re.findall(r"<input[^>]*>", page):
        name = re.search(r'name="([^"]+)"', tag)
        if not name or 'type="checkbox"' in tag or 'type="submit"' in tag:
            continue
        value = re.search(r'value="([^"]*)"', tag)
        data[name.group(1)] = html.unescape(value.group(1)) if value else ""
    for name, body in re.findall(r'<select name="([^"]+)"[^>]*>(.*?)</select>', page, re.S):
        chosen = re.search(r'<option value="([^"]*)"[^>]*selected', body) or re.search(r'<option value="([^"]*)"', body)
        data[name] = chosen.group(1) if chosen else ""
    return data


# ------------------------------------------------------------------ create from every template


@pytest.mark.parametrize("key", list(TEMPLATES))
def test_every_template_is_created_from_the_fields_its_page_shows(operator, key):
    page = text(operator.get(f"/graphs/new/?template={key}"))
    data = _template_form(page)
    assert ("prefill_replicas" in data) is TEMPLATES[key].disaggregated
    data.update(name=f"t-{key}", action="create")
    response = operator.post("/graphs/new/", data)
    assert response.status_code == 302, text(response)[:3000]
    spec = Graph.objects.get(name=f"t-{key}").head.graph_spec
    roles = sorted(s.role for s in spec.services)
    assert roles == (["decode", "frontend", "prefill"] if TEMPLATES[key].disaggregated else ["frontend", "worker"])


@pytest.mark.parametrize("key", list(TEMPLATES))
def test_every_template_previews_from_the_fields_its_page_shows(operator, key):
    data = {**_template_form(text(operator.get(f"/graphs/new/?template={key}"))), "name": "preview-me",
            "action": "preview"}
    body = text(operator.post("/graphs/new/", data, **HTMX))
    assert "name: preview-me" in body and "Fill in the form" not in body


def test_a_preview_of_an_incomplete_form_names_what_is_missing(operator):
    data = {**_template_form(text(operator.get("/graphs/new/?template=mocker-disagg"))), "name": "",
            "decode_replicas": "-3", "action": "preview"}
    body = text(operator.post("/graphs/new/", data, **HTMX))
    assert "Fix these to see the manifest" in body
    assert "Name: This field is required." in body
    assert "Replicas: Ensure this value is greater than or equal to 0." in body


def test_the_planner_load_target_is_chosen_from_the_form(operator):
    data = {**_template_form(text(operator.get("/graphs/new/?template=mocker-disagg"))), "name": "loaded",
            "action": "create", "planner_enabled": "on", "planner_optimization_target": "load"}
    refused = text(operator.post("/graphs/new/", data))
    assert "optimization target 'load' needs prefill_scale_up_queue_tokens" in refused
    data.update(planner_prefill_scale_up_queue_tokens="4000", planner_prefill_scale_down_queue_tokens="1000",
                planner_decode_scale_up_kv_rate="0.8", planner_decode_scale_down_kv_rate="0.3")
    assert operator.post("/graphs/new/", data).status_code == 302
    planner = Graph.objects.get(name="loaded").head.graph_spec.service("Planner")
    config = " ".join(planner.args)
    assert '"optimization_target":"load"' in config and '"decode_scale_up_kv_rate":0.8' in config


# ------------------------------------------------------------------ refusals in the page


def test_a_refused_scale_of_a_planner_pool_is_shown_above_the_status_and_offers_force(operator):
    spec = build_spec(template="mocker-disagg", name="planned", planner=PlannerSettings(),
                      prefill=PoolFields(gpus=0, hf_token_secret=""), decode=PoolFields(gpus=0, hf_token_secret=""))
    graph = services.graph_create(spec=spec)
    _deploy(graph)
    refused = operator.post("/graphs/planned/scale/", {"service": "decode", "replicas": "3"}, **HTMX)
    assert refused.status_code == 409
    # Outside the polled status (its 2 s poll would wipe it), until the next action.
    assert refused["HX-Retarget"] == "#action-message" and refused["HX-Reswap"] == "innerHTML"
    body = text(refused)
    assert "decode is managed by Dynamo's Planner" in body
    assert 'name="force" value="1"' in body and "Scale decode to 3 anyway (force)" in body
    assert not Operation.objects.exists()
    forced = operator.post("/graphs/planned/scale/", {"service": "decode", "replicas": "3", "force": "1"}, **HTMX)
    assert forced.status_code == 200
    assert '<div id="action-message" hx-swap-oob="true"' in text(forced)  # the refusal line is cleared
    assert Operation.objects.get().params == {"service": "decode", "replicas": 3, "force": True}


def test_every_refused_graph_action_answers_its_message_for_the_action_line(operator):
    graph = factories.graph("old", template="vllm-disagg", dynamo_version="0.5.1")
    for url, data, message in [
        ("/graphs/old/apply/", {"apiVersion": V1BETA1}, "serve only nvidia.com/v1alpha1"),
        ("/graphs/old/apply/", {"apiVersion": "v9"}, "unknown apiVersion 'v9'"),
        ("/graphs/old/scale/", {"service": "decode", "replicas": "2"}, "old is not deployed: apply it first"),
        ("/graphs/old/scale/", {"service": "decode", "replicas": "two"}, "replicas must be a whole number"),
        ("/graphs/old/undeploy/", {}, "old is not deployed"),
    ]:
        response = operator.post(url, data, **HTMX)
        assert response.status_code == 409, url
        assert response["HX-Retarget"] == "#action-message"
        assert message in text(response), (url, text(response))
    assert not Operation.objects.filter(graph=graph).exists()


# ------------------------------------------------------------------ API versions


def test_a_graph_before_v1beta1_is_applied_in_v1alpha1_by_page_and_api(operator, api_for):
    text_ = ROOT_EXAMPLE.read_text()  # Dynamo 0.5.1, v1alpha1
    graph, _rev, _report = services.graph_import(obj=yaml.safe_load(text_), text=text_)
    assert operator.post(f"/graphs/{graph.name}/apply/", {"runtime": "local"}, **HTMX).status_code == 200
    assert Operation.objects.get().params["apiVersion"] == V1ALPHA1
    Operation.objects.all().delete()
    response = api_for("operator").post(f"/api/graphs/{graph.name}/apply/", {"runtime": "local"}, format="json")
    assert response.status_code == 202, response.json()
    assert Operation.objects.get().params["apiVersion"] == V1ALPHA1
    # dynamo-cp sends no apiVersion unless told (dynamo_cp/graphs.py): the same default.


def test_a_created_graph_of_a_current_release_defaults_to_v1beta1(db):
    graph = factories.graph("fresh", template="vllm-disagg")
    assert graph.head.api_version == V1BETA1


def test_edit_yaml_opens_an_alpha_graph_in_alpha_and_a_resave_loses_nothing(operator):
    graph, _rev, _report = services.graph_import(obj=yaml.safe_load(ALPHA_WITH_RESOURCES), text=ALPHA_WITH_RESOURCES)
    page = text(operator.get("/graphs/resourced/edit/"))
    opened = yaml.safe_load(re.search(r"<textarea[^>]*>(.*?)</textarea>", page, re.S).group(1))
    assert opened == yaml.safe_load(ALPHA_WITH_RESOURCES)
    response = operator.post("/graphs/resourced/edit/", {"yaml": dump_yaml(opened), "expected_revision": "1",
                                                         "message": "re-saved"})
    assert response.status_code == 302, text(response)[:2000]
    graph.refresh_from_db()
    assert graph.head.number == 2 and graph.head.source_api_version == V1ALPHA1
    assert render(graph.head.graph_spec, V1ALPHA1) == yaml.safe_load(ALPHA_WITH_RESOURCES)
    exported = yaml.safe_load(operator.get("/graphs/resourced/export/").content)
    assert exported == yaml.safe_load(ALPHA_WITH_RESOURCES)


def test_an_alpha_graph_exported_as_beta_carries_resources_and_probes_field_by_field(operator):
    services.graph_import(obj=yaml.safe_load(ALPHA_WITH_RESOURCES), text=ALPHA_WITH_RESOURCES)
    beta = yaml.safe_load(operator.get(f"/graphs/resourced/export/?apiVersion={V1BETA1}").content)
    components = {c["name"]: c for c in beta["spec"]["components"]}
    decode = components["decode"]["podTemplate"]["spec"]["containers"][0]
    assert decode["resources"] == {"requests": {"cpu": "4", "memory": "40Gi", "nvidia.com/gpu": "1"},
                                   "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}}
    assert decode["readinessProbe"] == {"httpGet": {"path": "/health", "port": 9090}, "periodSeconds": 10}
    prefill = components["prefill"]["podTemplate"]["spec"]["containers"][0]
    assert prefill["resources"] == {"requests": {"cpu": "2", "memory": "20Gi", "nvidia.com/gpu": "1"},
                                    "limits": {"nvidia.com/gpu": "1"}}
    # And back: the beta export imported again renders the same v1beta1 object.
    again = services.spec_from_manifest(beta)
    assert render(again, V1BETA1) == beta


def test_a_lossy_conversion_is_refused_naming_each_field(operator, api_for):
    manifest = yaml.safe_load(ALPHA_WITH_RESOURCES)
    manifest["metadata"]["name"] = "lossy"
    # v1alpha1's componentType takes any string; v1beta1's type is an enum without "main"
    # (deploy/operator/api/v1beta1 ComponentType at 2a6da14c). Fields v1beta1 has no place for but
    # the operator keeps in its nvidia.com/dgd-spec annotation (annotations, ingress) are not lost.
    manifest["spec"]["services"]["decode"]["annotations"] = {"team": "inference"}
    manifest["spec"]["services"]["helper"] = {"componentType": "main", "replicas": 1}
    text_ = dump_yaml(manifest)
    graph, _rev, _report = services.graph_import(obj=manifest, text=text_)
    assert [p for p, _ in conversion_losses(graph.head.graph_spec, V1BETA1)] == [
        "spec.services.helper.componentType"]
    page = operator.get(f"/graphs/lossy/export/?apiVersion={V1BETA1}")
    assert page.status_code == 409
    assert "spec.services.helper.componentType (componentType 'main' is not a nvidia.com/v1beta1 type" in text(page)
    api = api_for("operator").get(f"/api/graphs/lossy/export/?apiVersion={V1BETA1}")
    assert api.status_code == 409 and "spec.services.helper.componentType" in api.json()["detail"]
    with pytest.raises(OperationRefused, match=r"spec\.services\.helper\.componentType"):
        operations.graph_apply(graph=graph, api_version=V1BETA1)
    # In its own version nothing is lost, and that is what every default picks.
    assert yaml.safe_load(operator.get("/graphs/lossy/export/").content) == manifest


# ------------------------------------------------------------------ what the runtime can run


def test_a_scale_past_the_local_process_limit_is_refused_by_page_and_api(operator, api_for, settings):
    settings.LOCAL_RUNTIME_MAX_PROCESSES = 6
    graph = factories.graph("big")
    _deploy(graph)
    response = api_for("operator").post("/api/graphs/big/scale/", {"service": "decode", "replicas": 100},
                                        format="json")
    assert response.status_code == 409
    assert response.json()["detail"].startswith(
        "the local runtime runs at most 6 processes on this host (setting LOCAL_RUNTIME_MAX_PROCESSES) and other "
        "graphs run 0: decode at 100 replicas makes big need 102; at most 4 replicas of decode fit now")
    page = operator.post("/graphs/big/scale/", {"service": "decode", "replicas": "100"}, **HTMX)
    assert page.status_code == 409 and "LOCAL_RUNTIME_MAX_PROCESSES" in text(page)
    assert api_for("operator").post("/api/graphs/big/scale/", {"service": "decode", "replicas": 4},
                                    format="json").status_code == 202


def test_an_apply_the_host_has_no_inotify_instances_for_is_refused_naming_the_limit(operator, tmp_path,
                                                                                     monkeypatch):
    limit = tmp_path / "max_user_instances"
    limit.write_text(f"{hostlimits.inotify_in_use() + 5}\n")  # room for half a frontend
    monkeypatch.setattr(hostlimits, "INOTIFY_LIMIT_FILE", limit)
    graph = factories.graph("watched")
    with pytest.raises(OperationRefused, match=r"fs.inotify.max_user_instances is \d+, \d+ are in use, and 1 more "
                                               r"frontend need about 10 .*sudo sysctl -w "
                                               r"fs.inotify.max_user_instances=1024"):
        operations.graph_apply(graph=graph)


def test_too_many_open_files_is_diagnosed_as_the_inotify_limit(db):
    graph = factories.graph("crashy")
    deployment = _deploy(graph)
    pod = Pod(deployment=deployment, name="crashy-frontend-0", service="Frontend", role="frontend",
              phase="CrashLoopBackOff", ready=False, restarts=4,
              last_log="Error: Too many open files (os error 24)\n")
    (found,) = [d for d in diagnose(deployment, [pod]) if "crashy-frontend-0" in d.title]
    assert found.title == "crashy-frontend-0 hit this host's inotify limit (fs.inotify.max_user_instances)"
    assert "sudo sysctl -w fs.inotify.max_user_instances=1024" in found.fix
    assert "fix the command line" not in found.fix


class Scaling:
    """A scale run by a worker (a thread with its own connection, as a Celery worker is), which
    waits for the local runtime to run the new size; the test plays the local operator."""

    def __init__(self, graph: Graph, replicas: int):
        self.deployment = Deployment.objects.get(graph=graph)
        self.op = operations.graph_scale(graph=graph, service="decode", replicas=replicas, via="api")
        self.worker = threading.Thread(target=self._run, daemon=True)
        self.worker.start()
        deadline = time.monotonic() + 10
        while Deployment.objects.get(pk=self.deployment.pk).generation == self.deployment.generation:
            assert time.monotonic() < deadline, "the scale did not write its desired state"
            time.sleep(0.02)
        self.deployment.refresh_from_db()

    def _run(self) -> None:
        try:
            operations.operation_run(self.op.pk)
        finally:
            connections.close_all()

    def ended(self) -> Operation:
        self.worker.join(15)
        assert not self.worker.is_alive()
        return Operation.objects.get(pk=self.op.pk)


def _pods(n: int) -> list[PodStatus]:
    return [PodStatus(name=f"w-decode-{i}", service="decode", role="decode", phase="Running", ready=False)
            for i in range(n)]


@pytest.mark.django_db(transaction=True)
def test_a_local_scale_succeeds_only_once_the_runtime_runs_the_new_size():
    graph = factories.graph("w")
    _deploy(graph)
    scaling = Scaling(graph, 2)
    deployment = scaling.deployment
    op = Operation.objects.get(pk=scaling.op.pk)
    assert op.state == "running" and deployment.replicas == {"decode": 2}  # asked, and waiting
    # An observation of the old generation, then one of the new generation with one pod: still waiting.
    observation_record(deployment, Observation(state="ready", pods=_pods(2)), observed_generation=0)
    observation_record(deployment, Observation(state="progressing", pods=_pods(1)),
                       observed_generation=deployment.generation)
    time.sleep(0.6)
    assert Operation.objects.get(pk=op.pk).state == "running"
    observation_record(deployment, Observation(state="progressing", pods=_pods(2)),
                       observed_generation=deployment.generation)
    done = scaling.ended()
    assert (done.state, done.result) == ("succeeded", "decode: 1 → 2 replicas (2 running, observed)")
    assert done.params == {"service": "decode", "replicas": 2}  # the request as it was made
    deployment.refresh_from_db()
    assert deployment.state == "progressing"  # as observed: the end of the scale writes no stale copy back


@pytest.mark.django_db(transaction=True)
def test_a_local_scale_the_runtime_cannot_run_fails_with_what_it_reports():
    graph = factories.graph("f")
    _deploy(graph)
    scaling = Scaling(graph, 3)
    observation_record(scaling.deployment, Observation(state="failed", message="not enough GPUs on this host",
                                                       pods=_pods(1)),
                       observed_generation=scaling.deployment.generation)
    failed = scaling.ended()
    assert (failed.state, failed.result) == (
        "failed", "decode: the runtime cannot run 3 replica(s): not enough GPUs on this host")
    assert Deployment.objects.get(graph=graph).replicas == {"decode": 3}  # still asked for


@pytest.mark.django_db(transaction=True)
def test_a_local_scale_never_observed_fails_at_its_deadline_naming_the_setting(settings):
    settings.OPERATION_OBSERVE_SECONDS = 1
    graph = factories.graph("late")
    _deploy(graph, message="1/2 pods ready")
    failed = Scaling(graph, 2).ended()
    assert failed.state == "failed"
    assert failed.result == ("the local runtime did not run 2 replica(s) of decode within 1 s (setting "
                             "OPERATION_OBSERVE_SECONDS); it reports: 1/2 pods ready")
    event = graph.events.get(reason="ScaleNotObserved")
    assert event.type == "Warning" and event.message == failed.result


# ------------------------------------------------------------------ names and stored errors


def test_a_name_no_cluster_can_take_is_refused_at_save_not_at_apply(operator):
    data = {**_template_form(text(operator.get("/graphs/new/?template=mocker-disagg"))), "name": "g" * 63,
            "action": "create"}
    response = operator.post("/graphs/new/", data)
    assert response.status_code == 400
    assert "the operator names this component's resources 'ggg" in text(response)
    assert not Graph.objects.exists()


def test_a_rewritten_name_is_reported_as_the_user_wrote_it(operator):
    manifest = yaml.safe_load(ROOT_EXAMPLE.read_text())
    manifest["metadata"]["name"] = "Llama.Prod"
    response = operator.post("/graphs/import/", {"yaml": dump_yaml(manifest)})
    body = text(response)
    assert response.status_code == 400
    assert "DynamoGraphDeployment name 'Llama.Prod' is not a valid Kubernetes name" in body
    assert "'Llama-Prod'" not in body


def test_a_stored_revision_with_errors_says_it_cannot_be_applied_beside_apply(operator):
    services.graph_create(spec=build_spec(template="vllm-disagg", name="gpuless", prefill=PoolFields(gpus=0),
                                          decode=PoolFields(gpus=0)))
    page = text(operator.get("/graphs/gpuless/"))
    assert re.search(r'id="head-errors"[^>]*>Revision 1 has \d+ errors? and cannot be applied', page)


# ------------------------------------------------------------------ smaller things


def test_the_audit_link_opens_the_audit_page_not_the_api(client_for):
    page = text(client_for("admin").get("/graphs/"))
    assert '<a href="/audit/">Audit</a>' in page
    assert client_for("admin").get("/audit/")["Content-Type"].startswith("text/html")


def test_a_viewers_403_is_one_line_in_the_web_log_without_a_traceback(client_for):
    import io
    import logging

    (console,) = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)
                  and any(type(f).__name__ == "RefusalWithoutTraceback" for f in h.filters)]
    stream = io.StringIO()
    old = console.setStream(stream)
    try:
        assert client_for("viewer").get("/graphs/new/").status_code == 403
    finally:
        console.setStream(old)
    logged = stream.getvalue()
    assert "Forbidden (Permission denied): /graphs/new/" in logged
    assert "Traceback" not in logged and "PermissionDenied" not in logged


def test_the_v1alpha1_finding_advises_v1beta1_only_where_nothing_would_be_lost(db):
    from core.validation import validate_manifest

    manifest = yaml.safe_load(ALPHA_WITH_RESOURCES)
    (clean,) = [f for f in validate_manifest(manifest).findings if f.code == "v1alpha1_deprecated"]
    assert clean.fix == "export this graph as nvidia.com/v1beta1"
    manifest["spec"]["services"]["decode"]["annotations"] = {"team": "inference"}  # kept by the operator
    (kept,) = [f for f in validate_manifest(manifest).findings if f.code == "v1alpha1_deprecated"]
    assert kept.fix == "export this graph as nvidia.com/v1beta1"
    manifest["spec"]["services"]["helper"] = {"componentType": "main", "replicas": 1}
    (lossy,) = [f for f in validate_manifest(manifest).findings if f.code == "v1alpha1_deprecated"]
    assert lossy.fix == ("to move it to nvidia.com/v1beta1, first remove what v1beta1 has no place for: "
                         "spec.services.helper.componentType")
