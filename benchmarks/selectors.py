"""Reads shared by the pages and the API."""

from __future__ import annotations

from core.untrusted import QueryParameterError, parse_int_text

from .models import BenchmarkRun
from .profiles import ProfileError

MAX_COMPARED = 12


class RunsNotFound(ProfileError):
    """Well-formed run ids naming runs that do not exist (the API answers 404)."""

    status = 404


def runs_by_ids(text: str | list) -> list[BenchmarkRun]:
    """The runs named by ``1,2,3`` (or a list of ids), in that order. Raises ProfileError
    (field ``runs``) for an empty, malformed or unknown selection."""
    parts = text if isinstance(text, list) else str(text).replace(" ", "").split(",")
    parts = [str(p).strip() for p in parts if str(p).strip()]
    if len(parts) > 100:
        raise ProfileError({"runs": [f"compare at most {MAX_COMPARED} runs at once"]})
    try:
        ids = list(dict.fromkeys(parse_int_text(p, "runs") for p in parts))
    except QueryParameterError:
        raise ProfileError({"runs": ["give run ids separated by commas, like 3,4,7"]}) from None
    if not ids:
        raise ProfileError({"runs": ["pick at least one run"]})
    if len(ids) > MAX_COMPARED:
        raise ProfileError({"runs": [f"compare at most {MAX_COMPARED} runs at once"]})
    found = {r.pk: r for r in BenchmarkRun.objects.filter(pk__in=ids).select_related("graph", "requested_by")}
    missing = [i for i in ids if i not in found]
    if missing:
        raise RunsNotFound({"runs": [f"no run {', '.join(map(str, missing))}"]})
    return [found[i] for i in ids]
