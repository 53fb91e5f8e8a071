"""Turning untrusted data into a GraphSpec, with errors that name their path."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from core import untrusted
from core.errors import ManifestError
from core.findings import Finding, Severity
from core.spec import GraphSpec


def spec_from_data(data: Any) -> GraphSpec:
    try:
        untrusted.check(data)
    except untrusted.UntrustedInputError as exc:
        raise ManifestError.single(exc.path, exc.message, "unstorable") from None
    try:
        return GraphSpec.model_validate(data)
    except ValidationError as exc:
        raise ManifestError([_finding(data, err) for err in exc.errors()]) from None


def _finding(data: Any, err: dict) -> Finding:
    loc = list(err.get("loc", ()))
    path = _spec_path(data, loc)
    message = err.get("msg", "invalid value")
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return Finding(Severity.ERROR, "invalid_" + str(err.get("type", "value")), path, message)


def _spec_path(data: Any, loc: list) -> str:
    """A readable path: services[1] becomes services.VllmPrefillWorker when the name is known."""
    parts: list[str] = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(part, int) and parts and parts[-1] == "services" and isinstance(node, list):
            try:
                name = node[part].get("name")
            except (IndexError, AttributeError):
                name = None
            parts[-1] = f"services[{name or part}]"
        elif isinstance(part, int):
            parts[-1 if parts else 0:] = [f"{parts[-1]}[{part}]"] if parts else [f"[{part}]"]
        else:
            parts.append(str(part))
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
        if i > 32:
            break
    return ".".join(parts)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML loader that refuses duplicate keys (in a services map a repeated name would
    silently replace the first service) and aliases (a few nested ones expand a few hundred
    bytes into gigabytes, the "billion laughs"; manifests never need them)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"YAML aliases (*{event.anchor}) are not accepted in manifests", event.start_mark)
        # Composing recurses once per level: bound it well before Python's recursion limit.
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > untrusted.MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {untrusted.MAX_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node):
        # int() of a literal of thousands of digits raises ValueError (Python's digit limit) or
        # takes quadratic time: refuse it by its length first.
        literal = self.construct_scalar(node)
        if len(literal) > untrusted.MAX_NUMBER_CHARS:
            raise yaml.constructor.ConstructorError(
                None, None, f"the integer {literal[:12]}… ({len(literal):,} characters) is too large; "
                            "integers fit in 64 bits", node.start_mark)
        return super().construct_yaml_int(node)


def _construct_mapping(loader, node, deep=False):
    """A mapping whose keys are each unique. A key that is itself a list or a map (YAML's
    ``? [a, b]``) becomes an untrusted.ComplexKey, so that check() refuses it with its path, as
    it refuses every key that is not text."""
    mapping = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (list, dict)):
            key = untrusted.ComplexKey("list" if isinstance(key, list) else "map", key_node.start_mark.line + 1)
        if key in mapping:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {line}): each name may appear once", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)


def load_yaml(text: str | bytes, *, max_bytes: int) -> Any:
    """One YAML document, parsed safely. Raises ManifestError with the line and column."""
    if isinstance(text, bytes):
        if len(text) > max_bytes:
            raise ManifestError.single("", f"the manifest is {len(text):,} bytes; the limit is {max_bytes:,}",
                                       "too_large")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ManifestError.single("", "the manifest is not UTF-8 text", "encoding") from None
    if len(text.encode("utf-8")) > max_bytes:
        raise ManifestError.single("", f"the manifest is larger than the {max_bytes:,}-byte limit", "too_large")
    if not text.strip():
        raise ManifestError.single("", "the manifest is empty", "empty")
    try:
        documents = [d for d in yaml.load_all(text, Loader=_UniqueKeyLoader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError.single("", f"malformed YAML at {where}: {problem}", "yaml") from None
    if not documents:
        raise ManifestError.single("", "the manifest is empty", "empty")
    if len(documents) > 1:
        raise ManifestError.single(
            "", f"expected one DynamoGraphDeployment, found {len(documents)} YAML documents", "many")
    try:
        untrusted.check(documents[0])
    except untrusted.UntrustedInputError as exc:
        raise ManifestError.single(exc.path, exc.message, "unstorable") from None
    return documents[0]


def dump_yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
