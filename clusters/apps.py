from django.apps import AppConfig


class ClustersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "clusters"
    verbose_name = "Kubernetes clusters"

    def ready(self) -> None:
        from telemetry import scrape

        from . import telemetry

        scrape.register("clusters", telemetry.clusters)
