"""Reads for other apps' pages: the estimates that bear on a graph."""

from __future__ import annotations

from core.spec import GraphSpec

from .models import Estimate, EstimateState
from .predictions import prediction


def estimates_for(spec: GraphSpec, limit: int = 5) -> dict:
    """The estimate this graph was made from (its prediction), and recent finished estimates
    of the model it serves, newest first: the recommendation page's AIConfigurator side."""
    made_from = prediction(spec)
    model = spec.model or ""
    recent = list(Estimate.objects.filter(state=EstimateState.SUCCEEDED, inputs__model=model)[:limit]) if model else []
    return {"made_from": made_from.as_dict() if made_from else None, "estimates": recent, "model": model}
