"""AIConfigurator's column names hold slashes and parentheses (``tokens/s/gpu``, ``(p)tp``),
which Django's dotted lookups cannot spell."""

from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.filter
def cut_reason(simulated: str) -> str:
    """A run's ``simulated`` ("<label>: <why>") without the why: the label, timing included."""
    return str(simulated or "").split(": ", 1)[0]
