"""Template filters for kubectl-style columns."""

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def age(value) -> str:
    """kubectl's AGE: 42s, 7m, 3h, 2d."""
    if not value:
        return "—"
    seconds = max(0, int((timezone.now() - value).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
