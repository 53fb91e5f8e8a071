"""Every page and API operation, for every role and for anonymous users.

The role matrix (tests/access_cases.py, checked by tests/access_world.py) sends each operation
that the OpenAPI schema and the URL configuration publish, with a request that succeeds for an
allowed role (a valid body, an existing object), as anonymous, a user without a role, a viewer,
an operator and an admin, and asserts the exact answer: the success for allowed roles; 401 (the
API) or the login redirect (pages) for anonymous users; 403 with the product's message for
everyone else, the database unchanged. A few operations are public by design and
authenticate by their own means (the Git webhook's shared secret, the OpenID Connect sign-in):
every caller gets their one answer, and their views are checked to ask no role. Breaking the
role check makes it fail (the mutation tests below). Besides the matrix:
* no role ever gets a 5xx, whatever it sends;
* with CSRF enforced, no unsafe request authenticated by a session cookie succeeds without
  the token;
* a page and its API twin follow one rule; every CLI verb follows its user's role."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from core.catalog import PoolFields, build_spec
from graphs import services
from tests.access_cases import WEBHOOK_SECRET
from tests.access_world import Op, send

pytestmark = pytest.mark.django_db

# Reachable without a login by design.
# The API's description (schema and its docs page) is public like any published spec; "/"
# only redirects to the graph list, which asks for a login.
PUBLIC = re.compile(r"^/($|login/|logout/|healthz|readyz|favicon\.ico|api/schema/|api/docs/|static/"
                    r"|admin/login/|admin/logout/)")
# Unsafe methods that only read (they validate input, change nothing): viewers may use them.
VIEWER_READ_ONLY_POSTS = re.compile(r"^/(graphs/check/|api/validate/)")
SAMPLES = {"name": "matrix", "graph": "matrix", "pod": "matrix-frontend-0", "number": "1", "pk": "1", "id": "1",
           "format": "json", "key": "1", "run": "1", "cluster": "1", "object_id": "1", "app_label": "graphs",
           "model_name": "graph", "content_type_id": "1"}
UNSAFE = ("post", "put", "patch", "delete")
# The chat proxy answers 502/503/504 by design when the graph's frontend is not serving (as
# any gateway does); everywhere else a 5xx is a bug.
GATEWAY = re.compile(r"^/api/playground/")


def _server_error(url: str, status: int) -> bool:
    return status >= 500 and not (GATEWAY.match(url) and status in (502, 503, 504))


def _walk(resolver, prefix=""):
    for entry in resolver.url_patterns:
        pattern = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _walk(entry, pattern)
        elif isinstance(entry, URLPattern):
            yield pattern


def _concrete(pattern: str) -> str | None:
    """A URL for a pattern, with sample values for its parameters (None if we cannot)."""
    text = pattern.replace("^", "").replace("$", "").replace("\\Z", "").replace("\\.", ".")
    text = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: SAMPLES.get(m.group(1), "1"), text)
    text = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: SAMPLES.get(m.group(1), "1"), text)
    text = text.replace("/?", "/")
    if re.search(r"[()\[\]*+?|\\]", text):
        return None
    return "/" + text.lstrip("/")


def all_urls() -> list[str]:
    urls = {u for u in (_concrete(p) for p in _walk(get_resolver())) if u}
    urls = {u for u in urls if not u.startswith(("/admin/", "/static/")) and ".json" not in u
            and not u.endswith((".api", ".yaml"))}
    return sorted(urls)


@pytest.fixture
def world(users):
    spec = build_spec(template="mocker-disagg", name="matrix", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    services.graph_create(spec=spec)


def _request(client, method, url):
    return getattr(client, method)(url, data={} if method == "post" else None, follow=False)


def test_the_walker_finds_the_products_urls():
    urls = all_urls()
    assert "/graphs/" in urls and "/graphs/matrix/" in urls and "/api/graphs/" in urls
    assert len(urls) > 30


# ------------------------------------------------------------------- the role matrix
# Every operation (tests/access_cases.py) as every role, in a world where each can succeed.

pytest_plugins = ["tests.k8s_fixtures"]


@pytest.fixture(scope="session")
def aic_estimate(tmp_path_factory):
    """AIConfigurator's real answer for the world's estimate: one search per test session."""
    from tests.access_sizing import estimate_result

    save_dir = tmp_path_factory.mktemp("sizing")
    return estimate_result(save_dir), save_dir


@pytest.fixture
def full_world(users, kube, cluster, tmp_path, settings, api_for, client_for, aic_estimate):
    """Objects for every operation to act on, and a page client and an API client per role."""
    from django.utils import timezone

    from accounts.tokens import token_create
    from audit.models import AuditRecord
    from benchmarks.models import BenchmarkRun, RunState, Study
    from benchmarks.profiles import resolve
    from benchmarks.recommendations import recommendation_create
    from core.dgd.render import render
    from core.specio import dump_yaml
    from endpoint.services import policy_set
    from graphs.models import Deployment, GraphState, Pod
    from graphs.operations import graph_apply
    from graphs.runtimes.local.runtime import pod_log_path
    from playground.models import Conversation
    from tests.access_sizing import sizing_world
    from tests.access_world import write_file

    settings.BENCHMARK_DIR = str(tmp_path / "bench")
    settings.LOCAL_RUNTIME_DIR = str(tmp_path / "local")
    settings.BENCHMARK_MAX_RUNNING = 2  # the busy graph's run is active; the matrix's own may start beside it
    spec = build_spec(template="mocker-disagg", name="matrix", model="m", backend="mocker",
                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0))
    graph = services.graph_create(spec=spec, user=users["operator"])
    services.graph_create(spec=spec.model_copy(update={"name": "spare"}), user=users["operator"])
    other = services.graph_create(spec=spec.model_copy(update={"name": "busy"}), user=users["operator"])
    for g in (graph, other):
        Deployment.objects.create(graph=g, revision=g.head, runtime="local", active=True, state=GraphState.READY,
                                  endpoint="http://127.0.0.1:9")
    dep = graph.deployment
    Pod.objects.create(deployment=dep, name="matrix-frontend-0", service="Frontend", role="frontend",
                       phase="Running", ready=True)
    write_file(pod_log_path("matrix", "matrix-frontend-0"), "frontend up\n")
    services.graph_update(graph=graph, spec=spec, user=users["operator"], message="second")
    operation = graph_apply(graph=other, user=users["operator"], dry_run=True)
    policy_set(graph=graph, viewers_may_chat=True)
    params = resolve("custom", {"concurrency": 4, "request_count": 40}).model_dump(mode="json")
    stats = {"unit": "ms", "p50": 80.0, "p90": 100.0, "p99": 120.0}
    run = BenchmarkRun.objects.create(
        graph=graph, revision=graph.head, profile="custom", state=RunState.SUCCEEDED, progress=100, params=params,
        finished_at=timezone.now(), log_path=write_file(tmp_path / "bench" / "runs" / "x" / "aiperf.log", "ok\n"),
        results={"steps": [{"index": 0, "concurrency": 4, "artifact": "01-c4", "ttft": stats, "itl": stats,
                            "output_token_throughput": 900.0, "completed": 40}]})
    write_file(tmp_path / "bench" / "runs" / str(run.pk) / "01-c4" / "profile.json", "{}")
    active_run = BenchmarkRun.objects.create(graph=other, revision=other.head, profile="custom", params=params)
    study = Study.objects.create(graph=graph, profile="custom", params=params, state="succeeded")
    active_study = Study.objects.create(graph=other, profile="custom", params=params)
    recommendation = recommendation_create(graph=graph, ttft_ms=500.0, run_ids=[run.pk])
    tokens, conversations, keys = {}, {}, {}
    for who in ("viewer", "operator", "admin", "norole"):
        token, keys[who] = token_create(user=users[who], name="spare", via="system")
        tokens[who] = token.prefix
        conversations[who] = Conversation.objects.create(owner=users[who], graph=graph, graph_name="matrix",
                                                         title="kept").pk
    tokens["anonymous"] = tokens["viewer"]
    conversations["anonymous"] = conversations["viewer"]
    manifest = dump_yaml(render(spec.model_copy(update={"name": "imported"})))
    settings.SIZING_DIR = tmp_path / "sizing"
    result, save_dir = aic_estimate
    world = {**_git_world(tmp_path, settings, users), **_sso_world(settings),
        **sizing_world(result=result, save_dir=save_dir, kube=kube, cluster=cluster, user=users["operator"]),
        "name": "matrix", "spare": "spare", "pod": "matrix-frontend-0", "number": 1,
        "cluster": cluster.name, "kubeconfig": cluster.kubeconfig,
        "run": run.pk, "active_run": active_run.pk, "study": study.pk, "active_study": active_study.pk,
        "recommendation": recommendation.pk, "operation": operation.pk,
        "audit": AuditRecord.objects.order_by("pk").first().pk, "token": tokens, "conversation": conversations,
        "graph_pk": graph.pk, "viewer_pk": users["viewer"].pk,
        "spec": spec.model_copy(update={"name": "posted"}).model_dump(mode="json"),
        "spec_changed": _with_decode_replicas(spec.model_dump(mode="json"), 2),
        "manifest": manifest, "manifest_changed": dump_yaml(render(spec)).replace("replicas: 1", "replicas: 2", 1),
    }
    world["canaries"] = _canaries(cluster, settings, keys)
    clients = {who: (client_for(who), api_for(who)) for who in ("anonymous", "norole", "viewer", "operator", "admin")}
    return world, clients


def _canaries(cluster, settings, keys: dict[str, str]) -> dict[str, str]:
    """A recognisable value seeded wherever a secret lives: the cluster's kubeconfig, the Git
    credentials, the OIDC client secret, the Git webhook's secret and API keys. No answer of the
    matrix, to any role, may hold one its own request did not send (tests/access_world.leaks),
    nor may an audit row or a log line (test_no_secret_reaches_an_answer_an_audit_row_or_a_log)."""
    from pathlib import Path

    from repos.models import Repository

    canaries = {"kubeconfig": "canary-kubeconfig-5b1e0c", "git password": "canary-git-password-9d2f41",
                "git ssh key": "canary-git-ssh-key-77ac03", "oidc client secret": "canary-oidc-secret-3e8a55",
                "webhook secret": WEBHOOK_SECRET,
                **{f"{who}'s API key": key for who, key in keys.items()}}
    kubeconfig = Path(cluster.kubeconfig)
    kubeconfig.write_text(kubeconfig.read_text() + f"\n# {canaries['kubeconfig']}\n")
    Repository.objects.filter(name="fleet").update(
        username="deploy", password=canaries["git password"],
        ssh_key=f"-----BEGIN OPENSSH PRIVATE KEY-----\n{canaries['git ssh key']}\n-----END OPENSSH PRIVATE KEY-----")
    settings.SSO = settings.SSO.__class__(**{**settings.SSO.__dict__, "client_secret": canaries["oidc client secret"]})
    return canaries


def _git_world(tmp_path, settings, users) -> dict:
    """A repository on a real bare Git repository (file://), synced: its graph is linked, and a
    product revision of it waits as an Export; the graph is exposed through a gateway."""
    from endpoint.services import exposure_set
    from graphs.models import Graph
    from repos import services as repos
    from repos.models import Export
    from repos.sync import repository_sync
    from tests.git_fixtures import Remote, manifest

    settings.VAR_DIR = tmp_path / "var"
    remote = Remote(tmp_path / "remote")
    remote.write("kept.yaml", manifest("kept"))
    remote.commit("add kept")
    remote.push()
    repo = repos.repository_create(name="fleet", url=remote.url, webhook_secret=WEBHOOK_SECRET, user=users["admin"])
    result = repository_sync(repository=repo)
    assert not result.error, result.error
    kept = Graph.objects.get(name="kept")
    services.graph_update(graph=kept, spec=kept.head.graph_spec.model_copy(update={"model": "changed"}),
                          user=users["operator"], message="made in the product")
    export = Export.objects.get(revision=Graph.objects.get(name="kept").head)
    exposure_set(graph=Graph.objects.get(name="matrix"), host="llm.example.com", gateway_name="gw")
    return {"repo": repo.name, "kept": "kept", "export": export.pk, "remote_url": remote.url,
            "push": json.dumps({"ref": "refs/heads/main", "after": "0" * 40}).encode()}


def _sso_world(settings) -> dict:
    """Single sign-on on, against an issuer nobody answers at (a closed loopback port): the
    sign-in's legs answer with their own pages. The whole sign-in against a real provider is
    tests/accounts/test_sso.py's and tests/accounts/test_sso_browser.py's."""
    from accounts.sso_config import DEFAULT_SCOPES, SsoConfig
    from tests.git_fixtures import _free_port

    port = _free_port()  # free in this run's own port range, and nothing is started on it
    settings.SSO = SsoConfig(issuer=f"http://127.0.0.1:{port}", client_id="cp", client_secret="matrix",
                             scopes=DEFAULT_SCOPES, groups_claim="groups",
                             username_claims=("preferred_username", "email"), role_groups={}, session_seconds=3600,
                             timeout=1.0)
    return {}


# Published, yet outside the matrix, and why.
EXCLUDED = {
    # The OpenAI-compatible endpoint decides by role and per-graph policy, answers in OpenAI's
    # error shape, and succeeds only with a serving frontend: tests/playground/test_playground_access.py
    # sends it every role and policy against a real Dynamo frontend.
    "/api/playground/{graph}/v1/chat/completions": "tests/playground/test_playground_access.py",
    "/api/playground/{graph}/v1/completions": "tests/playground/test_playground_access.py",
    "/api/playground/{graph}/v1/models": "tests/playground/test_playground_access.py",
}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _template(pattern: str) -> str:
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", pattern)


def schema_operations() -> set[tuple[str, str]]:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {(method.upper(), path) for path, ops in schema["paths"].items() for method in ops}


def url_conf_paths() -> set[str]:
    """The URL configuration's routes that the schema does not describe: pages, and the API's
    root view. DRF viewsets and API views are the schema's."""
    from rest_framework.routers import APIRootView

    paths = set()
    for pattern, callback in _walk_callbacks(get_resolver()):
        drf = getattr(callback, "cls", None)
        if drf is not None and not issubclass(drf, APIRootView):
            continue
        path = _template(pattern)
        if "drf_format_suffix" in pattern or PUBLIC.match(path) or path.startswith(("/admin/", "/static/")):
            continue
        paths.add(path)
    return paths


def _walk_callbacks(resolver, prefix=""):
    for entry in resolver.url_patterns:
        pattern = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _walk_callbacks(entry, pattern)
        elif isinstance(entry, URLPattern):
            yield pattern, entry.callback


def _with_decode_replicas(spec: dict, replicas: int) -> dict:
    next(s for s in spec["services"] if s["name"] == "decode")["replicas"] = replicas
    return spec


def test_the_matrix_lists_every_operation_the_product_publishes():
    from tests.access_cases import OPERATIONS

    listed = {(op.method, op.path) for op in OPERATIONS}
    assert len(listed) == len(OPERATIONS), "an operation is listed twice"
    schema, paths = schema_operations(), url_conf_paths()
    assert len(schema) > 50 and len(paths) > 40, "the walkers found too little: are they still reading the product?"
    missing = sorted(op for op in schema if op not in listed)
    missing += sorted(p for p in paths if p not in EXCLUDED and not any(path == p for _m, path in listed))
    assert not missing, f"add these to tests/access_cases.py: {missing}"
    unknown = sorted((m, p) for m, p in listed if (m, p) not in schema and p not in paths)
    assert not unknown, f"listed, but not published (any more): {unknown}"


def test_a_page_answers_no_method_that_the_matrix_does_not_list(full_world):
    """Pages publish no methods: whatever a page answers must be in the matrix."""
    from tests.access_cases import OPERATIONS

    world, clients = full_world
    page_client, api_client = clients["admin"]
    listed = {(op.method, op.path) for op in OPERATIONS}
    answered = []
    for path in sorted(url_conf_paths() - EXCLUDED.keys()):
        for method in METHODS:
            if (method, path) in listed:
                continue
            op = Op(method, path, 3, 405, values=next((o.values for o in OPERATIONS if o.path == path), {}))
            response = send(api_client if op.is_api else page_client, op, world, "admin")
            if response.status_code != 405:
                answered.append(f"{method} {path} -> {response.status_code}")
    assert not answered, "\n".join(answered)


def test_every_role_gets_exactly_its_answer_from_every_operation(full_world, caplog):
    """And no answer, audit row or log line holds a secret (the world's canaries)."""
    import logging

    from tests.access_cases import OPERATIONS
    from tests.access_world import matrix_problems

    world, clients = full_world
    caplog.set_level(logging.DEBUG)
    problems = matrix_problems(OPERATIONS, world, clients)
    logged = [what for what, value in world["canaries"].items() if value in caplog.text]
    assert not problems, "\n".join(problems)
    assert not logged, f"the log holds {', '.join(logged)}"
    assert len(world["canaries"]) >= 9  # seeded: kubeconfig, Git password and key, OIDC and webhook secrets, keys


def _viewers_may_write(monkeypatch):
    """The mutation the matrix once missed: the API's default write check lets viewers write."""
    from accounts import roles

    def has_permission(self, request, view):
        role = roles.user_role(request.user)
        overrides = getattr(view, "required_roles", {})
        if getattr(view, "action", None) in overrides:
            return role >= overrides[view.action]
        return role >= roles.Role.VIEWER  # was: writes need Role.OPERATOR

    monkeypatch.setattr(roles.RolePermission, "has_permission", has_permission)


def _viewers_rank_as_operators(monkeypatch):
    """The pages' check (role_required) and the API's both read user_role: viewers count as operators."""
    from accounts import roles

    real = roles.user_role
    monkeypatch.setattr(roles, "user_role", lambda user: max(real(user), roles.Role.OPERATOR)
                        if real(user) == roles.Role.VIEWER else real(user))


def _refusals_write(monkeypatch):
    """A refusal that stores something first: the API's check records an audit row, then refuses."""
    from accounts import roles
    from audit.services import audit_record

    real = roles.RolePermission.has_permission

    def has_permission(self, request, view):
        allowed = real(self, request, view)
        if not allowed:
            audit_record(actor=None, via="api", action="refused", target_type="graph", target="x")
        return allowed

    monkeypatch.setattr(roles.RolePermission, "has_permission", has_permission)


@pytest.mark.parametrize(("mutation", "expected"), [
    (_viewers_may_write, "viewer POST /api/graphs/: expected 403 'This needs the operator role; you have the "
                         "viewer role.', got 201"),
    (_viewers_rank_as_operators, "viewer POST /graphs/matrix/scale/: expected 403 with 'This needs the operator "
                                 "role.', got 200"),
    (_refusals_write, "viewer POST /api/graphs/: refused, yet the database changed"),
])
def test_the_matrix_fails_when_the_role_check_is_broken(full_world, monkeypatch, mutation, expected):
    """Proof that the matrix catches what it names: break the role check, and it fails."""
    from tests.access_cases import OPERATIONS
    from tests.access_world import matrix_problems

    world, clients = full_world
    mutation(monkeypatch)
    problems = matrix_problems(OPERATIONS, world, clients, roles=("viewer",))
    assert any(p.startswith(expected) for p in problems), "\n".join(problems)


def test_only_operations_that_ask_no_role_are_public():
    """"Public" is no way around the matrix: each public operation's view really asks for no
    role (no role_required on the page, AllowAny on the API view) and says how it authenticates."""
    from django.urls import resolve
    from rest_framework.permissions import AllowAny

    from tests.access_cases import OPERATIONS

    public = sorted((op.method, op.path) for op in OPERATIONS if op.public)
    assert public == [("GET", "/auth/oidc/callback/"), ("GET", "/auth/oidc/login/"),
                      ("POST", "/api/repos/{name}/webhook/")]
    for op in (op for op in OPERATIONS if op.public):
        callback = resolve(op.path.replace("{name}", "x")).func
        drf = getattr(callback, "cls", None)
        if drf is not None:
            assert drf.permission_classes == [AllowAny] and drf.authentication_classes == [], op.path
        else:
            assert not hasattr(callback, "required_role"), op.path
        assert len(op.public) > 40, f"{op.path}: say how it authenticates"


def test_the_matrix_fails_when_a_public_operation_asks_for_a_role(full_world, monkeypatch):
    """The webhook given the API's role check: the Git host, who has no user, is refused."""
    from accounts.roles import RolePermission
    from repos.api.views import WebhookView
    from tests.access_cases import OPERATIONS
    from tests.access_world import matrix_problems

    world, clients = full_world
    monkeypatch.setattr(WebhookView, "permission_classes", [RolePermission])
    problems = matrix_problems([op for op in OPERATIONS if op.public], world, clients, roles=("anonymous",))
    assert problems == [f"anonymous POST /api/repos/{world['repo']}/webhook/: expected 202, got 403 "
                        "{\"detail\":\"This needs the operator role.\"}"], problems


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_no_role_ever_gets_a_server_error(world, role, client_for):
    client = client_for(role)
    errors = []
    for url in all_urls():
        for method in ("get", *UNSAFE):
            response = _request(client, method, url)
            if _server_error(url, response.status_code):
                errors.append(f"{method.upper()} {url} -> {response.status_code}")
    assert not errors, "\n".join(errors)


def test_no_unsafe_request_succeeds_without_the_csrf_token(world, users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["admin"])
    accepted = []
    for url in all_urls():
        for method in UNSAFE:
            response = _request(client, method, url)
            # Refused is what matters: 403 from the CSRF check, or 415 where reading the body for
            # the CSRF token already fails on its media type (DRF parses it lazily).
            if response.status_code < 400 or response.status_code >= 500:
                accepted.append(f"{method.upper()} {url} -> {response.status_code}")
    assert not accepted, "\n".join(accepted)


def _api_twin(url: str, urls: set[str]) -> str | None:
    twin = "/api" + url
    return twin if twin in urls else None


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_a_page_and_its_api_twin_follow_one_rule(world, role, client_for, api_for):
    """What a role may not read on a page (/clusters/), it may not read from the API either
    (/api/clusters/), and the other way round."""
    urls = set(all_urls())
    page_client, api_client = client_for(role), api_for(role)
    pairs = [(url, twin) for url in sorted(urls) if not url.startswith("/api/") and not PUBLIC.match(url)
             and (twin := _api_twin(url, urls))]
    assert ("/clusters/", "/api/clusters/") in pairs and ("/audit/", "/api/audit/") in pairs
    differ = []
    compared = 0
    for page, twin in pairs:
        page_status, api_status = page_client.get(page).status_code, api_client.get(twin).status_code
        if {page_status, api_status} - {200, 403}:
            continue  # not both readable resources (a form page and a POST-only endpoint, say)
        compared += 1
        page_refused, api_refused = page_status == 403, api_status == 403
        if page_refused != api_refused:
            differ.append(f"{page} {'refused' if page_refused else 'allowed'}, {twin} "
                          f"{'refused' if api_refused else 'allowed'}")
    assert compared >= 2
    assert not differ, "\n".join(differ)
