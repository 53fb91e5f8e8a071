"""A model directory made on the spot, for the mocker and the frontend, with no download.

``dynamo.mocker`` and ``dynamo.frontend`` need a Hugging Face-style directory: the mocker reads
``config.json`` (to size the KV cache per token) and both load the tokenizer and the chat
template; nothing may come from a model hub on this host. Weights are never needed: the mocker
simulates the engine. A real engine on this host's CPU (``ensure_random_model``) gets the same
tokenizer with a tiny geometry and random weights, in the graph's architecture family.

The mocker emits deterministic token ids in [1000, 32000), so the vocabulary must reach past
32000 or replies decode to empty text. A WordLevel vocabulary of pronounceable made-up words
makes every such id a visible word, so streamed replies look like (nonsense) text."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

VOCAB_SIZE = 32768
# Bump when the generated files change: a directory with another stamp is rebuilt.
FORMAT_VERSION = "1"
STAMP_FILE = ".tinymodel"

# Special tokens first, so their ids stay below 1000 and the mocker never emits them
# (an emitted EOS would end replies early).
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]
UNK, BOS, EOS, PAD = SPECIAL_TOKENS[:4]

# ChatML-like. The 1.6.1 frontend renders it with minijinja: plain Jinja, no Python-only
# filters, and \n escapes (not raw newlines) inside string literals.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "sh"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
_CODAS = ["", "n", "r", "s", "l"]


def model_dir_name(model_name: str) -> str:
    """A file-system-safe, collision-free directory name for a served model name."""
    slug = re.sub(r"[^a-z0-9]+", "-", model_name.lower()).strip("-")[:48] or "model"
    digest = hashlib.sha256(model_name.encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def _words(count: int) -> list[str]:
    """Deterministic made-up words: one-, two-, then three-syllable combinations."""
    syllables = [o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS]
    words: list[str] = []
    seen: set[str] = set(SPECIAL_TOKENS)
    for length in (1, 2, 3):
        for combo in itertools.product(syllables, repeat=length):
            word = "".join(combo)
            if word not in seen:
                seen.add(word)
                words.append(word)
                if len(words) == count:
                    return words
    raise AssertionError("syllable table too small for the vocabulary")


def _tokenizer_json() -> str:
    # Imported here: `tokenizers` (a transformers dependency) is only needed the first time.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for word in _words(VOCAB_SIZE - len(SPECIAL_TOKENS)):
        vocab[word] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordLevel has no spacing information; without a decoder, words of a streamed reply would
    # be glued together. The WordPiece decoder joins tokens with spaces (and leaves no "##").
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    return tokenizer.to_str(pretty=False)


def _files(model_name: str) -> dict[str, str]:
    ids = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    config = {
        "_name_or_path": model_name,
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        # A Llama-3.2-1B-like geometry: the mocker derives KV bytes per token from it
        # (layers * 2 * kv_heads * head_dim * 2 bytes = 32 KiB), so KV transfer times are plausible.
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "vocab_size": VOCAB_SIZE,
        "torch_dtype": "bfloat16",
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": 8192,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    generation_config = {"bos_token_id": ids[BOS], "eos_token_id": ids[EOS], "pad_token_id": ids[PAD]}
    return {
        "config.json": json.dumps(config, indent=2),
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=2),
        "generation_config.json": json.dumps(generation_config, indent=2),
        "tokenizer.json": _tokenizer_json(),
        STAMP_FILE: json.dumps({"format": FORMAT_VERSION, "model_name": model_name}),
    }


def _is_complete(path: Path, model_name: str) -> bool:
    try:
        stamp = json.loads((path / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return False
    return stamp == {"format": FORMAT_VERSION, "model_name": model_name}


def ensure_model_dir(root: Path, model_name: str) -> Path:
    """Return ``root/<slug>``, a complete model directory for ``model_name``, creating it if needed.

    Idempotent and safe against concurrent callers: the files are written to a temporary
    directory beside the target, which is then renamed into place (atomic on one file system).
    The stamp file is written with the rest, so an existing directory is always complete."""
    root = Path(root)
    target = root / model_dir_name(model_name)
    if _is_complete(target, model_name):
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        for name, text in _files(model_name).items():
            (tmp / name).write_text(text, encoding="utf-8")
        if target.exists() and not _is_complete(target, model_name):
            # A stale directory (older format, or a partial copy made by hand): move it aside.
            stale = root / f".{target.name}.stale-{os.getpid()}"
            os.replace(target, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:
            # Another caller renamed its copy first (the target is a non-empty directory now).
            if not _is_complete(target, model_name):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# ------------------------------------------------------------ random weights for a real engine

# Architecture families a real engine loads as a tiny random model, by what the graph's model
# name says (a hub id like Qwen/Qwen3-0.6B); Llama when nothing matches. First match wins.
FAMILIES = (
    (re.compile(r"qwen-?3"), {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}),
    (re.compile(r"qwen"), {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}),
    (re.compile(r"mistral"), {"architectures": ["MistralForCausalLM"], "model_type": "mistral"}),
    (re.compile(r""), {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}),
)
# 9.6 M parameters, 19 MB of bfloat16: a 1B geometry with random weights would be 1.2 B
# parameters, too big and too slow for a CPU. KV per token: 2 layers x K,V x 2 heads x 64 x 2 B.
TINY_GEOMETRY = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 4096}
WEIGHTS_FORMAT = "1"


def family_of(model_name: str) -> dict:
    """The config keys of the architecture family ``model_name`` belongs to."""
    return next(keys for pattern, keys in FAMILIES if pattern.search(model_name.lower()))


def random_model_files(model_name: str) -> dict[str, str]:
    """The tokenizer-only files of ``_files`` with the family and the tiny geometry."""
    files = _files(model_name)
    family = family_of(model_name)
    config = {**json.loads(files["config.json"]), **family, **TINY_GEOMETRY}
    files["config.json"] = json.dumps(config, indent=2)
    files[STAMP_FILE] = json.dumps({"format": FORMAT_VERSION, "weights": WEIGHTS_FORMAT, "model_name": model_name,
                                    "model_type": family["model_type"]})
    return files


def ensure_random_model(root: Path, model_name: str, *, python: str, env: dict[str, str],
                        timeout: float = 300) -> Path:
    """``root/random-<slug>``: a tiny random-weight model of ``model_name``'s family, made once.
    The weights are written by ``python`` (the engine environment's, which has torch and
    transformers) in ``env``; the folder is renamed into place complete, as above."""
    import subprocess

    root = Path(root)
    target = root / f"random-{model_dir_name(model_name)}"
    expected = json.loads(random_model_files(model_name)[STAMP_FILE])
    if _stamp(target) == expected:
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        files = random_model_files(model_name)
        stamp = files.pop(STAMP_FILE)
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        # -P: this file's folder must not shadow the standard library (it holds an operator.py).
        result = subprocess.run([python, "-P", __file__, "weights", str(tmp)], capture_output=True, text=True,
                                timeout=timeout, check=False, env=env)
        if result.returncode:
            raise RuntimeError(f"writing random weights for {model_name} failed: {result.stderr[-2000:]}")
        (tmp / STAMP_FILE).write_text(stamp, encoding="utf-8")
        if target.exists() and _stamp(target) != expected:
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:
            if _stamp(target) != expected:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _stamp(path: Path) -> dict | None:
    try:
        return json.loads((path / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return None


def write_random_weights(folder: Path) -> None:
    """Random weights for the config in ``folder`` (runs in the engine environment)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder)
    AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(folder)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "weights":
        sys.exit("usage: tinymodel.py weights FOLDER")
    write_random_weights(Path(sys.argv[2]))
