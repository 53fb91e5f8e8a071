"""Policies, API limits and exposures now belong to the endpoint app (endpoint/migrations/0001):
removed from this app's state only; their tables stay."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("playground", "0004_graph_exposure"),
        ("endpoint", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name="ApiLimit"),
                migrations.DeleteModel(name="GraphExposure"),
                migrations.DeleteModel(name="PlaygroundPolicy"),
            ],
        ),
    ]
