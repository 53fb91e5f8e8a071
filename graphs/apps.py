from django.apps import AppConfig


class GraphsConfig(AppConfig):
    name = "graphs"
    verbose_name = "Graphs"
