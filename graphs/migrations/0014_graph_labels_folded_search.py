import importlib

from django.db import migrations, models, transaction

STAMPED = importlib.import_module("graphs.migrations.0009_status_stamp")
SEARCHED = importlib.import_module("graphs.migrations.0013_graph_search_text")
TRIGRAM_INDEX = "graphs_graph_search_folded_trgm"
LABELS_INDEX = "graphs_graph_labels_gin"


def fill(apps, schema_editor):
    """Existing graphs get their head's labels, and their search text in one case (Graph.searchable)."""
    Graph = apps.get_model("graphs", "Graph")
    batch = []
    for graph in Graph.objects.select_related("head").only("id", "name", "description", "head__model",
                                                            "head__labels").iterator(chunk_size=500):
        head = graph.head
        graph.search_text = "\n".join((graph.name, graph.description, head.model if head else "")).casefold()
        graph.labels = (head.labels or {}) if head else {}
        batch.append(graph)
        if len(batch) == 500:
            Graph.objects.bulk_update(batch, ["search_text", "labels"])
            batch = []
    Graph.objects.bulk_update(batch, ["search_text", "labels"])


def unfold(apps, schema_editor):
    """Back to 0013's search column (any case: the name, the description and the head's model)."""
    SEARCHED.fill(apps, schema_editor)


def graph_delete_trigger(apps, schema_editor):
    """SQLite rebuilt graphs_graph to add the column, dropping its trigger (0009's)."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(STAMPED.SQLITE_GRAPH_DELETE)


def indexes(apps, schema_editor):
    """PostgreSQL: the search column's trigram index on the column itself (the search is a plain
    LIKE now, 0013's was on UPPER() for ILIKE); a jsonb_path_ops GIN index on the graph's labels
    (containment only, a third of jsonb_ops' size); the revisions' label index, which no query
    reads any more, goes. Both GIN indexes are built with fastupdate off: a graph's row is written
    when its head moves, rarely, and is read by every list; with fastupdate on, every row written
    since the last vacuum sits in the index's pending list, which each search reads through
    (10,000 entries after 5,000 graphs were created, until autovacuum comes)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP INDEX IF EXISTS "{SEARCHED.TRIGRAM_INDEX}"')
    schema_editor.execute('DROP INDEX IF EXISTS "graphs_revision_labels_gin"')
    schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{LABELS_INDEX}" ON "graphs_graph" '
                          'USING gin ("labels" jsonb_path_ops) WITH (fastupdate = off)')
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except Exception:  # noqa: BLE001 (no privilege: the search reads every row instead, as in 0013)
        return
    schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{TRIGRAM_INDEX}" ON "graphs_graph" '
                          'USING gin ("search_text" gin_trgm_ops) WITH (fastupdate = off)')


def drop_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP INDEX IF EXISTS "{TRIGRAM_INDEX}"')
    schema_editor.execute(f'DROP INDEX IF EXISTS "{LABELS_INDEX}"')
    importlib.import_module("graphs.migrations.0012_revision_labels").gin_index(apps, schema_editor)
    SEARCHED.trigram_index(apps, schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ("graphs", "0013_graph_search_text"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, graph_delete_trigger),  # after the column goes, back
        migrations.AddField(
            model_name="graph",
            name="labels",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(graph_delete_trigger, migrations.RunPython.noop),
        migrations.RunPython(fill, unfold),
        migrations.RunPython(indexes, drop_indexes),
    ]
