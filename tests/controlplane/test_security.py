"""Security properties that hold for every page: CSP with nonces, deploy checks, login
throttling, and the append-only audit log with one record per mutation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from audit.models import AuditRecord
from audit.services import REDACTED, audit_record, redact

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


def test_pages_carry_a_strict_csp_whose_nonce_matches_every_script_tag(client_for):
    client = client_for("operator")
    for url in ("/graphs/", "/graphs/new/", "/graphs/import/", "/login/"):
        response = client.get(url)
        policy = response["Content-Security-Policy"]
        nonce = re.search(r"'nonce-([^']+)'", policy).group(1)
        assert "script-src 'self' 'nonce-" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert "frame-ancestors 'none'" in policy
        html = response.content.decode()
        scripts = re.findall(r"<script[^>]*>", html)
        assert scripts, url
        assert all(f'nonce="{nonce}"' in tag for tag in scripts), (url, scripts)
        assert not re.search(r"\son[a-z]+=\"", html), f"inline event handler in {url}"


def test_the_api_docs_page_runs_without_inline_script(client_for):
    response = client_for("viewer").get("/api/docs/")
    assert response.status_code == 200
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", response.content.decode())


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    env = dict(os.environ, DJANGO_DEBUG="0", DJANGO_SECURE_TLS="1",
               DJANGO_SECRET_KEY="x" * 60 + "-Production-Key-0123456789",
               DJANGO_ALLOWED_HOSTS="controlplane.example.com", CONTROLPLANE_VAR_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_without_a_secret_key_the_installation_makes_one_and_a_missing_key_file_stops_it(tmp_path):
    env = dict(os.environ, DJANGO_DEBUG="0", CONTROLPLANE_VAR_DIR=str(tmp_path))
    env.pop("DJANGO_SECRET_KEY", None)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "secret_key").read_text().strip()) >= 50
    # Where the key is mounted as a file (deploy/), a missing file is an error, not a new key.
    env["DJANGO_SECRET_KEY_FILE"] = str(tmp_path / "not-mounted")
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "not-mounted" in result.stderr


def test_repeated_failed_logins_lock_the_account_from_that_address(client, users, settings):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(3):
        response = client.post("/login/", {"username": "operator", "password": "wrong"})
    assert response.status_code in (403, 429)
    assert "Too many failed logins" in response.content.decode()
    # Even the right password is refused while locked out.
    response = client.post("/login/", {"username": "operator", "password": "pw-12345678"})
    assert response.status_code in (403, 429)
    assert "_auth_user_id" not in client.session


def test_attempts_during_a_lockout_do_not_restart_its_clock(client, users, settings):
    from datetime import timedelta

    from axes.models import AccessAttempt

    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(3):
        client.post("/login/", {"username": "operator", "password": "wrong"})
    [attempt] = AccessAttempt.objects.filter(username="operator")
    locked_at, failures = attempt.attempt_time, attempt.failures_since_start
    for password in ("wrong", "also wrong", "pw-12345678"):
        response = client.post("/login/", {"username": "operator", "password": password})
        assert response.status_code in (403, 429)
    attempt.refresh_from_db()
    assert (attempt.attempt_time, attempt.failures_since_start) == (locked_at, failures)
    # The cool-off (AXES_COOLOFF_HOURS) runs from the failure that locked the account out.
    AccessAttempt.objects.filter(pk=attempt.pk).update(
        attempt_time=locked_at - timedelta(hours=settings.AXES_COOLOFF_TIME, seconds=1))
    response = client.post("/login/", {"username": "operator", "password": "pw-12345678"})
    assert response.status_code == 302
    assert "_auth_user_id" in client.session


def test_every_graph_mutation_leaves_one_audit_record_naming_who_and_from_where(client_for, api_for, users,
                                                                                reference_dir):
    operator = client_for("operator")
    seed = (reference_dir / "seed-disagg.yaml").read_text()
    operator.post("/graphs/import/", {"yaml": seed})
    api = api_for("operator")
    api.post("/api/graphs/import/", seed.replace("replicas: 2", "replicas: 3", 1),
             content_type="application/yaml")
    # dynamo-cp is an API client that says so: its calls are audited as the CLI's, by their user.
    api.post("/api/graphs/import/", (reference_dir / "dgd-templates-1.6.1" / "vllm-agg.yaml").read_text(),
             content_type="application/yaml", HTTP_X_CONTROLPLANE_CLIENT="cli")
    records = list(AuditRecord.objects.exclude(action__regex=r"^(auth|user|token)\.").order_by("id")
                   .values_list("action", "target", "via", "actor_name"))
    assert records == [
        ("graph.create", "vllm-disagg", "ui", "operator"),
        ("graph.update", "vllm-disagg", "api", "operator"),
        ("graph.create", "vllm-agg", "cli", "operator"),
    ]
    update = AuditRecord.objects.get(action="graph.update")
    assert update.before["revision"] == 1 and update.after["revision"] == 2


def test_audit_records_are_append_only_and_redact_secret_values():
    record = audit_record(action="secret.write", target_type="secret", target="ns/hf-token-secret",
                          after={"name": "hf-token-secret", "HF_TOKEN": "hf_canary_123", "password": "p"})
    assert record.after == {"name": "hf-token-secret", "HF_TOKEN": REDACTED, "password": REDACTED}
    assert "hf_canary_123" not in str(AuditRecord.objects.values_list("after", flat=True))
    with pytest.raises(ValueError, match="append-only"):
        record.save()
    with pytest.raises(ValueError, match="append-only"):
        record.delete()
    # Secret *names* are references, not secrets: kept.
    assert redact({"hf_token_secret": "hf-token-secret", "envFromSecret": "s"}) == {
        "hf_token_secret": "hf-token-secret", "envFromSecret": "s"}


def test_only_admins_read_the_audit_log(client_for, api_for):
    audit_record(action="graph.create", target_type="graph", target="x")
    assert client_for("operator").get("/audit/").status_code == 403
    assert api_for("operator").get("/api/audit/").status_code == 403
    page = client_for("admin").get("/audit/?action=graph.create")
    assert page.status_code == 200 and "graph.create" in page.content.decode()
    body = api_for("admin").get("/api/audit/?target=x").json()
    assert body["count"] == 1 and body["results"][0]["action"] == "graph.create"


def test_cluster_objective_and_policy_changes_are_audited_too(users, django_capture_on_commit_callbacks):
    from clusters import services as clusters
    from core.catalog import PoolFields, build_spec
    from endpoint.services import policy_set
    from graphs import services as graphs
    from metrics.services import objectives_set

    admin = users["admin"]
    with django_capture_on_commit_callbacks(execute=False):
        cluster = clusters.cluster_create(name="prod", namespaces=["dynamo"], in_cluster=True, user=admin, via="api")
        clusters.cluster_update(cluster=cluster, namespaces=["dynamo", "team-b"], user=admin)
    graph = graphs.graph_create(spec=build_spec(template="mocker-disagg", name="audited", model="m", backend="mocker",
                                                prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0)), user=admin)
    objectives_set(graph=graph, ttft_ms=200, itl_ms=20, gpu_hour_price=None, user=admin, via="api")
    policy_set(graph=graph, viewers_may_chat=True, user=admin)
    actions = list(AuditRecord.objects.exclude(action__regex=r"^(auth|user|token)\.").order_by("id")
                   .values_list("action", "via"))
    assert actions == [("cluster.create", "api"), ("cluster.update", "ui"), ("graph.create", "ui"),
                       ("objectives.set", "api"), ("playground.policy", "ui")]
    update = AuditRecord.objects.get(action="cluster.update")
    assert update.before["namespaces"] == ["dynamo"] and update.after["namespaces"] == ["dynamo", "team-b"]


def test_nul_bytes_in_lookups_are_the_callers_error_not_a_server_error(api_for, client_for):
    # PostgreSQL refuses NUL in text even in a WHERE clause; SQLite does not: assert on both.
    api = api_for("operator")
    assert api.get("/api/operations/?graph=a%00b").status_code == 400
    response = api.post("/api/benchmarks/recommendations/", {"graph": "a\x00b"}, format="json")
    assert response.status_code == 400
    assert client_for("viewer").get("/graphs/?q=%00").status_code == 400
