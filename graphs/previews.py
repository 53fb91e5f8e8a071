"""A graph's manifest as the pages show it: rendered YAML for an API version, with its findings."""

from __future__ import annotations

from collections import OrderedDict

from core.dgd.render import render as render_manifest
from core.specio import dump_yaml
from core.validation import Report, validate_spec

from .models import Revision


def manifest_preview(spec, api_version: str) -> tuple[str, Report]:
    manifest = render_manifest(spec, api_version)
    return dump_yaml(manifest), validate_spec(spec, api_version=api_version)


# Rendering and validating a revision is a pure function of it, and revisions never change:
# the graph page keeps the last few per process instead of redoing ~10 ms of work per view.
_REVISION_PREVIEWS: OrderedDict[tuple, tuple[str, Report]] = OrderedDict()
_REVISION_PREVIEWS_MAX = 256


def revision_preview(revision: Revision, api_version: str) -> tuple[str, Report]:
    key = (revision.pk, revision.created_at, api_version)  # the time too: a recreated database reuses ids
    found = _REVISION_PREVIEWS.get(key)
    if found is None:
        found = _REVISION_PREVIEWS[key] = manifest_preview(revision.graph_spec, api_version)
        while len(_REVISION_PREVIEWS) > _REVISION_PREVIEWS_MAX:
            _REVISION_PREVIEWS.popitem(last=False)
    return found
