"""The status stamp (graphs.models.StatusStamp) and the triggers that keep it.

Every insert, update and delete of a row a graph's status shows adds one to the graph's stamp,
in the same transaction. On PostgreSQL the triggers are deferred to the commit: the stamp's
row is then locked last, when the transaction holds every other lock it will take, so two
writers of one graph (a watcher's observation, an operation) wait for each other's commit
instead of deadlocking on the stamp and a row they both write. SQLite runs one writer at a time.
"""

import django.db.models.deletion
from django.db import migrations, models

STAMP = "graphs_statusstamp"
# The tables whose rows the status shows, and how a row names its graph.
BY_GRAPH = ("graphs_operation", "graphs_plannerdecision", "graphs_event", "graphs_replicachange")
BY_DEPLOYMENT = ("graphs_pod",)


# A runtime writes every pod it observes on every observation (one upsert), and a running
# operation's worker renews its lease every few seconds: on PostgreSQL an update counts only
# when it changed a column other than those two, which the status never shows, so that a graph
# at rest keeps its stamp and a heartbeat's commit runs no trigger. (SQLite counts every update:
# correct, and on a laptop's one-user database the rows are re-read on each poll, as before.)
UNSHOWN = "'updated_at' - 'lease_until'"
CHANGED = f"(to_jsonb(OLD) - {UNSHOWN}) IS DISTINCT FROM (to_jsonb(NEW) - {UNSHOWN})"


def _graph_of(row: str, table: str) -> str:
    if table in BY_DEPLOYMENT:
        return f"(SELECT graph_id FROM graphs_deployment WHERE id = {row}.deployment_id)"
    return f"{row}.graph_id"


POSTGRESQL_FUNCTIONS = [f"""
CREATE OR REPLACE FUNCTION graphs_status_stamp_bump(g bigint) RETURNS void LANGUAGE sql AS $$
  INSERT INTO {STAMP} (graph_id, value) SELECT g, 1 WHERE g IS NOT NULL
  ON CONFLICT (graph_id) DO UPDATE SET value = {STAMP}.value + 1
$$""", """
CREATE OR REPLACE FUNCTION graphs_status_stamp_by_graph() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' THEN PERFORM graphs_status_stamp_bump(OLD.graph_id); END IF;
  IF TG_OP <> 'DELETE' THEN PERFORM graphs_status_stamp_bump(NEW.graph_id); END IF;
  RETURN NULL;
END $$""", f"""
CREATE OR REPLACE FUNCTION graphs_status_stamp_by_deployment() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' THEN PERFORM graphs_status_stamp_bump({_graph_of("OLD", "graphs_pod")}); END IF;
  IF TG_OP <> 'DELETE' THEN PERFORM graphs_status_stamp_bump({_graph_of("NEW", "graphs_pod")}); END IF;
  RETURN NULL;
END $$""", f"""
CREATE OR REPLACE FUNCTION graphs_status_stamp_drop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM {STAMP} WHERE graph_id = OLD.id;
  RETURN NULL;
END $$"""]


def _postgresql() -> list[str]:
    statements = list(POSTGRESQL_FUNCTIONS)
    for table in (*BY_GRAPH, *BY_DEPLOYMENT):
        function = "graphs_status_stamp_by_deployment" if table in BY_DEPLOYMENT else "graphs_status_stamp_by_graph"
        statements.append(f"CREATE CONSTRAINT TRIGGER {table}_status_stamp AFTER INSERT OR DELETE ON {table} "
                          f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {function}()")
        statements.append(f"CREATE CONSTRAINT TRIGGER {table}_status_stamp_update AFTER UPDATE ON {table} "
                          f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ({CHANGED}) EXECUTE FUNCTION {function}()")
    statements.append("CREATE CONSTRAINT TRIGGER graphs_graph_status_stamp AFTER DELETE ON graphs_graph "
                      "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION graphs_status_stamp_drop()")
    return statements


def _sqlite() -> list[str]:
    def bump(graph: str) -> str:
        # "WHERE true" tells SQLite's parser the SELECT ends before ON CONFLICT (its upsert docs).
        return (f"INSERT INTO {STAMP} (graph_id, value) SELECT g, 1 FROM (SELECT {graph} AS g) WHERE g IS NOT NULL "
                f"ON CONFLICT (graph_id) DO UPDATE SET value = value + 1;")

    statements = []
    for table in (*BY_GRAPH, *BY_DEPLOYMENT):
        for event, rows in (("INSERT", ("NEW",)), ("UPDATE", ("OLD", "NEW")), ("DELETE", ("OLD",))):
            body = " ".join(bump(_graph_of(row, table)) for row in rows)
            statements.append(f"CREATE TRIGGER {table}_status_stamp_{event.lower()} AFTER {event} ON {table} "
                              f"BEGIN {body} END")
    statements.append(SQLITE_GRAPH_DELETE)
    return statements


# SQLite drops a table's triggers when a migration rebuilds the table (as adding a NOT NULL
# column does): a migration that adds such a column to graphs_graph creates this one again.
SQLITE_GRAPH_DELETE = (f"CREATE TRIGGER IF NOT EXISTS graphs_graph_status_stamp_delete AFTER DELETE ON graphs_graph "
                       f"BEGIN DELETE FROM {STAMP} WHERE graph_id = OLD.id; END")


def _drop(vendor: str) -> list[str]:
    tables = (*BY_GRAPH, *BY_DEPLOYMENT)
    if vendor == "postgresql":
        return [*(f"DROP TRIGGER IF EXISTS {t}_status_stamp{suffix} ON {t}" for t in tables for suffix in ("", "_update")),
                "DROP TRIGGER IF EXISTS graphs_graph_status_stamp ON graphs_graph",
                *(f"DROP FUNCTION IF EXISTS {f}" for f in ("graphs_status_stamp_by_graph()",
                                                           "graphs_status_stamp_by_deployment()",
                                                           "graphs_status_stamp_drop()",
                                                           "graphs_status_stamp_bump(bigint)"))]
    return [*(f"DROP TRIGGER IF EXISTS {t}_status_stamp_{e}" for t in tables for e in ("insert", "update", "delete")),
            "DROP TRIGGER IF EXISTS graphs_graph_status_stamp_delete"]


def _run(statements) -> callable:
    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        sql = statements(vendor)
        if sql is None:
            raise RuntimeError(f"the status stamp's triggers are written for PostgreSQL and SQLite, not {vendor}")
        for statement in sql:
            schema_editor.execute(statement)
    return run


def create_triggers(vendor: str) -> list[str] | None:
    return {"postgresql": _postgresql, "sqlite": _sqlite}.get(vendor, lambda: None)()


class Migration(migrations.Migration):

    dependencies = [
        ('graphs', '0008_graph_archived'),
    ]

    operations = [
        migrations.CreateModel(
            name='StatusStamp',
            fields=[
                ('graph', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, primary_key=True, related_name='status_stamp', serialize=False, to='graphs.graph')),
                ('value', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(_run(create_triggers), _run(_drop)),
    ]
