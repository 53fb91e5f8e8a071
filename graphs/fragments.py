"""Rendered HTML remembered per process, keyed by everything it was rendered from.

A page's queries read the rows it shows (cheap); turning them into HTML with Django's templates
is what costs (a graph list of 50 rows is about two thirds of the page's CPU). ``render`` keys
a fragment by a digest of its inputs, plain values exactly as the page read them, so a changed
input is another key: there is nothing to invalidate and a fragment is never stale. What
changes with the clock alone (an "updated 5 minutes ago") must be among the inputs, at the
granularity it is shown with.

The cache is the ``fragments`` alias: memory of each process (these are memos of a pure
function, not shared state), bounded, least recently used entries dropped first."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from django.core.cache import caches
from django.utils.safestring import SafeString, mark_safe

ALIAS = "fragments"
TTL = 600  # seconds: an entry nobody asks for again goes after this long anyway


def key(name: str, inputs) -> str:
    digest = hashlib.blake2b(repr(inputs).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{name}:{digest}"


def render(name: str, inputs, produce: Callable[[], str]) -> SafeString:
    """The HTML ``produce()`` gives for ``inputs``, rendered once per process."""
    cache = caches[ALIAS]
    k = key(name, inputs)
    html = cache.get(k)
    if html is None:
        html = str(produce())
        cache.set(k, html, TTL)
    return mark_safe(html)  # noqa: S308 (produce() is a template rendering: escaped already)
