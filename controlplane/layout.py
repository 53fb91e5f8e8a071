"""What every page's layout shows around its content, as a context processor.

The top bar's links are the same on every page a role sees, and reversing their thirteen URLs
through Django's template engine was a tenth of a small page's time: they are rendered once
per role and process (graphs.fragments)."""

from __future__ import annotations

from django.template.loader import render_to_string
from django.utils.safestring import SafeString

from accounts.roles import Role, user_role
from graphs import fragments


def topbar(request) -> dict:
    def html() -> SafeString:  # called by the template only where a page shows the bar
        role = user_role(getattr(request, "user", None))
        return fragments.render("topbar", role, lambda: render_to_string(
            "base.html#topbar", {"can_operate": role >= Role.OPERATOR, "is_admin": role >= Role.ADMIN}))

    return {"topbar": html}
