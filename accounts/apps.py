from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The OpenAPI scheme; the audit of logins and roles; forgetting remembered users on a change.
        from . import backends, schema, signals  # noqa: F401
