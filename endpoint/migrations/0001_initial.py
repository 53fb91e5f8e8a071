"""The endpoint's models move here from the playground app in Django's state only: their tables
(playground_*) and rows stay as they are, and their content types (and so any permission
granted on them) follow them to this app."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = ("playgroundpolicy", "apilimit", "graphexposure")


def _relabel(apps, schema_editor, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.using(schema_editor.connection.alias).filter(app_label=old, model__in=MOVED).update(
        app_label=new)


def forwards(apps, schema_editor):
    _relabel(apps, schema_editor, "playground", "endpoint")


def backwards(apps, schema_editor):
    _relabel(apps, schema_editor, "endpoint", "playground")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("graphs", "0007_revision_summary"),
        ("playground", "0004_graph_exposure"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="PlaygroundPolicy",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("viewers_may_chat", models.BooleanField(default=False)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("graph", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE,
                                                       related_name="playground_policy", to="graphs.graph")),
                        ("updated_by", models.ForeignKey(blank=True, null=True,
                                                         on_delete=django.db.models.deletion.SET_NULL,
                                                         related_name="+", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={"db_table": "playground_playgroundpolicy", "verbose_name_plural": "playground policies"},
                ),
                migrations.CreateModel(
                    name="ApiLimit",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("token_id", models.CharField(blank=True, max_length=64)),
                        ("token_label", models.CharField(blank=True, max_length=100)),
                        ("requests_per_minute", models.PositiveIntegerField(blank=True, null=True)),
                        ("concurrent_streams", models.PositiveIntegerField(blank=True, null=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("updated_by", models.ForeignKey(blank=True, null=True,
                                                         on_delete=django.db.models.deletion.SET_NULL,
                                                         related_name="+", to=settings.AUTH_USER_MODEL)),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                   related_name="api_limits", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "playground_apilimit",
                        "constraints": [models.UniqueConstraint(fields=("user", "token_id"),
                                                                name="api_limit_per_user_or_token")],
                    },
                ),
                migrations.CreateModel(
                    name="GraphExposure",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("host", models.CharField(max_length=253)),
                        ("gateway_name", models.CharField(blank=True, max_length=253)),
                        ("gateway_namespace", models.CharField(blank=True, max_length=63)),
                        ("ingress_class", models.CharField(blank=True, max_length=253)),
                        ("tls_secret", models.CharField(blank=True, max_length=253)),
                        ("apply_with_graph", models.BooleanField(default=False)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("graph", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE,
                                                       related_name="exposure", to="graphs.graph")),
                        ("updated_by", models.ForeignKey(blank=True, null=True,
                                                         on_delete=django.db.models.deletion.SET_NULL,
                                                         related_name="+", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={"db_table": "playground_graphexposure"},
                ),
            ],
        ),
        migrations.RunPython(forwards, backwards, elidable=True),
    ]
