"""Deployment.cluster becomes a foreign key to the registered cluster (PROTECT), filled from
the name the column held; a name no registered cluster has any more (a graph deleted on a
cluster that was removed since) becomes no cluster."""

import django.db.models.deletion
from django.db import migrations, models


def names_to_keys(apps, schema_editor):
    Cluster = apps.get_model("clusters", "Cluster")
    Deployment = apps.get_model("graphs", "Deployment")
    ids = dict(Cluster.objects.values_list("name", "pk"))
    for dep in Deployment.objects.exclude(cluster_name="").only("pk", "cluster_name"):
        Deployment.objects.filter(pk=dep.pk).update(cluster_id=ids.get(dep.cluster_name))


def keys_to_names(apps, schema_editor):
    Cluster = apps.get_model("clusters", "Cluster")
    Deployment = apps.get_model("graphs", "Deployment")
    names = dict(Cluster.objects.values_list("pk", "name"))
    for dep in Deployment.objects.exclude(cluster_id=None).only("pk", "cluster_id"):
        Deployment.objects.filter(pk=dep.pk).update(cluster_name=names.get(dep.cluster_id, ""))


class Migration(migrations.Migration):

    dependencies = [
        ("clusters", "0001_initial"),
        ("graphs", "0004_cluster_ownership"),
    ]

    operations = [
        migrations.RenameField(model_name="deployment", old_name="cluster", new_name="cluster_name"),
        migrations.AddField(
            model_name="deployment",
            name="cluster",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="deployments", to="clusters.cluster"),
        ),
        migrations.RunPython(names_to_keys, keys_to_names),
        migrations.RemoveField(model_name="deployment", name="cluster_name"),
    ]
