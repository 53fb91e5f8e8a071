from django.apps import AppConfig


class GraphsConfig(AppConfig):
    name = "graphs"
    verbose_name = "Graphs"

    def ready(self) -> None:
        from telemetry import scrape

        from . import telemetry

        scrape.register("operations", telemetry.operations)
        scrape.register("status_cache", telemetry.status_cache)
