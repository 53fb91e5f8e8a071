"""What a graph is held to: its service-level objectives, and what its GPUs cost."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

# The frontend's TTFT histogram stops at 480 s and its ITL histogram at a few seconds to 80 s
# (depending on the Dynamo version): a target past the last bucket cannot be measured.
TTFT_MS_MAX = 480_000
ITL_MS_MAX = 60_000
PRICE_MAX = Decimal("10000")


class Objectives(models.Model):
    """One graph's SLO targets (time to first token, inter-token latency, both in ms, read
    against p90 on the overview and as the goodput threshold) and the price of one GPU-hour
    (empty: the GPU_HOUR_PRICE setting). Every field may be empty: no target, no SLO line."""

    graph = models.OneToOneField("graphs.Graph", on_delete=models.CASCADE, related_name="objectives")
    ttft_ms = models.FloatField(null=True, blank=True, verbose_name="TTFT target (ms)",
                                validators=[MinValueValidator(0.1), MaxValueValidator(TTFT_MS_MAX)])
    itl_ms = models.FloatField(null=True, blank=True, verbose_name="ITL target (ms)",
                               validators=[MinValueValidator(0.1), MaxValueValidator(ITL_MS_MAX)])
    gpu_hour_price = models.DecimalField(max_digits=9, decimal_places=4, null=True, blank=True,
                                         verbose_name="GPU-hour price",
                                         validators=[MinValueValidator(Decimal("0")), MaxValueValidator(PRICE_MAX)])
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "objectives"

    def __str__(self) -> str:
        return f"objectives of {self.graph}"

    @property
    def price(self) -> Decimal | None:
        """This graph's GPU-hour price, or the global one."""
        if self.gpu_hour_price is not None:
            return self.gpu_hour_price
        return global_gpu_hour_price()


def global_gpu_hour_price() -> Decimal | None:
    text = str(getattr(settings, "GPU_HOUR_PRICE", "") or "").strip()
    return Decimal(text) if text else None
