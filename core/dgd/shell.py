"""A container's command line as the shell would see it.

Manifests start workers in exec form (``command: [python3, -m, dynamo.vllm]``, ``args: [...]``)
or through a shell: ``command: [/bin/sh, -c]`` or ``[/bin/bash, -lc]`` with the script in
``args[0]``, or the script right after the flag in ``command``. Upstream's recipes put whole
scripts there: ``set -euo pipefail``, line continuations, bash arrays
(``args=(...); args+=(--disaggregation-mode prefill); exec python3 -m dynamo.sglang "${args[@]}"``,
as AIConfigurator writes them) and ``"${MODEL_PATH}"`` expansions.

Tokenising is shlex's (POSIX mode, shell punctuation split off); nothing here runs or
evaluates the script. A token keeps its ``$VAR`` text; :func:`expand` resolves it from the
container's literal environment where it can."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_SHELL_NAMES = {"sh", "bash", "dash", "ash", "zsh"}
# -c, or short options ending in c run together (-lc, -ec, -euc, -xc): the next word is the script.
_DASH_C = re.compile(r"^-[a-z]*c[a-z]*$")
_VAR = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")


@dataclass(frozen=True)
class Script:
    """A shell script a container runs: its text and where it sits (``part`` "command" or
    "args", ``index`` within it)."""

    text: str
    part: str
    index: int


def _is_shell(word: str) -> bool:
    return str(word).rsplit("/", 1)[-1] in _SHELL_NAMES


def find_script(command: list[str] | None, args: list[str] | None) -> Script | None:
    """The script of ``sh -c SCRIPT`` (any shell, -c in any short-option cluster), or None
    when the container runs a program directly."""
    words = [("command", i, str(w)) for i, w in enumerate(command or [])] + \
            [("args", i, str(w)) for i, w in enumerate(args or [])]
    start = 0
    if words and words[0][2].rsplit("/", 1)[-1] == "env":
        start = 1  # /usr/bin/env bash -c ...
    if len(words) <= start or not _is_shell(words[start][2]):
        return None
    for part, index, word in words[start + 1:]:
        if _DASH_C.match(word):
            following = words[words.index((part, index, word)) + 1:]
            return Script(following[0][2], following[0][0], following[0][1]) if following else None
        if not word.startswith("-"):
            return None  # sh script.sh: a file we cannot read
    return None


def split_script(text: str) -> list[str]:
    """The words of a shell script, shell operators (``;``, ``&&``, ``|``, ``(``) as words of
    their own. Line continuations join lines as the shell does. A script shlex cannot close
    (an unbalanced quote inside a heredoc) falls back to whitespace splitting."""
    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    lexer = shlex.shlex(joined, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # '#' inside JSON or URLs is not a comment to us
    try:
        return list(lexer)
    except ValueError:
        return joined.split()


def argv(command: list[str] | None, args: list[str] | None) -> list[str]:
    """The words the container runs, as one list (a shell script split like a shell would)."""
    script = find_script(command, args)
    if script is not None:
        return split_script(script.text)
    return [str(t) for t in (command or [])] + [str(t) for t in (args or [])]


def put_script(command: list[str] | None, args: list[str] | None, script: Script,
               text: str) -> tuple[list[str] | None, list[str] | None]:
    """``command`` and ``args`` with the script replaced by ``text``."""
    command = list(command) if command is not None else None
    args = list(args) if args is not None else None
    target = command if script.part == "command" else args
    target[script.index] = text
    return command, args


def literal_env(env: list[dict] | None) -> dict[str, str]:
    """The variables an env list sets to a literal value (valueFrom ones are unknown here)."""
    out: dict[str, str] = {}
    for entry in env or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("value"), str):
            out[entry["name"]] = entry["value"]
    return out


def expand(word: str, env: dict[str, str]) -> str | None:
    """``word`` with a whole-word ``$VAR`` or ``${VAR}`` replaced from ``env``; None when it
    names a variable ``env`` does not set, or expands anything more complex."""
    if "$" not in word:
        return word
    match = _VAR.match(word)
    if match:
        return env.get(match.group(1) or match.group(2))
    return None


def flag_value(argv: list[str], flag: str) -> str | None:
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    return None
