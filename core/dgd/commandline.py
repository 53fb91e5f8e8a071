"""Reading and rewriting a worker's command line.

The role of a disaggregated worker lives in its command line, and its spelling depends on
the release: ``--is-prefill-worker`` (dynamo.vllm up to 1.3, the 0.5.1 image of v1alpha1 manifests)
became ``--disaggregation-mode prefill|decode`` (ai-dynamo/dynamo#12089). Manifests write
command lines in two forms, and both must survive a round trip untouched:

* exec form: ``command: [python3, -m, dynamo.vllm]``, ``args: [--model, X, ...]`` (or the
  module in ``args``, as the 1.6.1 frontend templates do);
* shell form: ``command: [/bin/sh, -c]``, ``args: ["python3 -m dynamo.vllm --model X ..."]``.

Rewrites touch only the role flag and leave every other token where it was."""

from __future__ import annotations

import re
import shlex

from core.facts import (
    ENGINES,
    ROUTER_MODE_ENV,
    ROUTER_MODES,
    DynamoVersion,
    uses_disaggregation_mode,
)

_SHELLS = {"sh", "/bin/sh", "bash", "/bin/bash", "/usr/bin/bash", "/usr/bin/env bash"}
_MODULE_ENGINES = {v["module"]: k for k, v in ENGINES.items()} | {
    "dynamo.frontend": "frontend",
    "dynamo.planner": "planner",
}
_MODEL_FLAGS = ("--served-model-name", "--model-name", "--model", "--model-path")


def _shell_script(command: list[str] | None, args: list[str] | None) -> tuple[str, int] | None:
    """(script, where) when the container runs ``sh -c SCRIPT``: where 0 = args[0],
    1 = the token after -c in command."""
    command = command or []
    if len(command) >= 2 and command[0] in _SHELLS and command[1] == "-c":
        if len(command) >= 3:
            return command[2], 1
        if args:
            return args[0], 0
    return None


def tokens(command: list[str] | None, args: list[str] | None) -> list[str]:
    """The argv the container runs, as one list (shell scripts split like a shell would)."""
    script = _shell_script(command, args)
    if script is not None:
        try:
            return shlex.split(script[0])
        except ValueError:
            return script[0].split()
    return [str(t) for t in (command or [])] + [str(t) for t in (args or [])]


def engine_of(command: list[str] | None, args: list[str] | None) -> str | None:
    """vllm, sglang, trtllm, mocker, frontend or planner, from ``-m dynamo.X``."""
    argv = tokens(command, args)
    for i, token in enumerate(argv[:-1]):
        if token == "-m" and argv[i + 1] in _MODULE_ENGINES:
            return _MODULE_ENGINES[argv[i + 1]]
    return None


def flag_value(argv: list[str], flag: str) -> str | None:
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    return None


def served_model(command: list[str] | None, args: list[str] | None) -> str | None:
    argv = tokens(command, args)
    for flag in _MODEL_FLAGS:
        value = flag_value(argv, flag)
        if value:
            return value
    return None


def declared_role(command: list[str] | None, args: list[str] | None) -> str | None:
    """prefill / decode / agg as the command line declares it, or None when it says nothing."""
    argv = tokens(command, args)
    if "--is-prefill-worker" in argv:
        return "prefill"
    if "--is-decode-worker" in argv:
        return "decode"
    return flag_value(argv, "--disaggregation-mode")


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


def _rewrite_script(script: str, new_style: bool, add_decode: bool) -> str:
    """Rewrite the role flag inside a shell script as text: quoting, variables and shell
    operators stay exactly as the user wrote them."""
    if new_style:
        out = _OLD_FLAG.sub(lambda m: f"--disaggregation-mode {m.group(1)}", script)
        if add_decode:
            match = _COMMAND_END.search(out)
            if match:
                end = match.end()
                stripped = out[:end].rstrip()
                out = f"{stripped} --disaggregation-mode decode{out[len(stripped):]}"
        return out

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
    already is. A missing flag is added only for a decode worker moved from a release where
    no flag meant decode to one where it means aggregated; otherwise the validator reports it."""
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
    script = _shell_script(command, args)
    if script is not None:
        rewritten = _rewrite_script(script[0], new_style, add_decode)
        if rewritten == script[0]:
            return command, args
        if script[1] == 0:
            args[0] = rewritten
        else:
            command[2] = rewritten
        return command, args
    if args is not None:
        args = _rewrite(args, role, new_style)
    if command is not None:
        command = _rewrite(command, role, new_style)
    if add_decode:
        args = [*(args or []), "--disaggregation-mode", "decode"]
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
        needs_connector = role == "prefill" and uses_disaggregation_mode(version, engine)
        if needs_connector and "--kv-transfer-config" not in engine_args:
            # dynamo.vllm 1.6.1 refuses a prefill worker without an explicit KV connector (its
            # own template passes this one).
            extra = ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}']
    elif engine == "mocker":
        model_args = ["--model-path", model, "--model-name", model]
    else:
        model_args = ["--model-path", model, "--served-model-name", model]
    return ["python3", "-m", module], [*model_args, *engine_args, *role_flag(role, engine, version), *extra]


def build_frontend_command(router_mode: str | None = None) -> tuple[list[str], list[str]]:
    """The 1.6.1 templates' frontend command line, with ``--router-mode`` when one is chosen."""
    if router_mode is not None and router_mode not in ROUTER_MODES:
        raise ValueError(f"router mode {router_mode!r} is not one of {', '.join(ROUTER_MODES)}")
    return ["python3"], ["-m", "dynamo.frontend", *(["--router-mode", router_mode] if router_mode else [])]


# ---------------------------------------------------------------------------------- router

# The other router flags below are dynamo.frontend 1.6.1's, read from the wheel's RouterArgGroup
# and KvRouterArgGroup (tests/test_router_mode.py holds them to the installed wheel).
# flag -> (value type, choices, KV-router only). "bool" flags take no value and have --no-X twins.
ROUTER_FLAGS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "--router-mode": ("str", ROUTER_MODES, False),
    "--router-min-initial-workers": ("int", (), False),
    "--router-session-affinity-ttl-secs": ("int", (), False),
    "--router-session-affinity-mode": ("str", ("hard", "soft"), False),
    "--active-decode-blocks-threshold": ("float", (), False),
    "--active-prefill-tokens-threshold": ("int", (), False),
    "--active-prefill-tokens-threshold-frac": ("float", (), False),
    "--enforce-disagg": ("bool", (), False),
    "--load-aware": ("bool", (), True),
    "--router-kv-overlap-score-credit": ("float", (), True),
    "--router-kv-overlap-score-credit-decay": ("float", (), True),
    "--router-kv-overlap-score-weight": ("float", (), True),
    "--kv-overlap-score-weight": ("float", (), True),
    "--router-prefill-load-scale": ("float", (), True),
    "--router-decode-active-request-weight": ("float", (), True),
    "--router-host-cache-hit-weight": ("float", (), True),
    "--router-disk-cache-hit-weight": ("float", (), True),
    "--router-temperature": ("float", (), True),
    "--router-kv-events": ("bool", (), True),
    "--kv-events": ("bool", (), True),
    "--router-replica-sync": ("bool", (), True),
    "--router-track-active-blocks": ("bool", (), True),
    "--track-active-blocks": ("bool", (), True),
    "--router-track-output-blocks": ("bool", (), True),
    "--track-output-blocks": ("bool", (), True),
    "--router-assume-kv-reuse": ("bool", (), True),
    "--assume-kv-reuse": ("bool", (), True),
    "--router-track-prefill-tokens": ("bool", (), True),
    "--router-tracking-hash": ("str", ("public-xxh3-v1", "keyed-xxh3-v1"), True),
    "--router-tracking-key-file": ("str", (), True),
    "--router-tracking-key-id": ("str", (), True),
    "--router-prefill-load-model": ("str", ("none", "ais"), True),
    "--router-ttl-secs": ("float", (), True),
    "--router-approximate-cache-policy": ("str", ("ttl", "lru"), True),
    "--router-queue-threshold": ("float", (), True),
    "--router-policy-config": ("str", (), True),
    "--router-conditional-disagg": ("bool", (), True),
    "--router-conditional-disagg-config": ("str", (), True),
    "--router-prefill-policy": ("str", (), True),
    "--router-decode-policy": ("str", (), True),
    "--router-event-threads": ("int", (), True),
    "--router-queue-policy": ("str", ("fcfs", "wspt"), True),
    "--use-remote-indexer": ("bool", (), True),
    "--enable-session-prefix-index": ("bool", (), True),
    "--shared-cache-multiplier": ("float", (), True),
    "--shared-cache-type": ("str", ("none", "hicache"), True),
    "--router-predicted-ttl-secs": ("float", (), True),
}


def _env_value(env: list[dict] | None, name: str) -> str | None:
    for entry in env or []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get("value"), str):
            return entry["value"]
    return None


def router_mode(command: list[str] | None, args: list[str] | None, env: list[dict] | None = None) -> str | None:
    """The router mode a frontend's command line (or its DYN_ROUTER_MODE env) asks for; None
    when it says nothing (Dynamo's default, round-robin). The flag wins over the env, as in
    dynamo.frontend's argument parsing."""
    return flag_value(tokens(command, args), "--router-mode") or _env_value(env, ROUTER_MODE_ENV)


def with_router_mode(command: list[str] | None, args: list[str] | None,
                     mode: str) -> tuple[list[str] | None, list[str] | None]:
    """The frontend's command line with ``--router-mode mode``: an existing flag's value is
    replaced where it stands (exec or shell form); otherwise the flag is appended."""
    if mode not in ROUTER_MODES:
        raise ValueError(f"router mode {mode!r} is not one of {', '.join(ROUTER_MODES)}")
    command = list(command) if command is not None else None
    args = list(args) if args is not None else None
    script = _shell_script(command, args)
    if script is not None:
        text = script[0]
        pattern = re.compile(r"(?<![\w-])--router-mode(=|[ \t]+)[\w-]+")
        if pattern.search(text):
            text = pattern.sub(lambda m: f"--router-mode{m.group(1)}{mode}", text, count=1)
        else:
            match = re.search(r"-m[ \t]+dynamo\.frontend\b[^;&|\n]*", text)
            end = match.end() if match else len(text)
            stripped = text[:end].rstrip()
            text = f"{stripped} --router-mode {mode}{text[len(stripped):]}"
        if script[1] == 0:
            args[0] = text
        else:
            command[2] = text
        return command, args
    for part in (args, command):
        for i, token in enumerate(part or []):
            if token == "--router-mode" and i + 1 < len(part):
                part[i + 1] = mode
                return command, args
            if token.startswith("--router-mode="):
                part[i] = f"--router-mode={mode}"
                return command, args
    return command, [*(args or []), "--router-mode", mode]


_SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}


def router_flags(argv: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value) for every router flag on a frontend's argv, ``--no-X`` folded into X
    with value "false"; unknown ``--router-*`` flags come back too, for the validator."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token.partition("=")
        base = "--" + name[5:] if name.startswith("--no-") else name
        known = ROUTER_FLAGS.get(base)
        if known is None and not name.startswith(("--router-", "--no-router-")):
            i += 1
            continue
        if known is not None and known[0] == "bool":
            stray = not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-") \
                and argv[i + 1] not in _SHELL_OPERATORS
            value = argv[i + 1] if stray else (inline if eq else None)
            out.append((base, "false" if name.startswith("--no-") and not stray else value))
            i += 2 if stray else 1
            continue
        if eq:
            out.append((base, inline))
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append((base, argv[i + 1]))
            i += 2
        else:
            out.append((base, None))
            i += 1
    return out


def router_flag_problem(flag: str, value: str | None) -> str | None:
    """Why dynamo.frontend 1.6.1 would refuse ``flag value`` at start, or None."""
    known = ROUTER_FLAGS.get(flag)
    if known is None:
        return f"dynamo.frontend 1.6.1 has no flag {flag}: it exits at start ('Unknown arguments specified')"
    kind, choices, _ = known
    if kind == "bool":
        # A stray value is an unknown argument to the frontend, which then exits.
        return None if value in (None, "false") else f"{flag} takes no value (the frontend exits on {value!r})"
    if value is None:
        return f"{flag} needs a value"
    if choices and value not in choices:
        return f"{flag} {value!r} is not one of {', '.join(choices)}"
    if kind in ("int", "float"):
        try:
            int(value) if kind == "int" else float(value)
        except ValueError:
            return f"{flag} takes {'a whole number' if kind == 'int' else 'a number'}, not {value!r}"
    return None
