import importlib

from django.db import migrations, models

LABELLED = importlib.import_module("graphs.migrations.0012_revision_labels")
SEARCHED = importlib.import_module("graphs.migrations.0013_graph_search_text")


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


def drop_indexes(apps, schema_editor):
    """PostgreSQL: no index on either column, and 0013's trigram index and 0012's label index go.
    The list's queries are prepared statements (settings.py), and PostgreSQL's generic plan for
    them cannot know how many graphs a search or a selector matches: with a GIN index at hand it
    guessed a few, and read every graph through the index for "bench" or "team=team-3" (7.8 ms
    where the graph table's 5,000 narrow rows are read in 0.7 ms). Read whole, the table costs
    the same whatever the query matches. The GIN indexes also kept every row written since the
    last vacuum in a pending list that each search read through."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f'DROP INDEX IF EXISTS "{SEARCHED.TRIGRAM_INDEX}"')
        schema_editor.execute('DROP INDEX IF EXISTS "graphs_revision_labels_gin"')


def restore_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        LABELLED.gin_index(apps, schema_editor)
        SEARCHED.trigram_index(apps, schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ("graphs", "0013_graph_search_text"),
    ]

    operations = [
        # SQLite rebuilds graphs_graph to add the column, dropping 0009's trigger: 0013's step
        # creates it again, after the column comes and after it goes
        migrations.RunPython(migrations.RunPython.noop, SEARCHED.graph_delete_trigger),
        migrations.AddField(
            model_name="graph",
            name="labels",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(SEARCHED.graph_delete_trigger, migrations.RunPython.noop),
        migrations.RunPython(fill, unfold),
        migrations.RunPython(drop_indexes, restore_indexes),
    ]
