from django.db import migrations, models

from core.labels import labels_of


def fill(apps, schema_editor):
    """Existing revisions get their labels from their spec (the model's save() does it for new ones)."""
    Revision = apps.get_model("graphs", "Revision")
    batch = []
    for revision in Revision.objects.only("id", "spec").iterator(chunk_size=500):
        spec = revision.spec if isinstance(revision.spec, dict) else {}
        revision.labels = labels_of(spec.get("metadata_extra"))
        if revision.labels:
            batch.append(revision)
        if len(batch) == 500:
            Revision.objects.bulk_update(batch, ["labels"])
            batch = []
    Revision.objects.bulk_update(batch, ["labels"])


def gin_index(apps, schema_editor):
    """PostgreSQL: a GIN index on the labels, so that a label selector's key=value is a
    containment (@>) the index serves, and a key alone (?) too."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute('CREATE INDEX IF NOT EXISTS "graphs_revision_labels_gin" ON "graphs_revision" '
                              'USING gin ("labels")')


def drop_gin_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute('DROP INDEX IF EXISTS "graphs_revision_labels_gin"')


class Migration(migrations.Migration):

    dependencies = [
        ("graphs", "0011_status_notify"),
    ]

    operations = [
        migrations.AddField(
            model_name="revision",
            name="labels",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.RunPython(gin_index, drop_gin_index),
    ]
