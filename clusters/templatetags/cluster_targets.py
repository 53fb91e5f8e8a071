"""``{% apply_targets as targets %}``: each registered cluster and namespace a graph may be
applied to, for the apply form's target select (database only)."""

from django import template

from ..selectors import cluster_targets

register = template.Library()


@register.simple_tag
def apply_targets():
    return cluster_targets()
