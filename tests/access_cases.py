"""The access matrix: every page and API operation of the product, the least role that may use
it, and a request that succeeds for that role in the world of tests/accounts/test_access_matrix.py.

tests/accounts/test_access_matrix.py checks that these operations are exactly the ones the OpenAPI
schema and the URL configuration publish, so an operation added later fails there until it is
listed here."""

from __future__ import annotations

import hashlib
import hmac

from tests.access_sizing import FORM as ESTIMATE_FORM
from tests.access_world import Op

VIEWER, OPERATOR, ADMIN = 1, 2, 3


def _json(data: dict):
    return lambda world, who: {"data": data, "format": "json"}


def _form(data: dict):
    return lambda world, who: {"data": data}


def _yaml(world, who):
    return {"data": world["manifest"].encode(), "content_type": "application/yaml"}


def _spec(world, who):
    return {"data": {"spec": world["spec"], "message": "matrix"}, "format": "json"}


def _graph_update(world, who):
    return {"data": {"spec": world["spec_changed"], "message": "matrix", "expected_revision": 2}, "format": "json"}


def _study(world, who):
    return {"data": {"graph": "matrix", "profile": "custom", "arms": ["p1d1", "p2d1"]}, "format": "json"}


def _conversation(world, who):
    return {"data": '{"graph": "matrix", "title": "t", "messages": []}', "content_type": "application/json"}


WEBHOOK_SECRET = "matrix-webhook-secret"
PUBLIC = 0  # the least role of a public operation: nobody's role is asked


def _webhook(world, who):
    """A GitHub push to the followed branch, signed with the repository's shared secret."""
    body = world["push"]
    signature = hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"data": body, "content_type": "application/json", "HTTP_X_GITHUB_EVENT": "push",
            "HTTP_X_HUB_SIGNATURE_256": f"sha256={signature}"}


def _repository(world, who, **changes):
    return {"data": {"name": world["repo"], "url": world["remote_url"], "branch": "main", "path": "",
                     "mode": "direct", **changes}, "format": "json"}


def _cli_token(world, who):
    return {"port": "40123", "state": "s" * 32, "name": "laptop"}


# A pool of the create-from-template form, as the page posts it.
POOL = {"replicas": "1", "gpus": "0", "shared_memory": "1Gi", "image": "", "engine_args": "", "hf_token_secret": ""}
RUN = {"id": "run", "pk": "run"}
ACTIVE_RUN = {"id": "active_run", "pk": "active_run"}
STUDY = {"id": "study", "pk": "study"}
ACTIVE_STUDY = {"id": "active_study", "pk": "active_study"}
REC = {"id": "recommendation", "pk": "recommendation"}
OPERATION = {"id": "operation"}
AUDIT = {"id": "audit"}
CLUSTER = {"name": "cluster"}
TOKEN = {"prefix": "token"}
CONVERSATION = {"pk": "conversation"}
CSV = {"query": "type=csv"}
REPO = {"name": "repo"}
EXPORT = {"name": "repo", "pk": "export"}
ESTIMATE = {"id": "estimate", "pk": "estimate"}
DGDR = {"id": "deployment_request"}
DGDR_PAGE = {"pk": "deployment_request"}
# Anonymous by design, each authenticated by its own means.
WEBHOOK = "the Git host calls it with no user: the repository's shared secret signs the body"
SIGN_IN = ("the sign-in itself: anonymous by nature, authenticated by OpenID Connect's state, code and "
           "ID token (here its legs answer their own pages: no provider answers; tests/accounts/test_sso.py signs in)")

API = [
    Op("GET", "/api/", VIEWER, 200),
    Op("GET", "/api/audit/", ADMIN, 200),
    Op("GET", "/api/audit/{id}/", ADMIN, 200, AUDIT),
    Op("GET", "/api/benchmarks/compare/", VIEWER, 200, body=lambda w, who: {"query": f"runs={w['run']}"}),
    Op("GET", "/api/benchmarks/compare/report/", VIEWER, 200, body=lambda w, who: {"query": f"runs={w['run']}"}),
    Op("GET", "/api/benchmarks/profiles/", VIEWER, 200),
    Op("GET", "/api/benchmarks/recommendations/", VIEWER, 200),
    Op("POST", "/api/benchmarks/recommendations/", OPERATOR, 201, body=_json({"graph": "matrix", "ttft_ms": 500})),
    Op("GET", "/api/benchmarks/recommendations/{id}/", VIEWER, 200, REC),
    Op("POST", "/api/benchmarks/recommendations/{id}/apply/", OPERATOR, 200, REC, _json({})),
    Op("GET", "/api/benchmarks/runs/", VIEWER, 200),
    Op("POST", "/api/benchmarks/runs/", OPERATOR, 201, body=_json({"graph": "matrix", "profile": "custom"})),
    Op("GET", "/api/benchmarks/runs/{id}/", VIEWER, 200, RUN),
    Op("GET", "/api/benchmarks/runs/{id}/artifacts/", VIEWER, 200, RUN),
    Op("POST", "/api/benchmarks/runs/{id}/cancel/", OPERATOR, 200, ACTIVE_RUN, _json({})),
    Op("GET", "/api/benchmarks/runs/{id}/log/", VIEWER, 200, RUN),
    Op("GET", "/api/benchmarks/runs/{id}/report/", VIEWER, 200, RUN),
    Op("GET", "/api/benchmarks/studies/", VIEWER, 200),
    Op("POST", "/api/benchmarks/studies/", OPERATOR, 201, body=_study),
    Op("GET", "/api/benchmarks/studies/{id}/", VIEWER, 200, STUDY),
    Op("POST", "/api/benchmarks/studies/{id}/cancel/", OPERATOR, 200, ACTIVE_STUDY, _json({})),
    Op("GET", "/api/benchmarks/studies/{id}/report/", VIEWER, 200, STUDY),
    Op("GET", "/api/clusters/", ADMIN, 200),
    Op("POST", "/api/clusters/", ADMIN, 201, body=_json({"name": "other", "namespaces": ["llm"], "in_cluster": True})),
    Op("GET", "/api/clusters/{name}/", ADMIN, 200, CLUSTER),
    Op("PUT", "/api/clusters/{name}/", ADMIN, 200, CLUSTER,
       lambda w, who: {"data": {"name": w["cluster"], "namespaces": ["llm", "x"], "kubeconfig": w["kubeconfig"],
                                "context": "emulator"}, "format": "json"}),
    Op("PATCH", "/api/clusters/{name}/", ADMIN, 200, CLUSTER, _json({"description": "changed"})),
    Op("DELETE", "/api/clusters/{name}/", ADMIN, 204, CLUSTER),
    Op("POST", "/api/clusters/{name}/check/", ADMIN, 202, CLUSTER, _json({})),
    Op("POST", "/api/clusters/{name}/hf-token/", ADMIN, 201, CLUSTER,
       _json({"namespace": "llm", "value": "hf_matrix"})),
    Op("GET", "/api/graphs/", VIEWER, 200),
    Op("POST", "/api/graphs/", OPERATOR, 201, body=_spec),
    Op("GET", "/api/graphs/{name}/", VIEWER, 200),
    Op("PUT", "/api/graphs/{name}/", OPERATOR, 200, body=_graph_update),
    Op("DELETE", "/api/graphs/{name}/", OPERATOR, 204, {"name": "spare"}),
    Op("POST", "/api/graphs/{name}/apply/", OPERATOR, 202, body=_json({})),
    Op("GET", "/api/graphs/{name}/diff/", VIEWER, 200, body=lambda w, who: {"query": "from_revision=1&to_revision=2"}),
    Op("GET", "/api/graphs/{name}/export/", VIEWER, 200),
    Op("GET", "/api/graphs/{name}/operations/", VIEWER, 200),
    Op("GET", "/api/graphs/{name}/ownership/", VIEWER, 200),
    Op("GET", "/api/graphs/{name}/planner/", VIEWER, 200),
    Op("GET", "/api/graphs/{name}/pods/{pod}/log/", VIEWER, 200),
    Op("GET", "/api/graphs/{name}/render/", VIEWER, 200),
    Op("GET", "/api/graphs/{name}/revisions/", VIEWER, 200),
    Op("GET", "/api/graphs/{name}/revisions/{number}/", VIEWER, 200),
    Op("POST", "/api/graphs/{name}/rollback/", OPERATOR, 202, body=_json({"revision": 1, "dry_run": True})),
    Op("POST", "/api/graphs/{name}/scale/", OPERATOR, 202, body=_json({"service": "decode", "replicas": 2})),
    Op("GET", "/api/graphs/{name}/status/", VIEWER, 200),
    Op("POST", "/api/graphs/{name}/undeploy/", OPERATOR, 202, body=_json({})),
    Op("GET", "/api/graphs/{name}/validate/", VIEWER, 200),
    Op("POST", "/api/graphs/from-template/", OPERATOR, 201,
       body=_json({"template": "mocker-disagg", "name": "made", "backend": "mocker"})),
    Op("POST", "/api/graphs/import/", OPERATOR, 201, body=_yaml),
    Op("GET", "/api/metrics/graphs/", VIEWER, 200),
    Op("GET", "/api/metrics/graphs/{name}/", VIEWER, 200),
    Op("GET", "/api/metrics/graphs/{name}/chart/", VIEWER, 200),
    Op("GET", "/api/metrics/graphs/{name}/gpus/", VIEWER, 200),
    Op("GET", "/api/metrics/graphs/{name}/objectives/", VIEWER, 200),
    Op("PUT", "/api/metrics/graphs/{name}/objectives/", OPERATOR, 200, body=_json({"ttft_ms": 400, "itl_ms": 40})),
    Op("PATCH", "/api/metrics/graphs/{name}/objectives/", OPERATOR, 200, body=_json({"ttft_ms": 300})),
    Op("GET", "/api/operations/", VIEWER, 200),
    Op("GET", "/api/operations/{id}/", VIEWER, 200, OPERATION),
    Op("GET", "/api/repos/", VIEWER, 200),
    Op("POST", "/api/repos/", ADMIN, 201, body=lambda w, who: _repository(w, who, name="other")),
    Op("GET", "/api/repos/{name}/", VIEWER, 200, REPO),
    Op("PUT", "/api/repos/{name}/", ADMIN, 200, REPO, lambda w, who: _repository(w, who, mode="propose")),
    Op("PATCH", "/api/repos/{name}/", ADMIN, 200, REPO, _json({"mode": "propose"})),
    Op("DELETE", "/api/repos/{name}/", ADMIN, 204, REPO),
    Op("POST", "/api/repos/{name}/commit/", OPERATOR, 202, REPO, _json({"graph": "kept"})),
    Op("GET", "/api/repos/{name}/exports/", VIEWER, 200, REPO),
    Op("POST", "/api/repos/{name}/link/", OPERATOR, 201, REPO, _json({"graph": "matrix", "path": "matrix.yaml"})),
    Op("GET", "/api/repos/{name}/links/", VIEWER, 200, REPO),
    Op("POST", "/api/repos/{name}/sync/", OPERATOR, 200, REPO, _json({})),
    Op("POST", "/api/repos/{name}/webhook/", PUBLIC, 202, REPO, _webhook, public=WEBHOOK),
    Op("GET", "/api/sizing/support/", VIEWER, 200),
    Op("GET", "/api/sizing/estimates/", VIEWER, 200),
    # The stored estimate's own inputs: answered from it (200), no new search.
    Op("POST", "/api/sizing/estimates/", OPERATOR, 200, body=_json(ESTIMATE_FORM)),
    Op("GET", "/api/sizing/estimates/{id}/", VIEWER, 200, ESTIMATE),
    Op("GET", "/api/sizing/estimates/{id}/dgdr/", VIEWER, 200, ESTIMATE,
       lambda w, who: {"query": "name=matrix-dgdr&namespace=llm"}),
    Op("POST", "/api/sizing/estimates/{id}/dgdr/", OPERATOR, 201, ESTIMATE,
       lambda w, who: {"data": {"cluster": w["cluster"], "namespace": w["namespace"], "name": "applied"},
                       "format": "json"}),
    Op("POST", "/api/sizing/estimates/{id}/graph/", OPERATOR, 201, ESTIMATE,
       _json({"name": "sized", "mode": "agg", "rank": 1})),
    Op("GET", "/api/sizing/compare/", VIEWER, 200,
       body=lambda w, who: {"query": f"a={w['estimate']}&b={w['estimate']}"}),
    Op("GET", "/api/sizing/requests/", VIEWER, 200),
    Op("GET", "/api/sizing/requests/{id}/", VIEWER, 200, DGDR),
    Op("POST", "/api/sizing/requests/{id}/adopt/", OPERATOR, 201, DGDR, _json({"graph": "adopted"})),
    Op("GET", "/api/templates/", VIEWER, 200),
    Op("GET", "/api/tokens/", VIEWER, 200),
    Op("POST", "/api/tokens/", VIEWER, 201, body=_json({"name": "matrix"})),
    Op("DELETE", "/api/tokens/{prefix}/", VIEWER, 204, TOKEN),
    Op("POST", "/api/validate/", VIEWER, 200, body=_yaml),
]

PAGES = [
    Op("GET", "/graphs/", VIEWER, 200),
    Op("GET", "/graphs/new/", OPERATOR, 200),
    Op("POST", "/graphs/new/", OPERATOR, 302,
       body=_form({"template": "mocker-disagg", "name": "made", "backend": "mocker", "dynamo_version": "1.6.1",
                   "model": "m", "action": "create", **{f"{pool}_{key}": value for pool in ("prefill", "decode")
                                                        for key, value in POOL.items()}})),
    Op("GET", "/graphs/import/", OPERATOR, 200),
    Op("POST", "/graphs/import/", OPERATOR, 302, body=lambda w, who: {"data": {"yaml": w["manifest"]}}),
    Op("POST", "/graphs/check/", VIEWER, 200, body=lambda w, who: {"data": {"yaml": w["manifest"]}}),
    Op("GET", "/graphs/{name}/", VIEWER, 200),
    Op("GET", "/graphs/{name}/edit/", OPERATOR, 200),
    Op("POST", "/graphs/{name}/edit/", OPERATOR, 302,
       body=lambda w, who: {"data": {"yaml": w["manifest_changed"], "expected_revision": 2}}),
    Op("GET", "/graphs/{name}/status/", VIEWER, 200),
    Op("GET", "/graphs/{name}/events/", VIEWER, 200),
    Op("GET", "/graphs/_events/", VIEWER, 200),
    Op("POST", "/graphs/{name}/apply/", OPERATOR, 200, body=_form({})),
    Op("POST", "/graphs/{name}/scale/", OPERATOR, 200, body=_form({"service": "decode", "replicas": 2})),
    Op("POST", "/graphs/{name}/undeploy/", OPERATOR, 200, body=_form({})),
    Op("POST", "/graphs/{name}/delete/", OPERATOR, 302, {"name": "spare"}, _form({"confirm": "spare"})),
    Op("GET", "/graphs/{name}/revisions/", VIEWER, 200),
    Op("POST", "/graphs/{name}/rollback/", OPERATOR, 302, body=_form({"revision": 1})),
    Op("GET", "/graphs/{name}/export/", VIEWER, 200),
    Op("GET", "/graphs/{name}/pods/{pod}/log/", VIEWER, 200),
    Op("GET", "/playground/", VIEWER, 200),
    Op("GET", "/playground/compare/", VIEWER, 200),
    Op("GET", "/playground/conversations/", VIEWER, 200),
    Op("POST", "/playground/conversations/new/", VIEWER, 201, body=_conversation),
    Op("POST", "/playground/conversations/{pk}/", VIEWER, 200, CONVERSATION, _conversation),
    Op("POST", "/playground/conversations/{pk}/delete/", VIEWER, 302, CONVERSATION, _form({})),
    Op("GET", "/playground/policies/", ADMIN, 200),
    Op("POST", "/playground/policies/", ADMIN, 302,
       body=_form({"graph": "matrix", "viewers_may_chat": ""})),
    Op("GET", "/playground/limits/", ADMIN, 200),
    Op("POST", "/playground/limits/", ADMIN, 302,
       body=lambda w, who: {"data": {"user": "viewer", "token": "", "requests_per_minute": 5,
                                     "concurrent_streams": 1}}),
    Op("GET", "/metrics/", VIEWER, 200),
    Op("GET", "/metrics/graphs/{name}/panel/", VIEWER, 200),
    Op("GET", "/metrics/graphs/{name}/chart/", VIEWER, 200),
    Op("POST", "/metrics/graphs/{name}/objectives/", OPERATOR, 200, body=_form({"ttft_ms": 400, "itl_ms": 40})),
    Op("GET", "/benchmarks/", VIEWER, 200),
    Op("GET", "/benchmarks/new/", OPERATOR, 200),
    Op("POST", "/benchmarks/new/", OPERATOR, 302, body=_form({"graph": "matrix", "profile": "custom"})),
    Op("GET", "/benchmarks/runs/{pk}/", VIEWER, 200, RUN),
    Op("POST", "/benchmarks/runs/{pk}/cancel/", OPERATOR, 302, ACTIVE_RUN, _form({})),
    Op("GET", "/benchmarks/runs/{pk}/artifacts/", VIEWER, 200, RUN),
    Op("GET", "/benchmarks/runs/{pk}/log/", VIEWER, 200, RUN),
    Op("GET", "/benchmarks/runs/{pk}/report/", VIEWER, 200, RUN, lambda w, who: dict(CSV)),
    Op("GET", "/benchmarks/compare/", VIEWER, 200, body=lambda w, who: {"query": f"runs={w['run']}"}),
    Op("GET", "/benchmarks/compare/report/", VIEWER, 200, body=lambda w, who: {"query": f"runs={w['run']}"}),
    Op("GET", "/benchmarks/studies/new/", OPERATOR, 200),
    Op("POST", "/benchmarks/studies/new/", OPERATOR, 302,
       body=_form({"graph": "matrix", "profile": "custom", "arms": "p1d1 p2d1"})),
    Op("GET", "/benchmarks/studies/{pk}/", VIEWER, 200, STUDY),
    Op("POST", "/benchmarks/studies/{pk}/cancel/", OPERATOR, 302, ACTIVE_STUDY, _form({})),
    Op("GET", "/benchmarks/graphs/{name}/sizing/", VIEWER, 200),
    Op("POST", "/benchmarks/graphs/{name}/recommend/", OPERATOR, 302, body=_form({"ttft_ms": 500})),
    Op("POST", "/benchmarks/recommendations/{pk}/apply/", OPERATOR, 302, REC, _form({})),
    Op("GET", "/clusters/", ADMIN, 200),
    Op("GET", "/clusters/new/", ADMIN, 200),
    Op("POST", "/clusters/new/", ADMIN, 302, body=_form({"name": "other", "namespaces": "llm", "in_cluster": "on"})),
    Op("GET", "/clusters/{name}/edit/", ADMIN, 200, CLUSTER),
    Op("POST", "/clusters/{name}/edit/", ADMIN, 302, CLUSTER,
       lambda w, who: {"data": {"name": w["cluster"], "namespaces": "llm\nx", "in_cluster": "on"}}),
    Op("POST", "/clusters/{name}/delete/", ADMIN, 302, CLUSTER, _form({})),
    Op("POST", "/clusters/{name}/check/", ADMIN, 302, CLUSTER, _form({})),
    Op("GET", "/clusters/{name}/hf-token/", ADMIN, 200, CLUSTER),
    Op("POST", "/clusters/{name}/hf-token/", ADMIN, 302, CLUSTER,
       _form({"namespace": "llm", "secret_name": "hf-token-secret", "key": "HF_TOKEN", "value": "hf_matrix"})),
    Op("GET", "/repos/", VIEWER, 200),
    # Readable by viewers; registering needs an admin, refused by the page in its own words.
    Op("POST", "/repos/", ADMIN, 302, body=lambda w, who: {"data": _repository(w, who, name="other")["data"]},
       refusals={"viewer": "Registering a repository needs the admin role.",
                 "operator": "Registering a repository needs the admin role.",
                 "norole": "This needs the viewer role."}),
    Op("GET", "/repos/{name}/", VIEWER, 200, REPO),
    Op("POST", "/repos/{name}/sync/", OPERATOR, 302, REPO, _form({})),
    Op("POST", "/repos/{name}/delete/", ADMIN, 302, REPO, _form({})),
    Op("POST", "/repos/{name}/link/", OPERATOR, 302, REPO, _form({"graph": "matrix", "path": "matrix.yaml"})),
    Op("POST", "/repos/{name}/commit/{graph}/", OPERATOR, 302, {"name": "repo", "graph": "kept"}, _form({})),
    Op("GET", "/repos/{name}/exports/{pk}/", VIEWER, 200, EXPORT),
    Op("GET", "/playground/exposure/{graph}/", OPERATOR, 200, {"graph": "name"}),
    Op("POST", "/playground/exposure/{graph}/", OPERATOR, 302, {"graph": "name"},
       _form({"host": "llm2.example.com", "gateway_name": "gw"})),
    Op("GET", "/sizing/", VIEWER, 200),
    # Readable by viewers; asking needs an operator, refused by the page in its own words.
    Op("POST", "/sizing/", OPERATOR, 302, body=_form(ESTIMATE_FORM),
       refusals={"norole": "This needs the viewer role."}),
    Op("GET", "/sizing/estimates/", VIEWER, 200),
    Op("GET", "/sizing/estimates/{pk}/", VIEWER, 200, ESTIMATE),
    Op("POST", "/sizing/estimates/{pk}/graph/", OPERATOR, 302, ESTIMATE,
       _form({"name": "sized", "mode": "agg", "rank": 1, "dynamo_version": "1.6.1"})),
    Op("GET", "/sizing/compare/", VIEWER, 200, body=lambda w, who: {"query": f"a={w['estimate']}&b={w['estimate']}"}),
    Op("POST", "/sizing/estimates/{pk}/dgdr/", OPERATOR, 302, ESTIMATE,
       lambda w, who: {"data": {"cluster": w["cluster"], "namespace": w["namespace"], "name": "page-applied",
                                "dynamo_version": "1.6.1"}}),
    Op("POST", "/sizing/requests/{pk}/refresh/", OPERATOR, 302, DGDR_PAGE, _form({})),
    Op("POST", "/sizing/requests/{pk}/adopt/", OPERATOR, 302, DGDR_PAGE, _form({"graph": "adopted-page"})),
    Op("GET", "/auth/oidc/login/", PUBLIC, 502, public=SIGN_IN),
    Op("GET", "/auth/oidc/callback/", PUBLIC, 400, body=lambda w, who: {"query": "code=c&state=never-issued"},
       public=SIGN_IN),
    Op("GET", "/audit/", ADMIN, 200),
    Op("GET", "/account/tokens/", VIEWER, 200),
    Op("POST", "/account/tokens/", VIEWER, 200, body=_form({"name": "matrix", "days": 7})),
    Op("GET", "/account/tokens/cli/", VIEWER, 200, body=lambda w, who: {"data": _cli_token(w, who)}),
    Op("POST", "/account/tokens/cli/", VIEWER, 200, body=lambda w, who: {"data": _cli_token(w, who)}),
    Op("POST", "/account/tokens/{prefix}/revoke/", VIEWER, 302, TOKEN, _form({"name": "spare"})),
]

OPERATIONS = API + PAGES
