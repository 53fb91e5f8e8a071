"""The fields of a worker pool that a person sets when creating a graph from a template.

Each field is declared once, here: its label, default, bounds and the rule its value must
follow. The create form (graphs/forms.py) and the API's pool (graphs/api/serializers.py) are
generated from POOL_FIELDS; they only turn text into a number or a string, and show the message
of ``PoolField.check`` at the field. The spec's Service runs the same rules (core/spec.py) on
values that arrive through a manifest."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.spec import (
    DNS1123_SUBDOMAIN,
    MAX_GPUS_PER_REPLICA,
    MAX_REPLICAS,
    QUANTITY_NOT_NEGATIVE,
    check_secret_name,
    check_shared_memory,
)

# Shell words (what shlex.split accepts): every quote closed, no trailing backslash.
SHELL_WORDS = r"""^(?:[^'"\\]|\\[\s\S]|'[^']*'|"(?:[^"\\]|\\[\s\S])*")*$"""


def split_engine_args(text: str) -> list[str]:
    """Engine arguments as typed, split like a shell would. Raises ValueError."""
    try:
        return shlex.split(text or "")
    except ValueError as exc:
        raise ValueError(f"engine arguments cannot be parsed: {exc}") from None


@dataclass(frozen=True)
class PoolField:
    """One field of a pool. A text field may be left blank (the spec's default applies)."""

    name: str
    label: str
    default: int | str
    minimum: int | None = None
    maximum: int | None = None
    max_length: int | None = None
    # The rule of a text value, raising ValueError; ``pattern`` says the same to API clients as
    # a regular expression, and ``rule`` alone decides.
    rule: Callable[[str], Any] | None = None
    pattern: str | None = None
    help_text: str = ""

    @property
    def is_integer(self) -> bool:
        return isinstance(self.default, int)

    def check(self, value: int | str) -> None:
        """Raises ValueError with the message the form and the API show at this field. Wording
        of the bounds as Django's and DRF's validators word them."""
        if self.is_integer:
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError("Enter a whole number.")
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"Ensure this value is greater than or equal to {self.minimum}.")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"Ensure this value is less than or equal to {self.maximum}.")
            return
        if not isinstance(value, str):
            raise ValueError("Enter a text value.")
        if value == "":
            return
        if self.max_length is not None and len(value) > self.max_length:
            raise ValueError(f"Ensure this value has at most {self.max_length} characters (it has {len(value)}).")
        if self.rule is not None:
            self.rule(value)

    def json_schema(self) -> dict[str, Any]:
        """What the API schema says about the field (its default and blank are the adapter's)."""
        if self.is_integer:
            bounds = {"minimum": self.minimum, "maximum": self.maximum}
            return {"type": "integer", **{k: v for k, v in bounds.items() if v is not None}}
        schema: dict[str, Any] = {"type": "string"}
        if self.max_length is not None:
            schema["maxLength"] = self.max_length
        if self.pattern is not None:
            # Blank is allowed too (the spec's default applies: check() takes ""). Beside the
            # length, not with it: schemathesis' negative mutations fold a length into a pattern
            # on the same node, which its regex engine then cannot take for this one.
            schema["allOf"] = [{"pattern": f"^$|{self.pattern}"}]
        return schema


# The reference grammar of distribution/reference (regexp.go), which the kubelet parses an image
# with (InvalidImageName otherwise): [domain[:port]/]path[:tag][@digest], path components lower-case.
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[a-fA-F0-9:]+\])"
# A tag is [\w][\w.-]{0,127} there, in Go's RE2, whose \w is ASCII (Python's would take any letter).
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}(?::[0-9]+)?/)?{_PATH}(?:/{_PATH})*(?::{_TAG})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")


def check_image(value: str) -> str:
    """Raises ValueError unless ``value`` is blank (the release's default) or an image reference."""
    if value and not IMAGE_REFERENCE.fullmatch(value):  # fullmatch: $ alone lets a final newline through
        raise ValueError(f"{value!r} is not a valid image reference: [registry/]repository[:tag][@digest], "
                         "the repository in lower-case letters, digits and separators "
                         "(e.g. nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1)")
    return value


POOL_FIELDS: tuple[PoolField, ...] = (
    PoolField("replicas", "Replicas", 1, minimum=0, maximum=MAX_REPLICAS),
    PoolField("gpus", "GPUs per replica", 1, minimum=0, maximum=MAX_GPUS_PER_REPLICA),
    PoolField("shared_memory", "Shared memory (/dev/shm)", "16Gi", max_length=20, rule=check_shared_memory,
              pattern=QUANTITY_NOT_NEGATIVE),
    PoolField("image", "Image", "", max_length=300, help_text="Default: NVIDIA's runtime image of the release",
              rule=check_image, pattern=IMAGE_REFERENCE.pattern),
    PoolField("engine_args", "Engine arguments", "", max_length=2000, rule=split_engine_args, pattern=SHELL_WORDS),
    PoolField("hf_token_secret", "HF token Secret", "hf-token-secret", max_length=253, rule=check_secret_name,
              pattern=DNS1123_SUBDOMAIN.pattern),
)
FIELD = {f.name: f for f in POOL_FIELDS}


@dataclass(frozen=True)
class PoolFields:
    """A pool's values, each checked by its PoolField when the object is made."""

    replicas: int = int(FIELD["replicas"].default)
    gpus: int = int(FIELD["gpus"].default)
    shared_memory: str = str(FIELD["shared_memory"].default)
    image: str = str(FIELD["image"].default)
    engine_args: str = str(FIELD["engine_args"].default)  # as typed; split like a shell would
    hf_token_secret: str = str(FIELD["hf_token_secret"].default)

    def __post_init__(self) -> None:
        for field in POOL_FIELDS:
            try:
                field.check(getattr(self, field.name))
            except ValueError as exc:
                raise ValueError(f"{field.name}: {exc}") from None
