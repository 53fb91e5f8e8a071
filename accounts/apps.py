from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The OpenAPI scheme; forgetting remembered users on a change.
        from . import backends, schema  # noqa: F401
