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
    ]
