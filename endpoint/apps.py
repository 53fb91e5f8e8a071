from django.apps import AppConfig


class EndpointConfig(AppConfig):
    name = "endpoint"
    verbose_name = "OpenAI endpoint"

    def ready(self):
        from django.db.models.signals import post_delete

        from accounts.models import ApiToken
        from graphs.runtimes.kubernetes import gateway

        from . import admission, services

        # The graph's gateway objects go beside its DGD when its exposure asks for it.
        gateway.provide(services.exposure_objects)

        # A revoked token stops admitting at once in this process (others: within the TTL).
        post_delete.connect(lambda **_: admission.forget(), sender=ApiToken, weak=False,
                            dispatch_uid="endpoint-forget-on-token-delete")
