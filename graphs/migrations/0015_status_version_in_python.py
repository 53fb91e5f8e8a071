"""The status version is moved by its writers in Python (graphs.status_version.moved), which
also sends PostgreSQL's NOTIFY: the triggers of migrations 0009 and 0011 go, in both dialects,
and a graph's version row now goes with the graph through Django (on_delete=CASCADE)."""

import importlib

import django.db.models.deletion
from django.db import migrations, models

STAMPED = importlib.import_module("graphs.migrations.0009_status_stamp")
NOTIFIED = importlib.import_module("graphs.migrations.0011_status_notify")

DEPLOYMENT_NOTIFY_DROP = [
    "DROP TRIGGER IF EXISTS graphs_deployment_notify ON graphs_deployment",
    "DROP TRIGGER IF EXISTS graphs_deployment_notify_update ON graphs_deployment",
    "DROP FUNCTION IF EXISTS graphs_deployment_notify()",
]


def drop_triggers(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        return
    for statement in (DEPLOYMENT_NOTIFY_DROP if vendor == "postgresql" else []) + STAMPED._drop(vendor):
        schema_editor.execute(statement)


def create_triggers(apps, schema_editor):
    """Back to 0011: the triggers count every write, and notify on PostgreSQL."""
    vendor = schema_editor.connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        return
    for statement in STAMPED.create_triggers(vendor):
        schema_editor.execute(statement)
    if vendor == "postgresql":
        for statement in NOTIFIED.FORWARD:
            schema_editor.execute(statement)
    else:
        NOTIFIED.sqlite_update_triggers(schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('graphs', '0014_graph_labels_folded_search'),
    ]

    operations = [
        migrations.RunPython(drop_triggers, create_triggers),
        migrations.AlterField(
            model_name='statusstamp',
            name='graph',
            field=models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='status_stamp', serialize=False, to='graphs.graph'),
        ),
    ]
