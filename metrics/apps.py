from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"
    verbose_name = "Metrics"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The graph page's pod table shows each pod's GPU use, read from Prometheus.
        from graphs.status_cache import POD_READINGS

        from .gpus import pod_gpu_usage

        POD_READINGS.append(pod_gpu_usage)
