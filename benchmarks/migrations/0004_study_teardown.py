"""Studies tear down their variant graphs when they end (Study.teardown_pending). Studies that
ended before this left their variants behind: those that did not ask to keep them are marked
so that the periodic reconcile tears them down now (delete what still runs, archive the graph)."""

from django.db import migrations, models


def mark_ended_studies(apps, schema_editor):
    Study = apps.get_model("benchmarks", "Study")
    Study.objects.filter(state__in=["succeeded", "failed", "cancelled"], keep_variants=False).update(
        teardown_pending=True)


class Migration(migrations.Migration):

    dependencies = [
        ("benchmarks", "0003_one_active_run_per_graph_from_the_job_model"),
        ("graphs", "0008_graph_archived"),
    ]

    operations = [
        migrations.AddField(
            model_name="study",
            name="teardown_pending",
            field=models.BooleanField(db_index=True, default=False),
        ),
        migrations.RunPython(mark_ended_studies, migrations.RunPython.noop),
    ]
