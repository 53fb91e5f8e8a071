"""AIConfigurator's column names hold slashes and parentheses (``tokens/s/gpu``, ``(p)tp``),
which Django's dotted lookups cannot spell."""

from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if isinstance(mapping, dict) else None
