from django.apps import AppConfig


class ControlplaneConfig(AppConfig):
    name = "controlplane"
