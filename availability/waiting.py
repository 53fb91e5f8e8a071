"""Views that wait on something other than the database (Prometheus, a cluster's API server, a
Git host, the identity provider, a client reading a download), marked where they are declared.
The web server runs them in a pool of their own (controlplane/asgi.py) so that they never hold
up the pages, which only read the database: a view says what it waits on, and a new one needs
no edit of the server.

    @waits_on("prometheus")                       # a function view, a view class or a viewset
    @waits_on("prometheus", htmx_only=True)      # only its htmx fragment waits (the page does not)
    urlpatterns = waiting(urlpatterns, "a cluster's API server")   # every view of a URL list
    @waits_on("the Git host") on a viewset's @action                # that action only
"""

from __future__ import annotations

from dataclasses import dataclass

ATTRIBUTE = "waits_on"


@dataclass(frozen=True)
class Wait:
    on: str  # what it waits on, in words
    htmx_only: bool = False


def waits_on(what: str, *, htmx_only: bool = False):
    def mark(view):
        setattr(view, ATTRIBUTE, Wait(what, htmx_only))
        return view

    return mark


def waiting(patterns: list, what: str) -> list:
    """Mark every view of a URL list (and of the lists it includes) that does not say otherwise."""
    for pattern in patterns:
        if hasattr(pattern, "url_patterns"):
            waiting(pattern.url_patterns, what)
        elif wait_of(pattern.callback) is None:
            setattr(pattern.callback, ATTRIBUTE, Wait(what))
    return patterns


def wait_of(view) -> Wait | None:
    """What a resolved view waits on: marked on the function, its class (Django's view_class,
    DRF's cls) or, for a viewset's route, the action the route runs."""
    for holder in (view, getattr(view, "view_class", None), getattr(view, "cls", None)):
        if (found := getattr(holder, ATTRIBUTE, None)) is not None:
            return found
    viewset = getattr(view, "cls", None)
    for action in (getattr(view, "actions", None) or {}).values():
        if (found := getattr(getattr(viewset, action, None), ATTRIBUTE, None)) is not None:
            return found
    return None
