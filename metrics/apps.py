from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"
    verbose_name = "Metrics"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The graph page's pod table shows each pod's GPU use, read from Prometheus.
        # A Kubernetes graph's routable-workers chart, from its frontend's series.
        from graphs.status_cache import POD_READINGS, ROUTABLE_READINGS

        from .gpus import pod_gpu_usage
        from .routable import kubernetes_timeline

        POD_READINGS.append(pod_gpu_usage)
        ROUTABLE_READINGS.append(kubernetes_timeline)
