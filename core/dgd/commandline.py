"""Reading and rewriting a worker's command line.

The role of a disaggregated worker lives in its command line (or its environment), and its
spelling depends on the release: dynamo.vllm took ``--is-prefill-worker`` before 1.0.0, accepted
it as a deprecated alias of ``--disaggregation-mode prefill`` from 1.0.0 (ai-dynamo/dynamo#6483)
and refuses it from 1.4.0 (#12089). Manifests write command lines in two forms, and both must
survive a round trip untouched:

* exec form: ``command: [python3, -m, dynamo.vllm]``, ``args: [--model, X, ...]`` (or the
  module in ``args``, as the 1.6.1 frontend templates do);
* shell form: ``command: [/bin/sh, -c]`` (or ``[/bin/bash, -lc]``), ``args: ["python3 -m dynamo.vllm ..."]``
  (core/dgd/shell.py reads it).

Rewrites touch only the role flag and leave every other token where it was."""

from __future__ import annotations

import re
import shlex

from core.dgd.router import (  # noqa: F401  (re-exported: the router flags were read here first)
    ROUTER_FLAGS,
    build_frontend_command,
    router_flag_problem,
    router_flags,
    router_mode,
    with_router_mode,
)
from core.dgd.shell import argv, expand, find_script, flag_value, literal_env, put_script
from core.facts import (
    ENGINES,
    KV_TRANSFER_CONFIG_REQUIRED_SINCE,
    LEGACY_ROLE_ENV,
    ROLE_ENV,
    DynamoVersion,
    uses_disaggregation_mode,
)

_MODULE_ENGINES = {v["module"]: k for k, v in ENGINES.items()} | {
    "dynamo.frontend": "frontend",
    "dynamo.planner": "planner",
}
_MODEL_FLAGS = ("--served-model-name", "--model-name", "--model", "--model-path")
# The connector dynamo.vllm's own refusal suggests (components/src/dynamo/vllm/args.py:243-244@2a6da14c).
NIXL_KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
# A role the command line sets but this reading cannot resolve (a shell variable without a
# literal value, or a config file that may set it).
UNKNOWN_ROLE = "?"


def tokens(command: list[str] | None, args: list[str] | None) -> list[str]:
    """The argv the container runs, as one list (shell scripts split like a shell would)."""
    return argv(command, args)


def engine_of(command: list[str] | None, args: list[str] | None) -> str | None:
    """vllm, sglang, trtllm, mocker, frontend or planner, from ``-m dynamo.X``."""
    words = tokens(command, args)
    for i, token in enumerate(words[:-1]):
        if token == "-m" and words[i + 1] in _MODULE_ENGINES:
            return _MODULE_ENGINES[words[i + 1]]
    return None


def _last_flag_value(words: list[str], flag: str) -> str | None:
    """The value argparse keeps for a flag given more than once: the last."""
    value = None
    for i, token in enumerate(words):
        if token == flag and i + 1 < len(words):
            value = words[i + 1]
        elif token.startswith(flag + "="):
            value = token.split("=", 1)[1]
    return value


def served_model(command: list[str] | None, args: list[str] | None) -> str | None:
    words = tokens(command, args)
    for flag in _MODEL_FLAGS:
        value = flag_value(words, flag)
        if value:
            return value
    return None


def declared_role(command: list[str] | None, args: list[str] | None, env: list[dict] | None = None,
                  engine: str | None = None) -> str | None:
    """prefill / decode / agg (or another mode) as the worker's command line declares it, then
    as its environment does (the flag wins: argparse reads the variable as the flag's default,
    components/src/dynamo/vllm/backend_args.py:80-89@2a6da14c). Flags anywhere in a shell script
    count, bash arrays included. UNKNOWN_ROLE when a variable or a config file may set it; None
    when nothing declares a role."""
    words = tokens(command, args)
    values = literal_env(env)
    mode = _last_flag_value(words, "--disaggregation-mode")
    if mode is not None:
        resolved = expand(mode, values)
        return resolved if resolved else UNKNOWN_ROLE
    if "--is-prefill-worker" in words:
        return "prefill"
    if "--is-decode-worker" in words:
        return "decode"
    names = [ROLE_ENV[engine]] if engine in ROLE_ENV else list(ROLE_ENV.values())
    for name in names:
        if name in values:
            return values[name]
    for name, role in LEGACY_ROLE_ENV.items():
        if values.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return role
    if any(t == "--config" or t.startswith("--config=") for t in words):
        return UNKNOWN_ROLE  # dynamo.sglang --config FILE may set disaggregation-mode
    return None


def has_kv_transfer_config(command: list[str] | None, args: list[str] | None) -> bool | None:
    """Whether the command line passes vLLM a --kv-transfer-config (vLLM's parser takes the
    underscore spelling too); None when a --config file may carry it."""
    words = tokens(command, args)
    for token in words:
        name = token.split("=", 1)[0]
        if name in ("--kv-transfer-config", "--kv_transfer_config"):
            return True
    if any(t.split("=", 1)[0] == "--config" for t in words):
        return None
    return False


def _rewrite(argv: list[str], role: str, new_style: bool) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if new_style and token in ("--is-prefill-worker", "--is-decode-worker"):
            out += ["--disaggregation-mode", "prefill" if token == "--is-prefill-worker" else "decode"]
        elif not new_style and (token == "--disaggregation-mode" or token.startswith("--disaggregation-mode=")):
            value = token.split("=", 1)[1] if "=" in token else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 0 if "=" in token else 1
            if value == "prefill":
                out.append("--is-prefill-worker")
            # decode is what an old worker does without a flag: drop it.
        else:
            out.append(token)
        i += 1
    return out


_OLD_FLAG = re.compile(r"(?<![\w-])--is-(prefill|decode)-worker(?![\w-])")
_NEW_FLAG = re.compile(r"(?<![\w-])--disaggregation-mode(?:=|[ \t]+)(prefill|decode|agg)(?![\w-])")
# The end of the dynamo.* command inside a shell script: the next operator or the end.
_COMMAND_END = re.compile(r"-m[ \t]+dynamo\.(?:vllm|mocker)\b[^;&|\n]*")


def _append_to_command(script: str, text: str) -> str:
    """``text`` added at the end of the dynamo.vllm/mocker command inside a script."""
    match = _COMMAND_END.search(script)
    if not match:
        return script
    stripped = script[:match.end()].rstrip()
    return f"{stripped} {text}{script[len(stripped):]}"


def _rewrite_script(script: str, new_style: bool, add: list[str]) -> str:
    """Rewrite the role flag inside a shell script as text: quoting, variables and shell
    operators stay exactly as the user wrote them. ``add`` holds shell-quoted words to append."""
    if new_style:
        out = _OLD_FLAG.sub(lambda m: f"--disaggregation-mode {m.group(1)}", script)
        return _append_to_command(out, " ".join(add)) if add else out

    def old(match: re.Match) -> str:
        return "--is-prefill-worker" if match.group(1) == "prefill" else ""

    out = _NEW_FLAG.sub(old, script)
    return re.sub(r"[ \t]{2,}", " ", out).rstrip() if out != script else out


def translate_role_flag(
    command: list[str] | None,
    args: list[str] | None,
    *,
    role: str,
    engine: str,
    version: DynamoVersion,
    source_version: DynamoVersion | None = None,
) -> tuple[list[str] | None, list[str] | None]:
    """The command line spelled for ``version``. Unchanged (same tokens, same form) when it
    already is. What a release change adds: the decode flag for a decode worker moved from a
    release where no flag meant decode to one where it means aggregated, and, for a vLLM prefill
    worker moved onto 1.0.0 or later, the NIXL connector that earlier releases used by default
    and later ones require explicitly (components/src/dynamo/vllm/args.py:230-246@2a6da14c).
    Anything else missing the validator reports."""
    command = list(command) if command is not None else None
    args = list(args) if args is not None else None
    if role not in ("prefill", "decode") or version == source_version:
        # Same release: the command line is the user's, even where it spells a flag the
        # release no longer knows (the validator says so); only a change of release rewrites.
        return command, args
    actual_engine = engine_of(command, args) or engine
    if actual_engine not in ("vllm", "mocker"):
        return command, args
    new_style = uses_disaggregation_mode(version, actual_engine)
    add_decode = (
        new_style
        and role == "decode"
        and source_version is not None
        and not uses_disaggregation_mode(source_version, actual_engine)
        and declared_role(command, args) is None
    )
    add_connector = (
        actual_engine == "vllm"
        and role == "prefill"
        and source_version is not None
        and source_version < KV_TRANSFER_CONFIG_REQUIRED_SINCE <= version
        and has_kv_transfer_config(command, args) is False
    )
    add = [*(["--disaggregation-mode", "decode"] if add_decode else []),
           *(["--kv-transfer-config", NIXL_KV_TRANSFER_CONFIG] if add_connector else [])]
    script = find_script(command, args)
    if script is not None:
        quoted = " ".join(shlex.quote(word) for word in add)
        rewritten = _rewrite_script(script.text, new_style, [quoted] if add else [])
        if rewritten == script.text:
            return command, args
        return put_script(command, args, script, rewritten)
    if args is not None:
        args = _rewrite(args, role, new_style)
    if command is not None:
        command = _rewrite(command, role, new_style)
    if add:
        args = [*(args or []), *add]
    return command, args


def role_flag(role: str, engine: str, version: DynamoVersion) -> list[str]:
    """The flag a fresh worker of ``role`` gets on ``version``."""
    if role not in ("prefill", "decode"):
        return []
    if uses_disaggregation_mode(version, engine):
        return ["--disaggregation-mode", role]
    return ["--is-prefill-worker"] if role == "prefill" else []


def build_worker_command(
    *, engine: str, version: DynamoVersion, role: str, model: str, engine_args: list[str]
) -> tuple[list[str], list[str]]:
    """(command, args) for a worker built from a form, in the 1.6.1 templates' exec form."""
    module = ENGINES[engine]["module"]
    extra: list[str] = []
    if engine == "vllm":
        model_args = ["--model", model]
        needs_connector = role == "prefill" and version >= KV_TRANSFER_CONFIG_REQUIRED_SINCE
        if needs_connector and "--kv-transfer-config" not in engine_args:
            # From 1.0.0 dynamo.vllm refuses a prefill worker without an explicit KV connector
            # (components/src/dynamo/vllm/args.py:230-246@2a6da14c; the 1.6.1 template passes this one).
            extra = ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}']
    elif engine == "mocker":
        model_args = ["--model-path", model, "--model-name", model]
    else:
        model_args = ["--model-path", model, "--served-model-name", model]
    return ["python3", "-m", module], [*model_args, *engine_args, *role_flag(role, engine, version), *extra]
