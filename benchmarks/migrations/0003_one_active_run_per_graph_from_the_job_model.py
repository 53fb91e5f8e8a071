"""BenchmarkRun takes its one-active-per-graph constraint from the shared job model
(jobs.models.Job), under the name that model gives it: the same rule, renamed."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("benchmarks", "0002_streaming_chat_profile"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="benchmarkrun", name="one_active_benchmark_per_graph"),
        migrations.AddConstraint(
            model_name="benchmarkrun",
            constraint=models.UniqueConstraint(condition=models.Q(("state__in", ["pending", "running"])),
                                               fields=("graph",), name="one_active_benchmarkrun_per_graph"),
        ),
    ]
