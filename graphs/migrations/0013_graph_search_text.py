import importlib

from django.db import migrations, models, transaction

STAMPED = importlib.import_module("graphs.migrations.0009_status_stamp")
TRIGRAM_INDEX = "graphs_graph_search_trgm"


def fill(apps, schema_editor):
    """Existing graphs get the search column (services._set_head writes it with every head)."""
    Graph = apps.get_model("graphs", "Graph")
    batch = []
    for graph in Graph.objects.select_related("head").only("id", "name", "description", "head__model") \
            .iterator(chunk_size=500):
        graph.search_text = "\n".join((graph.name, graph.description, graph.head.model if graph.head else ""))
        batch.append(graph)
        if len(batch) == 500:
            Graph.objects.bulk_update(batch, ["search_text"])
            batch = []
    Graph.objects.bulk_update(batch, ["search_text"])


def graph_delete_trigger(apps, schema_editor):
    """SQLite rebuilt graphs_graph to add the column, dropping its trigger (0009's)."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(STAMPED.SQLITE_GRAPH_DELETE)


def trigram_index(apps, schema_editor):
    """PostgreSQL: a trigram index on UPPER(search_text), the expression Django's icontains
    compares, so "contains, any case" is an index scan. pg_trgm ships with PostgreSQL and is a
    trusted extension (13+): the database's owner may create it. Where it cannot be created the
    search still works, reading every row."""
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except Exception:  # noqa: BLE001 (no privilege: the search reads every row instead)
        return
    schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{TRIGRAM_INDEX}" ON "graphs_graph" '
                          'USING gin (UPPER("search_text") gin_trgm_ops)')


def drop_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f'DROP INDEX IF EXISTS "{TRIGRAM_INDEX}"')


class Migration(migrations.Migration):

    dependencies = [
        ("graphs", "0012_revision_labels"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, graph_delete_trigger),  # after the column goes, back
        migrations.AddField(
            model_name="graph",
            name="search_text",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.RunPython(graph_delete_trigger, migrations.RunPython.noop),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.RunPython(trigram_index, drop_trigram_index),
    ]
