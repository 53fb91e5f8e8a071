from django.apps import AppConfig


class SizingConfig(AppConfig):
    name = "sizing"
    verbose_name = "Sizing"
