"""Backing up and restoring the control plane's state (docs/backups.md): pg_dump of the real
database, pg_restore into a new one, and the product started on the restored copy. Every
graph, revision, operation, audit row and token digest comes back; an operation the dump
caught unfinished is ended by ``after_restore`` and never re-run; nothing is re-applied."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from accounts.tokens import token_create
from core.catalog import PoolFields
from graphs import operations, services
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "graphs_graph": "name, description", "graphs_revision": "graph_id, number, spec::text",
    "graphs_operation": "id, kind, state, result", "graphs_deployment": "graph_id, generation, revision_id, active",
    "audit_auditrecord": "id, action, target", "accounts_apitoken": "digest, token_key",
}


def _conninfo(name: str) -> str:
    s = connection.settings_dict
    return f"host={s.get('HOST') or '127.0.0.1'} port={s.get('PORT') or 5432} user={s.get('USER') or 'postgres'} " \
           f"dbname={name}"


def _rows(conninfo: str) -> dict[str, list[tuple]]:
    with psycopg.connect(conninfo) as db:
        return {t: db.execute(f"SELECT {cols} FROM {t} ORDER BY 1, 2").fetchall()  # noqa: S608 (our names)
                for t, cols in TABLES.items()}


@pytest.fixture
def restored_db():
    if connection.vendor != "postgresql":
        pytest.skip("backups are of PostgreSQL (docs/backups.md)")
    name = connection.settings_dict["NAME"] + "_restore"
    with psycopg.connect(_conninfo("postgres"), autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}"')
        db.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(_conninfo("postgres"), autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_dump_restores_every_graph_revision_operation_audit_row_and_token_digest(users, restored_db, tmp_path):
    pool = PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret="")
    graph = factories.graph("kept", model="m", backend="mocker",
                                                  prefill=pool, decode=pool)
    revised = graph.head.graph_spec.model_copy(deep=True)
    revised.services[1].replicas = 2
    services.graph_update(graph=graph, spec=revised, message="two prefill workers")
    applied = operations.graph_apply(graph=graph, via="api")
    operations.operation_run(applied.pk)
    unfinished = operations.graph_scale(graph=graph, service="decode", replicas=3, via="api")  # pending at dump
    token_create(user=users["operator"], name="backup", via="system")
    s = connection.settings_dict
    dump = tmp_path / "controlplane.dump"
    subprocess.run(["pg_dump", "--format=custom", "--no-owner", f"--file={dump}", "-h", s.get("HOST") or "127.0.0.1",
                    "-p", str(s.get("PORT") or 5432), "-U", s.get("USER") or "postgres", s["NAME"]], check=True)
    subprocess.run(["pg_restore", "--no-owner", "--exit-on-error", "-h", s.get("HOST") or "127.0.0.1",
                    "-p", str(s.get("PORT") or 5432), "-U", s.get("USER") or "postgres", "-d", restored_db,
                    str(dump)], check=True)
    before = _rows(_conninfo(s["NAME"]))
    assert _rows(_conninfo(restored_db)) == before
    assert len(before["graphs_revision"]) == 2 and before["accounts_apitoken"]

    host, port, user = s.get("HOST") or "127.0.0.1", s.get("PORT") or 5432, s.get("USER") or "postgres"
    url = f"postgres://{user}@{host}:{port}/{restored_db}"
    out = subprocess.run([sys.executable, "manage.py", "after_restore"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, DATABASE_URL=url), check=True).stdout
    assert "ended 1 unfinished operation(s)" in out
    after = _rows(_conninfo(restored_db))
    ops = {row[0]: row for row in after["graphs_operation"]}
    assert ops[unfinished.pk][2] == "failed" and "restored from a backup" in ops[unfinished.pk][3]
    assert ops[applied.pk][2] == "succeeded"
    # Nothing re-applied: the same operations, the same desired state and generation.
    assert sorted(ops) == sorted(row[0] for row in before["graphs_operation"])
    assert after["graphs_deployment"] == before["graphs_deployment"]
    assert after["graphs_revision"] == before["graphs_revision"]
    assert after["accounts_apitoken"] == before["accounts_apitoken"]
    assert [r[1] for r in after["audit_auditrecord"]][-1] == "controlplane.restore"
