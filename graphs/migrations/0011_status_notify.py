"""The status push (graphs.live): on PostgreSQL, every bump of a graph's status stamp also
``NOTIFY graphs_status`` with the graph's id, and so does a change of a deployment column the
status shows (not of its observed time, which moves on every look, nor of its applied manifest).
The stamp's triggers run at the commit and PostgreSQL delivers a notification at the commit,
once per graph per transaction. SQLite has no notifications: graphs.live reads versions there.
On SQLite an update now counts only when it changed a column other than the two the status never
shows, as on PostgreSQL (a runtime rewrites every pod on every look: each look had moved the
stamp, and an open page then fetched its status after every look). The columns are those of the table when this migration
runs: a migration that adds a column to one of these tables runs ``sqlite_update_triggers``."""

import importlib

from django.db import migrations

STAMPED = importlib.import_module("graphs.migrations.0009_status_stamp")

STAMP = "graphs_statusstamp"
CHANNEL = "graphs_status"
# The deployment columns the status does not show: a change of these alone notifies nobody.
UNSHOWN = "'observed_at' - 'manifest'"

NOTIFYING_BUMP = f"""
CREATE OR REPLACE FUNCTION graphs_status_stamp_bump(g bigint) RETURNS void LANGUAGE sql AS $$
  INSERT INTO {STAMP} (graph_id, value) SELECT g, 1 WHERE g IS NOT NULL
  ON CONFLICT (graph_id) DO UPDATE SET value = {STAMP}.value + 1;
  SELECT pg_notify('{CHANNEL}', g::text) WHERE g IS NOT NULL;
$$"""
SILENT_BUMP = f"""
CREATE OR REPLACE FUNCTION graphs_status_stamp_bump(g bigint) RETURNS void LANGUAGE sql AS $$
  INSERT INTO {STAMP} (graph_id, value) SELECT g, 1 WHERE g IS NOT NULL
  ON CONFLICT (graph_id) DO UPDATE SET value = {STAMP}.value + 1
$$"""
DEPLOYMENT_NOTIFY = f"""
CREATE OR REPLACE FUNCTION graphs_deployment_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('{CHANNEL}', (CASE WHEN TG_OP = 'DELETE' THEN OLD.graph_id ELSE NEW.graph_id END)::text);
  RETURN NULL;
END $$"""
CHANGED = f"(to_jsonb(OLD) - {UNSHOWN}) IS DISTINCT FROM (to_jsonb(NEW) - {UNSHOWN})"
FORWARD = [
    NOTIFYING_BUMP, DEPLOYMENT_NOTIFY,
    "CREATE TRIGGER graphs_deployment_notify AFTER INSERT OR DELETE ON graphs_deployment "
    "FOR EACH ROW EXECUTE FUNCTION graphs_deployment_notify()",
    f"CREATE TRIGGER graphs_deployment_notify_update AFTER UPDATE ON graphs_deployment "
    f"FOR EACH ROW WHEN ({CHANGED}) EXECUTE FUNCTION graphs_deployment_notify()",
]
BACKWARD = [
    "DROP TRIGGER IF EXISTS graphs_deployment_notify ON graphs_deployment",
    "DROP TRIGGER IF EXISTS graphs_deployment_notify_update ON graphs_deployment",
    "DROP FUNCTION IF EXISTS graphs_deployment_notify()",
    SILENT_BUMP,
]


def sqlite_update_triggers(schema_editor, *, changed_only: bool = True) -> None:
    """SQLite's update triggers of the status stamp, counting an update only when it changed a
    shown column (``changed_only``), or every update (as migration 0009 made them)."""
    connection = schema_editor.connection
    for table in (*STAMPED.BY_GRAPH, *STAMPED.BY_DEPLOYMENT):
        with connection.cursor() as cursor:
            columns = [c.name for c in connection.introspection.get_table_description(cursor, table)]
        shown = [c for c in columns if c not in ("updated_at", "lease_until")]
        when = " OR ".join(f'OLD."{c}" IS NOT NEW."{c}"' for c in shown)
        bumps = " ".join(
            f"INSERT INTO {STAMP} (graph_id, value) SELECT g, 1 FROM (SELECT {STAMPED._graph_of(row, table)} AS g) "  # noqa: S608, E501
            f"WHERE g IS NOT NULL ON CONFLICT (graph_id) DO UPDATE SET value = value + 1;" for row in ("OLD", "NEW"))
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_status_stamp_update")
        schema_editor.execute(f"CREATE TRIGGER {table}_status_stamp_update AFTER UPDATE ON {table} FOR EACH ROW "
                              f"{f'WHEN ({when}) ' if changed_only else ''}BEGIN {bumps} END")


def _run(statements: list[str], *, changed_only: bool):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)
        elif schema_editor.connection.vendor == "sqlite":
            sqlite_update_triggers(schema_editor, changed_only=changed_only)
    return run


class Migration(migrations.Migration):

    dependencies = [
        ('graphs', '0010_revision_companions'),
    ]

    operations = [migrations.RunPython(_run(FORWARD, changed_only=True), _run(BACKWARD, changed_only=False))]
