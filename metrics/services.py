"""Writes of the metrics app: one function per verb. Views, the API and the admin call these."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from django.db import transaction

from audit.services import audit_record

from .models import Objectives

if TYPE_CHECKING:
    from accounts.roles import Actor


@transaction.atomic
def objectives_set(*, graph, ttft_ms: float | None, itl_ms: float | None, gpu_hour_price: Decimal | None,
                   user: Actor = None, via: str = "ui") -> Objectives:
    """Set a graph's SLO targets and GPU-hour price (None clears one). Raises
    django.core.exceptions.ValidationError for values out of range."""
    objectives = Objectives.objects.select_for_update().filter(graph=graph).first() or Objectives(graph=graph)
    before = {"ttft_ms": objectives.ttft_ms, "itl_ms": objectives.itl_ms,
              "gpu_hour_price": str(objectives.gpu_hour_price) if objectives.gpu_hour_price is not None else None}
    objectives.ttft_ms = ttft_ms
    objectives.itl_ms = itl_ms
    objectives.gpu_hour_price = gpu_hour_price
    objectives.updated_by = user if user is not None and user.is_authenticated else None
    objectives.full_clean()
    objectives.save()
    audit_record(actor=user, via=via, action="objectives.set", target_type="graph", target=graph.name, before=before,
                 after={"ttft_ms": ttft_ms, "itl_ms": itl_ms,
                        "gpu_hour_price": str(gpu_hour_price) if gpu_hour_price is not None else None})
    return objectives
