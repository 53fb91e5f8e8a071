from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        # The audit of logins, roles and tokens, whichever way they change.
        from . import receivers  # noqa: F401
