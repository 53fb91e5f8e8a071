"""What a cluster refuses in a pool's typed values beyond core.pool's own rules (the image
reference is core.pool's): an engine flag that takes a number given something else (the engine
exits at start with argparse's "invalid int value"). The create form and the API's pool run these
beside PoolField.check, at the field."""

from __future__ import annotations

import re

from core.pool import split_engine_args

# Engine flags whose value is a number, as vLLM, SGLang, TensorRT-LLM and the mocker parse them.
# vLLM reads --max-model-len as a human-readable integer ("32k", "1.5K"; -1 or "auto": fit memory).
_HUMAN_INT = re.compile(r"^(?:-1|auto|\d+(?:\.\d+)?[kKmMgG]?)$")
_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
NUMERIC_FLAGS = {
    "--max-model-len": (_HUMAN_INT, "a number of tokens (e.g. 8192 or 32k)"),
    "--tensor-parallel-size": (_INT, "a whole number"), "-tp": (_INT, "a whole number"),
    "--pipeline-parallel-size": (_INT, "a whole number"), "-pp": (_INT, "a whole number"),
    "--data-parallel-size": (_INT, "a whole number"), "-dp": (_INT, "a whole number"),
    "--max-num-seqs": (_INT, "a whole number"), "--max-num-batched-tokens": (_INT, "a whole number"),
    "--block-size": (_INT, "a whole number"), "--num-gpu-blocks-override": (_INT, "a whole number"),
    "--gpu-memory-utilization": (_FLOAT, "a number between 0 and 1"),
    "--context-length": (_INT, "a whole number"), "--tp-size": (_INT, "a whole number"),
    "--dp-size": (_INT, "a whole number"), "--mem-fraction-static": (_FLOAT, "a number between 0 and 1"),
    "--speedup-ratio": (_FLOAT, "a number"), "--num-gpu-blocks": (_INT, "a whole number"),
    "--max-batch-size": (_INT, "a whole number"), "--max-num-tokens": (_INT, "a whole number"),
}


def check_engine_args(text: str) -> str:
    """Raises ValueError for a numeric flag given a value the engine cannot read as one."""
    words = split_engine_args(text)
    for i, word in enumerate(words):
        flag, eq, inline = word.partition("=")
        if flag not in NUMERIC_FLAGS:
            continue
        pattern, what = NUMERIC_FLAGS[flag]
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else None)
        if value is None or (not eq and value.startswith("--")):
            raise ValueError(f"{flag} needs a value: {what}")
        if not pattern.match(value):
            raise ValueError(f"{flag} takes {what}, not {value!r}: the engine would refuse to start")
    return text


# Per pool field name: the extra rule, run after the field's own check.
RULES = {"engine_args": check_engine_args}
