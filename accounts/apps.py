from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import backends, schema, signals  # noqa: F401 - the OpenAPI scheme; the audit of logins and roles;
        # the session users' memory is forgotten on a change (backends)
