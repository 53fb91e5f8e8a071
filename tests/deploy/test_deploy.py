"""The cluster deployment (deploy/kustomize/, deploy/Dockerfile, .dockerignore).

Every overlay is rendered with ``kubectl kustomize`` (the kubectl on PATH: scripts/services.sh
installs Debian's kubernetes-client when there is none) and every rendered object is validated
against the Kubernetes 1.32 JSON schemas bundled in kubernetes-validate, strictly (no unknown
field). Then the RBAC is held to exactly what the product does (never a read of Secrets), the
pods to the restricted security profile with probes and resources, and the commands, settings
and image to what this repository really has: a renamed module, management command or
setting breaks the deployment here first."""

from __future__ import annotations

import fnmatch
import functools
import importlib
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE = REPO / "deploy" / "kustomize"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
SETTINGS_PY = REPO / "controlplane" / "settings.py"
KUBERNETES_VERSION = "1.32"
OVERLAYS = sorted(p.parent.name for p in (KUSTOMIZE / "overlays").glob("*/kustomization.yaml"))

IMAGE = "dynamo-control-plane"  # the image name in the base, before an overlay renames it
SERVICE_ACCOUNT = "dynamo-control-plane"
SECRET_VOLUME_SECRET = "controlplane-secrets"
HF_TOKEN_SECRET = "hf-token-secret"  # a Secret's name, not a secret
GATEWAY_GRANTS = "dynamo-control-plane-gateway-grants"  # the Role for ReferenceGrants in the control plane's namespace
READ = frozenset({"get", "list", "watch"})

# What the control plane does in a namespace graphs may use, and nothing more:
# (apiGroup, resource, resourceNames) -> verbs.
EXPECTED_ROLE = {
    ("nvidia.com", "dynamographdeployments", ()): {"get", "list", "watch", "create", "patch", "update", "delete"},
    ("nvidia.com", "dynamographdeploymentscalingadapters", ()): {"get", "list", "watch"},
    ("nvidia.com", "dynamographdeploymentscalingadapters/scale", ()): {"get", "patch", "update"},
    ("nvidia.com", "dynamographdeploymentrequests", ()): {"get", "create", "patch"},
    ("gateway.networking.k8s.io", "httproutes", ()): {"create", "patch"},
    ("gateway.envoyproxy.io", "securitypolicies", ()): {"create", "patch"},
    ("networking.k8s.io", "ingresses", ()): {"create", "patch"},
    ("", "pods", ()): {"get", "list", "watch"},
    ("", "pods/log", ()): {"get"},
    ("", "events", ()): {"get", "list", "watch"},
    ("", "secrets", ()): {"create"},
    ("", "secrets", (HF_TOKEN_SECRET,)): {"patch", "update"},
}
EXPECTED_CLUSTER_ROLES = {
    "dynamo-control-plane": {
        ("", "nodes", ()): {"get", "list", "watch"},
        ("apiextensions.k8s.io", "customresourcedefinitions",
         ("dynamographdeployments.nvidia.com", "dynamographdeploymentscalingadapters.nvidia.com")): {"get", "list"},
    },
    # components/cluster-gpu-capacity (opt-in): free GPUs need every namespace's pods.
    "dynamo-control-plane-gpu-capacity": {("", "pods", ()): {"list"}},
}
# kustomization fields that Debian's kubectl (kustomize v2.0.3) does not know.
NOT_IN_KUSTOMIZE_2 = {"components", "patches", "labels", "replacements", "openapi", "helmCharts", "sortOptions"}


# ------------------------------------------------------------------------------------ helpers


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl is not on PATH, so the deployment manifests cannot be rendered: run "
                    "`bash scripts/services.sh` (it installs Debian's kubernetes-client package when no "
                    "kubectl is found), or install any kubectl >= 1.20", pytrace=False)
    return path


@functools.cache
def render(overlay: str) -> tuple[dict, ...]:
    result = subprocess.run([kubectl(), "kustomize", str(KUSTOMIZE / "overlays" / overlay)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"kubectl kustomize overlays/{overlay} failed:\n{result.stderr}"
    objects = tuple(obj for obj in yaml.safe_load_all(result.stdout) if obj)
    assert objects, f"overlays/{overlay} rendered nothing"
    return objects


def of_kind(objects, *kinds: str) -> list[dict]:
    return [o for o in objects if o["kind"] in kinds]


def one(objects, kind: str, name: str) -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def present(items: list, what: str) -> list:
    """``items``, which must not be empty: a check run over nothing proves nothing."""
    assert items, f"rendered no {what}"
    return items


def pod_specs(objects) -> list[tuple[dict, dict]]:
    """(workload, pod spec) for every Deployment and StatefulSet."""
    return [(o, o["spec"]["template"]["spec"]) for o in of_kind(objects, "Deployment", "StatefulSet")]


def containers(spec: dict) -> list[dict]:
    return list(spec.get("initContainers") or []) + list(spec["containers"])


def ours(objects) -> list[tuple[dict, dict, dict]]:
    """(workload, pod spec, container) for every container that runs this repository's image."""
    image = rendered_image(objects)
    return [(w, s, c) for w, s in pod_specs(objects) for c in containers(s) if c["image"] == image]


def rendered_image(objects) -> str:
    web = one(objects, "Deployment", "web")["spec"]["template"]["spec"]["containers"][0]
    return web["image"]


def config_map(objects, ref: str) -> dict:
    return one(objects, "ConfigMap", ref)


def container_env(objects, container: dict) -> dict[str, str]:
    """Every variable the container gets from env and from envFrom ConfigMaps."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        assert "configMapRef" in source, "settings come from ConfigMaps; secrets are mounted as files"
        env.update(config_map(objects, source["configMapRef"]["name"]).get("data") or {})
    for var in container.get("env") or []:
        env[var["name"]] = var.get("value", "")
    return env


def normalized_rules(role: dict) -> dict[tuple, set[str]]:
    out: dict[tuple, set[str]] = {}
    for rule in role.get("rules") or []:
        names = tuple(sorted(rule.get("resourceNames") or []))
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                out.setdefault((group, resource, names), set()).update(rule["verbs"])
    return out


@functools.cache
def settings_env_names() -> tuple[frozenset[str], frozenset[str]]:
    """(names read through settings.env / env_bool, which also accept NAME_FILE; names read
    straight from os.environ)."""
    # accounts/sso_config.py reads the OIDC_* variables for settings.py (settings.SSO), and
    # controlplane/environment.py the database's and the metrics' (databases, metrics_settings).
    text = SETTINGS_PY.read_text() + (REPO / "accounts" / "sso_config.py").read_text() + (
        REPO / "controlplane" / "environment.py").read_text()
    via_env = frozenset(re.findall(r"\benv(?:_bool)?\(\s*[\"']([A-Z][A-Z0-9_]*)[\"']", text))
    raw = frozenset(re.findall(r"os\.environ(?:\.get\(|\[)\s*[\"']([A-Z][A-Z0-9_]*)[\"']", text))
    return via_env, raw


def read_by_settings(name: str) -> bool:
    via_env, raw = settings_env_names()
    return name in via_env or name in raw or (name.endswith("_FILE") and name[: -len("_FILE")] in via_env)


@functools.cache
def help_text(*argv: str) -> str:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    result = subprocess.run([sys.executable, *argv, "--help"], capture_output=True, text=True, cwd=REPO,
                            timeout=120, check=False, env=env)
    assert result.returncode == 0, f"{' '.join(argv)} --help failed:\n{result.stderr[-2000:]}"
    return result.stdout


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", "", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def local_apps() -> list[str]:
    from django.conf import settings

    tops = {app.split(".")[0] for app in settings.INSTALLED_APPS}
    return sorted(t for t in tops if (REPO / t).is_dir())


# ------------------------------------------------------------------------------------ rendering


def test_overlays_exist():
    assert {"example", "trial"} <= set(OVERLAYS), OVERLAYS


def _referenced_dirs(folder: Path, seen: set[Path]) -> None:
    folder = folder.resolve()
    if folder in seen:
        return
    seen.add(folder)
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text()) or {}
    for entry in (kustomization.get("bases") or []) + (kustomization.get("resources") or []):
        if (folder / entry).is_dir():
            _referenced_dirs(folder / entry, seen)


def test_every_kustomization_is_rendered_by_an_overlay():
    seen: set[Path] = set()
    for overlay in OVERLAYS:
        _referenced_dirs(KUSTOMIZE / "overlays" / overlay, seen)
    every = {p.parent.resolve() for p in KUSTOMIZE.rglob("kustomization.yaml")}
    assert every - seen == set(), "not rendered (so not validated) by any overlay"


@pytest.mark.parametrize("path", sorted(KUSTOMIZE.rglob("kustomization.yaml")), ids=lambda p: str(p.parent.name))
def test_kustomizations_render_with_debians_kubectl_too(path):
    """Debian's kubectl 1.20 embeds kustomize v2.0.3: no Components, `patches` or `labels`;
    directories only under `bases` (v5 still reads them, with a deprecation warning)."""
    kustomization = yaml.safe_load(path.read_text())
    assert kustomization.get("kind", "Kustomization") == "Kustomization"
    assert not NOT_IN_KUSTOMIZE_2 & set(kustomization), f"{path}: fields kustomize 2.0.3 does not know"
    for entry in kustomization.get("resources") or []:
        assert (path.parent / entry).is_file(), f"{path}: {entry} under resources must be a file (dirs go in bases)"
    for entry in kustomization.get("bases") or []:
        assert (path.parent / entry / "kustomization.yaml").is_file(), f"{path}: base {entry} not found"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_objects_validate_against_kubernetes_schemas(overlay):
    objects = render(overlay)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys)), "duplicate objects"
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']} {obj['metadata']['name']}: {exc.message} at {'.'.join(map(str, exc.path))}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_references_resolve(overlay):
    """ConfigMaps (hash-suffixed by kustomize), Services, PDBs, Ingresses and bindings point at
    objects that the overlay renders."""
    objects = render(overlay)
    for container in [c for _w, s in pod_specs(objects) for c in containers(s)]:
        for source in container.get("envFrom") or []:
            config_map(objects, source["configMapRef"]["name"])
    for service in present(of_kind(objects, "Service"), "Service"):
        selector = service["spec"]["selector"]
        targets = [s for w, s in pod_specs(objects)
                   if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert targets, f"Service {service['metadata']['name']} selects no pods"
        for port in service["spec"]["ports"]:
            names = {p.get("name") for s in targets for c in s["containers"] for p in c.get("ports") or []}
            assert port["targetPort"] in names, f"Service {service['metadata']['name']}: no port {port['targetPort']}"
    for pdb in present(of_kind(objects, "PodDisruptionBudget"), "PodDisruptionBudget"):
        wanted = pdb["spec"]["selector"]["matchLabels"].items()
        assert any(wanted <= w["spec"]["template"]["metadata"]["labels"].items() for w, _ in pod_specs(objects))
    for ingress in of_kind(objects, "Ingress"):
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                one(objects, "Service", path["backend"]["service"]["name"])


# ------------------------------------------------------------------------------------ RBAC


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_has_no_wildcards(overlay):
    for role in present(of_kind(render(overlay), "Role", "ClusterRole"), "Role or ClusterRole"):
        assert "aggregationRule" not in role
        for rule in role.get("rules") or []:
            for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
                values = rule.get(field) or []
                assert not any("*" in v for v in values), f"{role['metadata']['name']}: wildcard in {field}"
            assert not rule.get("nonResourceURLs"), "no non-resource URLs beyond the defaults"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_never_reads_secrets(overlay):
    """Create the Hugging Face token Secret, or patch/update that one Secret by name: never get,
    list, watch or delete any Secret, anywhere."""
    for role in present(of_kind(render(overlay), "Role", "ClusterRole"), "Role or ClusterRole"):
        for rule in role.get("rules") or []:
            if "secrets" not in (rule.get("resources") or []):
                continue
            assert role["kind"] == "Role", "Secrets only in the graph namespaces' Roles"
            verbs = set(rule["verbs"])
            assert not verbs & (READ | {"delete", "deletecollection", "escalate", "impersonate"}), rule
            if rule.get("resourceNames"):
                assert rule["resourceNames"] == [HF_TOKEN_SECRET] and verbs <= {"patch", "update"}, rule
            else:
                assert verbs == {"create"}, f"only create may go without resourceNames: {rule}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_graph_namespace_roles_are_exactly_what_the_product_does(overlay):
    from clusters.kubernetes import DGD, DGDSA, GROUP
    from clusters.services import HF_TOKEN_SECRET as PRODUCT_SECRET

    assert (GROUP, DGD, DGDSA, PRODUCT_SECRET) == (
        "nvidia.com", "dynamographdeployments", "dynamographdeploymentscalingadapters", HF_TOKEN_SECRET)
    roles = [r for r in of_kind(render(overlay), "Role") if r["metadata"]["name"] != GATEWAY_GRANTS]
    assert roles, "no namespace for graphs"
    for role in roles:
        assert role["metadata"]["name"] == SERVICE_ACCOUNT
        rules = normalized_rules(role)
        assert rules == EXPECTED_ROLE, role["metadata"]["namespace"]
        assert rules[(GROUP, f"{DGDSA}/scale", ())] >= {"patch"}, "scaling goes through the adapters' /scale"
        assert rules[("", "pods/log", ())] == {"get"}, "crash logs are read"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_kind_the_product_applies_beside_a_graph_is_granted_where_it_goes(overlay):
    """Server-side apply of a new object is authorized as create, of an existing one as patch
    (Kubernetes' API concepts, "Patch and apply"): each kind the product applies gets both, in the
    namespace it goes to. The gateway objects are rendered from a real exposure."""
    from graphs.runtimes.kubernetes import gateway
    from sizing.clusters import PLURAL as DGDR

    exposure = gateway.Exposure(host="m.example.com", gateway_name="gw", gateway_namespace="infra",
                                ingress_class="nginx", controlplane_namespace="dynamo-control-plane")
    objects = gateway.gateway_objects(graph="g", dgd_name="g", namespace="dynamo-demo", frontend="Frontend",
                                      exposure=exposure)
    assert {o["kind"] for o in objects} == {"HTTPRoute", "SecurityPolicy", "ReferenceGrant", "Ingress"}
    rendered = render(overlay)
    roles = {(r["metadata"].get("namespace"), r["metadata"]["name"]): normalized_rules(r)
             for r in of_kind(rendered, "Role")}
    bound = {(b["metadata"].get("namespace"), b["roleRef"]["name"]) for b in of_kind(rendered, "RoleBinding")
             if any(s["name"] == SERVICE_ACCOUNT for s in b["subjects"])}
    for obj in objects:
        group = obj["apiVersion"].rsplit("/", 1)[0] if "/" in obj["apiVersion"] else ""
        namespace = "dynamo-control-plane" if obj["kind"] == "ReferenceGrant" else "dynamo-demo"
        granted = set().union(*(rules.get((group, gateway.PLURALS[obj["kind"]], ()), set())
                                for (ns, name), rules in roles.items() if ns == namespace and (ns, name) in bound))
        assert {"create", "patch"} <= granted, (obj["kind"], namespace)
    for (ns, name), rules in roles.items():
        if name == SERVICE_ACCOUNT:
            assert {"get", "create", "patch"} <= rules[("nvidia.com", DGDR, ())], ns


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cluster_roles_only_read(overlay):
    cluster_roles = of_kind(render(overlay), "ClusterRole")
    names = {r["metadata"]["name"] for r in cluster_roles}
    assert "dynamo-control-plane" in names
    for role in cluster_roles:
        rules = normalized_rules(role)
        assert rules == EXPECTED_CLUSTER_ROLES[role["metadata"]["name"]]
        assert all(verbs <= READ for verbs in rules.values())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_bindings_tie_the_roles_to_the_control_planes_service_account(overlay):
    objects = render(overlay)
    account = one(objects, "ServiceAccount", SERVICE_ACCOUNT)
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": account["metadata"]["namespace"]}
    bound: set[tuple] = set()
    for binding in present(of_kind(objects, "RoleBinding", "ClusterRoleBinding"), "RoleBinding"):
        assert binding["subjects"] == [subject], binding["metadata"]
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert any(r["kind"] == ref["kind"] and r["metadata"]["name"] == ref["name"]
                   and r["metadata"].get("namespace") == namespace for r in objects), f"{ref} not rendered"
        bound.add((ref["kind"], namespace, ref["name"]))
    for role in present(of_kind(objects, "Role", "ClusterRole"), "Role or ClusterRole"):
        assert (role["kind"], role["metadata"].get("namespace"), role["metadata"]["name"]) in bound
    graph_namespaces = {r["metadata"]["namespace"] for r in of_kind(objects, "Role")
                        if r["metadata"]["name"] != GATEWAY_GRANTS}
    assert account["metadata"]["namespace"] not in graph_namespaces, "graphs run outside the control plane's namespace"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_processes_that_call_the_cluster_get_a_token(overlay):
    objects = render(overlay)
    assert one(objects, "ServiceAccount", SERVICE_ACCOUNT).get("automountServiceAccountToken") is False
    for workload, spec in present(pod_specs(objects), "Deployment or StatefulSet"):
        name = workload["metadata"]["name"]
        if name in ("web", "worker", "operator"):
            assert spec["serviceAccountName"] == SERVICE_ACCOUNT and spec["automountServiceAccountToken"] is True
        else:
            assert spec.get("automountServiceAccountToken") is False, f"{name} needs no API access"


# ------------------------------------------------------------------------------------ pods


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_locked_down_and_sized(overlay):
    for workload, spec in present(pod_specs(render(overlay)), "Deployment or StatefulSet"):
        pod = spec.get("securityContext") or {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for container in containers(spec):
            where = f"{workload['metadata']['name']}/{container['name']}"
            resources = container.get("resources") or {}
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(kind) or {}), f"{where}: {kind}"
            context = container.get("securityContext") or {}
            assert context.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, where
            assert (context.get("runAsUser", pod.get("runAsUser")) or 0) > 0, where
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("readOnlyRootFilesystem") is True, where
            assert context.get("privileged") is not True, where
            assert "ALL" in ((context.get("capabilities") or {}).get("drop") or []), where
            assert not (context.get("capabilities") or {}).get("add"), where
            seccomp = context.get("seccompProfile") or pod.get("seccompProfile") or {}
            assert seccomp.get("type") == "RuntimeDefault", where
            tmp = [m for m in container.get("volumeMounts") or [] if m["mountPath"] == "/tmp"]
            assert tmp and "emptyDir" in volumes[tmp[0]["name"]], f"{where}: /tmp must be an emptyDir"
            image = container["image"]
            assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), f"{where}: pin {image}"
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_web_is_probed_on_healthz(overlay):
    from django.conf import settings
    from django.urls import resolve

    resolve("/healthz")  # the URL exists
    # With DJANGO_SECURE_TLS on, plain-HTTP kubelet probes must not be redirected to https.
    assert any(re.match(p, "healthz") for p in settings.SECURE_REDIRECT_EXEMPT)
    objects = render(overlay)
    spec = one(objects, "Deployment", "web")["spec"]["template"]["spec"]
    (web,) = spec["containers"]
    port = int(web["command"][web["command"].index("--port") + 1])
    ports = {p["name"]: p["containerPort"] for p in web["ports"]}
    allowed = container_env(objects, web)["DJANGO_ALLOWED_HOSTS"].split(",")
    for probe in ("readinessProbe", "livenessProbe"):
        get = web[probe]["httpGet"]
        assert get["path"] == "/healthz"
        assert ports[get["port"]] == port, f"{probe} must hit the web server's --port"
        hosts = [h["value"] for h in get.get("httpHeaders") or [] if h["name"].lower() == "host"]
        assert hosts and hosts[0] in allowed, f"{probe}: the Host header must be in DJANGO_ALLOWED_HOSTS"
    assert one(objects, "Deployment", "web")["spec"]["replicas"] >= 2
    one(objects, "PodDisruptionBudget", "web")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_exactly_one_beat_and_one_operator(overlay):
    """Two beats would enqueue every periodic task twice; two operators would watch and write
    every cluster's status twice."""
    objects = render(overlay)
    beats = []
    for workload, _spec, container in present(ours(objects), "container of our image"):
        command = container["command"]
        if "celery" in command and ("beat" in command or "-B" in command or "--beat" in command):
            beats.append(workload)
    assert len(beats) == 1, [b["metadata"]["name"] for b in beats]
    for workload in (beats[0], one(objects, "Deployment", "operator")):
        assert workload["spec"]["replicas"] == 1
        assert workload["spec"]["strategy"]["type"] == "Recreate", "a rollout must not run two at once"
    worker = one(objects, "Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "-B" not in worker and "--beat" not in worker and "beat" not in worker


# ------------------------------------------------------------------------------------ entry points


def _check_command(command: list[str]) -> None:
    """The command runs a real entry point of this repository, with options it accepts."""
    from django.core.management import get_commands

    assert command[0] == "python", command
    if command[1:3] == ["-m", "uvicorn"]:
        module, _, attribute = command[3].partition(":")  # the app it serves
        assert hasattr(importlib.import_module(module), attribute), command[3]
        argv = ("-m", "uvicorn")
        options = command[4:]
    elif command[1:3] == ["-m", "celery"]:
        assert command[3] == "-A"
        app = importlib.import_module(command[4])
        assert type(getattr(app, "celery_app", None) or app.app).__name__ == "Celery", command[4]
        assert command[5] in ("worker", "beat"), command
        argv = ("-m", "celery", "-A", command[4], command[5])
        options = command[6:]
    elif command[1] == "manage.py":
        assert command[2] in get_commands(), f"no management command {command[2]}"
        argv = ("manage.py", command[2])
        options = command[3:]
    else:
        raise AssertionError(f"unknown entry point {command}")
    text = help_text(*argv)
    for option in options:
        if option.startswith("-"):
            assert re.search(rf"(^|[\s,\[]){re.escape(option)}([\s,=\]]|$)", text, re.M), \
                f"{' '.join(argv)} has no option {option}"


def _entry(command: list[str]) -> str:
    if command[1:3] == ["-m", "uvicorn"]:
        return "uvicorn"
    if command[1:3] == ["-m", "celery"]:
        return f"celery {command[5]}"
    return " ".join(command[1:3])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_commands_run_real_entry_points(overlay):
    commands = sorted({tuple(c["command"]) for _w, _s, c in ours(render(overlay))})
    assert {_entry(list(c)) for c in commands} == {
        "manage.py web", "celery worker", "celery beat",
        "manage.py runoperator", "manage.py migrate", "manage.py bootstrap"}
    for command in commands:
        _check_command(list(command))


def test_dockerfile_cmd_is_the_web_command():
    (cmd,) = [rest for word, rest in dockerfile_instructions() if word == "CMD"]
    web = one(render(OVERLAYS[0]), "Deployment", "web")["spec"]["template"]["spec"]["containers"][0]
    assert json.loads(cmd) == web["command"]


def test_the_deployed_web_process_is_the_one_make_up_starts_with_its_timeouts():
    """A 5 s keep-alive resets a form POST sent as the server closes the connection, and a 5 s
    healthcheck kills a busy worker mid-request: deploy/ runs `manage.py web` as make up does,
    whose uvicorn processes keep make up's timeouts."""
    from controlplane.management.commands.up import web_command
    from controlplane.webserver import WEB_TIMEOUTS, uvicorn_command

    web = one(render(OVERLAYS[0]), "Deployment", "web")["spec"]["template"]["spec"]["containers"][0]
    assert web["command"][1:3] == web_command("127.0.0.1", 8000, 2)[1:3] == ["manage.py", "web"]
    for command in (uvicorn_command("127.0.0.1", 8001), uvicorn_command("0.0.0.0", 8000, workers=2)):
        pairs = dict(itertools.pairwise(command))
        for flag, value in zip(WEB_TIMEOUTS[::2], WEB_TIMEOUTS[1::2], strict=True):
            assert pairs.get(flag) == value, (flag, command)
    assert int(dict(zip(WEB_TIMEOUTS[::2], WEB_TIMEOUTS[1::2], strict=True))["--timeout-keep-alive"]) > 60


# ------------------------------------------------------------------------------------ settings


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_env_names_are_settings_the_product_reads(overlay):
    objects = render(overlay)
    for workload, _spec, container in present(ours(objects), "container of our image"):
        for name in container_env(objects, container):
            assert read_by_settings(name), (f"{workload['metadata']['name']}/{container['name']}: "
                                            f"{name} is not read by controlplane/settings.py")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_come_from_mounted_files(overlay):
    objects = render(overlay)
    for workload, spec, container in present(ours(objects), "container of our image"):
        env = container_env(objects, container)
        for secret in ("DJANGO_SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "METRICS_TOKEN"):
            assert secret not in env, f"{secret} in plain configuration"
            path = env.get(f"{secret}_FILE")
            assert path, f"{workload['metadata']['name']}: {secret}_FILE"
            mounts = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
            assert mounts, f"{path} is not on a mounted volume"
            volume = {v["name"]: v for v in spec["volumes"]}[mounts[0]["name"]]
            assert volume["secret"]["secretName"] == SECRET_VOLUME_SECRET
            assert path.rsplit("/", 1)[-1] == secret, "the file is the Secret's key of that name"
        assert env.get("DJANGO_DEBUG") == "0"


def _production_env(tmp_path: Path, objects) -> dict[str, str]:
    """The web container's environment from the rendered ConfigMap, secrets as files in tmp."""
    web = one(objects, "Deployment", "web")["spec"]["template"]["spec"]["containers"][0]
    config = container_env(objects, web)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    values = {"DJANGO_SECRET_KEY": "k" * 64, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
              "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15", "CACHE_URL": "", "METRICS_TOKEN": "m" * 32,
              "OIDC_CLIENT_SECRET": "o" * 40}
    for key, value in values.items():
        (secrets / key).write_text(value + "\n")
    for key, value in list(config.items()):
        if key.endswith("_FILE"):
            config[key] = str(secrets / value.rsplit("/", 1)[-1])
    base = {k: v for k, v in os.environ.items() if not read_by_settings(k) and not k.endswith("_FILE")}
    dockerfile_env = {}
    for word, rest in dockerfile_instructions():
        if word == "ENV":
            dockerfile_env.update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
    return {**base, "DJANGO_SETTINGS_MODULE": dockerfile_env["DJANGO_SETTINGS_MODULE"],
            "CONTROLPLANE_VAR_DIR": str(tmp_path / "var"), "DJANGO_STATIC_ROOT": str(tmp_path / "static"), **config}


def test_rendered_configuration_boots_django(tmp_path):
    """The example overlay's settings load with DEBUG off (the secret key read from its file),
    pass Django's system checks, and collectstatic, which the image runs at build time, works."""
    env = _production_env(tmp_path, render("example"))
    for argv in (["manage.py", "check"], ["manage.py", "collectstatic", "--noinput", "--dry-run"]):
        result = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                                timeout=120, check=False)
        assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stderr[-3000:]}"
    probe = ("from django.conf import settings as s; "
             "print(s.DEBUG, s.SECRET_KEY == 'k' * 64, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, "
             "s.METRICS_TOKEN == 'm' * 32)")
    result = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {probe}"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["False", "True", "True", "True", "True"]
    probe = ("from django.conf import settings as s; "
             "print(s.SSO.client_id, s.SSO.client_secret == 'o' * 40, sorted(s.SSO.role_groups['operator']))")
    result = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {probe}"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["dynamo-control-plane", "True", "['inference-oncall',", "'ml-platform']"]
    assert "OIDC_CLIENT_SECRET" not in env  # only its file, from the mounted Secret
    # A Secret without the METRICS_TOKEN key still boots, with /metrics closed to all but loopback.
    Path(env["METRICS_TOKEN_FILE"]).unlink()
    result = subprocess.run([sys.executable, "-c", "import django; django.setup(); "
                             "from django.conf import settings as s; print(repr(s.METRICS_TOKEN))"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "''"


def test_the_service_monitor_scrapes_the_web_service_with_the_metrics_token():
    monitor = yaml.safe_load((REPO / "deploy" / "prometheus" / "servicemonitor.yaml").read_text())
    assert monitor["kind"] == "ServiceMonitor" and monitor["apiVersion"] == "monitoring.coreos.com/v1"
    objects = render("example")
    service = one(objects, "Service", "web")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    credentials = endpoint["authorization"]["credentials"]
    assert credentials["name"] == SECRET_VOLUME_SECRET
    web = one(objects, "Deployment", "web")["spec"]["template"]["spec"]["containers"][0]
    assert container_env(objects, web)["METRICS_TOKEN_FILE"].rsplit("/", 1)[-1] == credentials["key"]


def test_the_grafana_dashboard_is_valid_json_over_the_control_planes_own_series():
    dashboard = json.loads((REPO / "deploy" / "grafana" / "control-plane.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs and all("controlplane_" in e for e in exprs)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


# ------------------------------------------------------------------------------------ image


def test_dockerfile_builds_a_slim_non_root_image():
    instructions = dockerfile_instructions()
    words = [w for w, _ in instructions]
    base = [rest for w, rest in instructions if w == "FROM"][-1]  # the image's stage (the others build)
    assert base.startswith("python:3.11-slim")
    env: dict[str, str] = {}
    for word, rest in instructions:
        if word == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
    assert env["DJANGO_DEBUG"] == "0"
    for name in env:
        assert read_by_settings(name) or name in {"DJANGO_SETTINGS_MODULE", "HOME", "PYTHONPATH"} or \
            name.startswith(("PYTHON", "PIP_")), f"ENV {name} is read by nothing"
    (user,) = [rest for w, rest in instructions if w == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit(), "a numeric non-root user, for runAsNonRoot"
    runs = " ".join(rest for w, rest in instructions if w == "RUN")
    assert "manage.py collectstatic --noinput" in runs
    assert "ai-dynamo" not in runs and "[dynamo" not in runs, "the cluster image has no local Dynamo runtime"
    assert words.index("USER") > max(i for i, w in enumerate(words) if w in ("RUN", "COPY"))
    healthcheck = next(rest for w, rest in instructions if w == "HEALTHCHECK")
    argv = json.loads(healthcheck.split(" CMD ", 1)[1])  # exec form: no shell in the way
    assert argv[:2] == ["python", "-c"] and "/healthz" in argv[2]
    compile(argv[2], "HEALTHCHECK", "exec")
    for workload, spec, _container in present(ours(render("example")), "container of our image"):
        context = spec["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"]) == (int(uid), int(gid)), workload["metadata"]["name"]
    mounts = {m["mountPath"] for _w, _s, c in ours(render("example")) for m in c["volumeMounts"]}
    assert env["CONTROLPLANE_VAR_DIR"] in mounts, "the writable state folder is an emptyDir in the pods"


def test_dockerfile_copy_sources_exist():
    copies = [rest for w, rest in dockerfile_instructions() if w == "COPY"]
    assert copies
    for rest in copies:
        parts = [p for p in shlex.split(rest) if not p.startswith("--")]
        for source in parts[:-1]:
            assert (REPO / source).exists(), f"COPY {source}: no such file in the build context"
            assert not _ignored(source) or source == ".", f"COPY {source} is excluded by .dockerignore"


def _ignored(path: str) -> bool:
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, pattern.removeprefix("**/")):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_everything_the_product_runs():
    apps = local_apps()
    assert "controlplane" in apps and "graphs" in apps
    for path in [*apps, "manage.py", "templates", "static", "pyproject.toml"]:
        assert (REPO / path).exists(), path
        assert not _ignored(path), f".dockerignore excludes {path}, which the image needs"
    for path in (".venv", ".git", "var", "tests", ".env"):
        assert _ignored(path), f".dockerignore should exclude {path}"


def test_dockerfile_requirements_step(tmp_path):
    """The Dockerfile's own requirements step, run here: the runtime dependencies without the
    Dynamo extra, and an extra on request."""
    (step,) = [rest for w, rest in dockerfile_instructions() if w == "RUN" and "requirements.txt" in rest
               and "tomllib" in rest]
    command = step.split(">", 1)[0].replace("python ", f"{shlex.quote(sys.executable)} ", 1)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    for extras, wanted, unwanted in (("", "Django==", "aiperf"), ("bench", "aiperf==", "ai-dynamo")):
        result = subprocess.run(["sh", "-c", command], cwd=tmp_path, env={**os.environ, "EXTRAS": extras},
                                capture_output=True, text=True, timeout=60, check=True)
        requirements = result.stdout.splitlines()
        assert any(r.startswith(wanted) for r in requirements), requirements
        assert not any(r.startswith(unwanted) for r in requirements)
        assert any(r.startswith("kubernetes==") for r in requirements)
        assert not any(r.startswith(("transformers", "ai-dynamo")) for r in requirements)
        # The web's own: the event loop and HTTP parser of the OpenAI endpoint, the pages' WSGI bridge.
        assert {"uvloop==", "httptools==", "a2wsgi==", "prometheus-client=="} <= {
            r.split("==")[0] + "==" for r in requirements if "==" in r}
