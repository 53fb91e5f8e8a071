"""The Frontend's router flags: which ``--router-*`` flags dynamo.frontend 1.6.1 takes, what
values they accept, and the router mode a frontend's command line (or DYN_ROUTER_MODE) asks for."""

from __future__ import annotations

import re

from core.dgd.shell import argv, find_script, flag_value, put_script
from core.facts import ROUTER_MODE_ENV, ROUTER_MODES

# The other router flags below are dynamo.frontend 1.6.1's, read from the wheel's RouterArgGroup
# and KvRouterArgGroup (tests/core/test_router_mode.py holds them to the installed wheel).
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
    return flag_value(argv(command, args), "--router-mode") or _env_value(env, ROUTER_MODE_ENV)


def with_router_mode(command: list[str] | None, args: list[str] | None,
                     mode: str) -> tuple[list[str] | None, list[str] | None]:
    """The frontend's command line with ``--router-mode mode``: an existing flag's value is
    replaced where it stands (exec or shell form); otherwise the flag is appended."""
    if mode not in ROUTER_MODES:
        raise ValueError(f"router mode {mode!r} is not one of {', '.join(ROUTER_MODES)}")
    command = list(command) if command is not None else None
    args = list(args) if args is not None else None
    script = find_script(command, args)
    if script is not None:
        text = script.text
        pattern = re.compile(r"(?<![\w-])--router-mode(=|[ \t]+)[\w-]+")
        if pattern.search(text):
            text = pattern.sub(lambda m: f"--router-mode{m.group(1)}{mode}", text, count=1)
        else:
            match = re.search(r"-m[ \t]+dynamo\.frontend\b[^;&|\n]*", text)
            end = match.end() if match else len(text)
            stripped = text[:end].rstrip()
            text = f"{stripped} --router-mode {mode}{text[len(stripped):]}"
        return put_script(command, args, script, text)
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


def build_frontend_command(router_mode: str | None = None) -> tuple[list[str], list[str]]:
    """The 1.6.1 templates' frontend command line, with ``--router-mode`` when one is chosen."""
    if router_mode is not None and router_mode not in ROUTER_MODES:
        raise ValueError(f"router mode {router_mode!r} is not one of {', '.join(ROUTER_MODES)}")
    return ["python3"], ["-m", "dynamo.frontend", *(["--router-mode", router_mode] if router_mode else [])]
