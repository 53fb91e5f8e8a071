from django.apps import AppConfig


class ReposConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "repos"
    verbose_name = "Git repositories"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the revision receiver)

