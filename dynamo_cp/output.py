"""What a command prints: the API's own objects as JSON or YAML (``-o json|yaml``, for
scripts), or a table for people (``-o table``, the default). Messages go to stderr, data to
stdout, so ``-o json`` output can always be piped."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import yaml

FORMATS = ("table", "json", "yaml")


def emit(data: Any, fmt: str, table: Callable[[Any], str] | None = None) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    elif fmt == "yaml":
        sys.stdout.write(yaml.safe_dump(data, default_flow_style=False, sort_keys=False))
    elif table is not None:
        text = table(data)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines) + "\n"


def say(message: str) -> None:
    """A message for people, on stderr."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
