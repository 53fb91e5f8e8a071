"""The objectives form: validates input and hands typed values to metrics.services."""

from __future__ import annotations

from decimal import Decimal

from django import forms

from .models import ITL_MS_MAX, PRICE_MAX, TTFT_MS_MAX


class ObjectivesForm(forms.Form):
    ttft_ms = forms.FloatField(required=False, min_value=0.1, max_value=TTFT_MS_MAX, label="TTFT target (ms)",
                               help_text="Time to first token, read against p90. Empty: no target.")
    itl_ms = forms.FloatField(required=False, min_value=0.1, max_value=ITL_MS_MAX, label="ITL target (ms)",
                              help_text="Inter-token latency, read against p90. Empty: no target.")
    gpu_hour_price = forms.DecimalField(required=False, min_value=Decimal("0"), max_value=PRICE_MAX,
                                        max_digits=9, decimal_places=4, label="GPU-hour price",
                                        help_text="Empty: the global price, if one is set.")
