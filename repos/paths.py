"""Which files of a repository hold graphs, and which paths a link can hold: names anyone who
can push chooses, checked before anything stores them."""

from __future__ import annotations

import posixpath

from core.untrusted import text_problem

from .models import GraphLink, Repository

MANIFEST_SUFFIXES = (".yaml", ".yml")
MAX_PATH = GraphLink._meta.get_field("path").max_length


def is_manifest(repo: Repository, path: str) -> bool:
    """A file directly in the repository's folder, named *.yaml or *.yml: one graph."""
    return posixpath.dirname(path) == repo.path and path.endswith(MANIFEST_SUFFIXES)


def path_problem(path: str) -> str | None:
    """Why a link cannot hold ``path`` (a name anyone who pushes chooses), or None."""
    if len(path) > MAX_PATH:
        return f"the path is {len(path):,} characters long; a graph's file may have at most {MAX_PATH:,}"
    problem = text_problem(path)
    return f"the path {problem}" if problem else None
