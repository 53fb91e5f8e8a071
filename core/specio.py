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


# Aliases may point at the same node many times over: the "billion laughs" is nine levels of ten
# aliases each, a few hundred bytes that expand into 10**9 nodes. What a manifest may expand
# into is bounded, counted on the composed nodes before anything is constructed.
MAX_EXPANDED_NODES = 200_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML loader that refuses duplicate keys (in a services map a repeated name would
    silently replace the first service), bounds what aliases expand into (MAX_EXPANDED_NODES)
    and refuses recursive ones. Anchors, aliases and merge keys (``<<: *base``) are YAML that
    ``kubectl`` accepts, and upstream's recipes use them (ai-dynamo/dynamo@2a6da14c,
    recipes/kustomize/components/*/patch-dgd.yaml)."""

    def compose_node(self, parent, index):
        # Composing recurses once per level: bound it well before Python's recursion limit.
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > untrusted.MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {untrusted.MAX_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node):
        _expanded_size(node, {}, set())
        return _unshared(super().construct_document(node))

    def construct_yaml_int(self, node):
        # int() of a literal of thousands of digits raises ValueError (Python's digit limit) or
        # takes quadratic time: refuse it by its length first.
        literal = self.construct_scalar(node)
        if len(literal) > untrusted.MAX_NUMBER_CHARS:
            raise yaml.constructor.ConstructorError(
                None, None, f"the integer {literal[:12]}… ({len(literal):,} characters) is too large; "
                            "integers fit in 64 bits", node.start_mark)
        return super().construct_yaml_int(node)


def _expanded_size(node, sizes: dict, open_nodes: set) -> int:
    """How many nodes ``node`` stands for once every alias is expanded (each shared node counted
    once per use, computed once). Raises when that passes MAX_EXPANDED_NODES or an alias refers
    to a node that contains it."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise yaml.composer.ComposerError(None, None, "a YAML alias refers to the node that contains it "
                                                      "(a recursive alias)", node.start_mark)
    open_nodes.add(key)
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, sizes, open_nodes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, sizes, open_nodes) + _expanded_size(v, sizes, open_nodes)
                       for k, v in node.value)
    else:
        size = 1
    open_nodes.discard(key)
    if size > MAX_EXPANDED_NODES:
        raise yaml.composer.ComposerError(
            None, None, f"YAML aliases expand this document to more than {MAX_EXPANDED_NODES:,} values; "
                        "a manifest this large is refused", node.start_mark)
    sizes[key] = size
    return size


def _unshared(data: Any) -> Any:
    """A copy in which no two places share an object (an alias constructs one object used at
    every place): editing one place must not change another. Bounded by MAX_EXPANDED_NODES."""
    if isinstance(data, dict):
        return {k: _unshared(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_unshared(v) for v in data]
    return data


def _construct_mapping(loader, node, deep=False):
    """A mapping whose keys are each unique. Merge keys (``<<``) are expanded first; a key the
    mapping writes itself overrides a merged one, as YAML's merge type says, but a key written
    twice is refused. A key that is itself a list or a map (YAML's ``? [a, b]``) becomes an
    untrusted.ComplexKey, so that check() refuses it with its path, as it refuses every key that
    is not text."""
    written = sum(1 for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge")
    loader.flatten_mapping(node)
    merged = len(node.value) - written
    mapping: dict = {}
    own: set = set()
    for position, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (list, dict)):
            key = untrusted.ComplexKey("list" if isinstance(key, list) else "map", key_node.start_mark.line + 1)
        if position >= merged and key in own:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {line}): each name may appear once", key_node.start_mark
            )
        if position >= merged:
            own.add(key)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)


def load_documents(text: str | bytes, *, max_bytes: int) -> list[Any]:
    """Every YAML document of ``text`` (empty ones left out), parsed safely and checked against
    the bounds on untrusted input. Raises ManifestError with the line and column."""
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
    except RecursionError:
        raise ManifestError.single("", "the YAML nests too deeply", "yaml") from None
    if not documents:
        raise ManifestError.single("", "the manifest is empty", "empty")
    for index, document in enumerate(documents):
        try:
            untrusted.check(document)
        except untrusted.UntrustedInputError as exc:
            where = f"document {index + 1}: " if len(documents) > 1 else ""
            raise ManifestError.single(exc.path, where + exc.message, "unstorable") from None
    return documents


def load_yaml(text: str | bytes, *, max_bytes: int) -> Any:
    """One YAML document, parsed safely. Raises ManifestError with the line and column. A file
    that holds a graph beside other objects is read with core.documents.load_bundle."""
    documents = load_documents(text, max_bytes=max_bytes)
    if len(documents) > 1:
        raise ManifestError.single(
            "", f"expected one DynamoGraphDeployment, found {len(documents)} YAML documents", "many")
    return documents[0]


def dump_yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
