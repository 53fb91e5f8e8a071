"""The ``dynamo-cp`` console script: parse the command line, resolve the URL and token, run
one command, exit with a documented status (dynamo_cp.exits)."""

from __future__ import annotations

import argparse
import sys

from . import benchmarks, config, exits, graphs, login, operations, repos, sizing, studies
from .client import Client
from .exits import CliError
from .output import FORMATS, emit, say
from .wait import Progress, seconds

EPILOG = "exit status:\n" + "\n".join(f"  {code}  {text}" for code, text in exits.DESCRIPTIONS.items()) + """

The URL and token come from --url/--token, else DYNAMO_CP_URL and DYNAMO_CP_TOKEN (or
DYNAMO_CP_TOKEN_FILE), else the config file (--config, DYNAMO_CP_CONFIG, or
~/.config/dynamo-cp/config.yaml, written by `dynamo-cp login` or `dynamo-cp config set`)."""

DEFAULTS = {"url": None, "token": None, "config": None, "output": "table", "quiet": False, "request_timeout": 30.0}


def common_options() -> argparse.ArgumentParser:
    """Options accepted before or after the command (SUPPRESS: a later parser never resets them)."""
    common = argparse.ArgumentParser(add_help=False)
    s = argparse.SUPPRESS
    common.add_argument("--url", default=s, help="the control plane, e.g. https://dynamo-cp.example.com")
    common.add_argument("--token", default=s, help="an API token (Authorization: Token <key>)")
    common.add_argument("--config", default=s, help="a config file with url and token")
    common.add_argument("-o", "--output", choices=FORMATS, default=s, help="table (default), json or yaml")
    common.add_argument("-q", "--quiet", action="store_true", default=s, help="no progress on stderr")
    common.add_argument("--request-timeout", type=seconds, default=s, help="seconds per HTTP request (default 30)")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(prog="dynamo-cp", parents=[common], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Drive a Dynamo Control Plane through its REST API.")
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    graphs.add_parsers(sub, common)
    operations.add_parsers(sub, common)
    benchmarks.add_parsers(sub, common)
    login.add_parsers(sub, common)
    repos.add_parsers(sub, common)
    sizing.add_parsers(sub, common)
    studies.add_parsers(sub, common)
    cfg = sub.add_parser("config", help="the config file", parents=[common])
    verbs = cfg.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser("set", help="write url and/or token to the config file (mode 0600)", parents=[common])
    p.add_argument("--token-file", dest="token_file", help="store this file's path instead of the token")
    verbs.add_parser("show", help="where the URL and token come from (the token masked)", parents=[common])
    return parser


def do_config(args) -> int:
    path = config.config_path(args.config)
    if args.verb == "set":
        values = {"url": args.url, "token": args.token, "token_file": args.token_file}
        if not any(values.values()):
            raise CliError(exits.USAGE, "config set: give --url, --token or --token-file")
        say(f"wrote {config.write(path, values)}")
        return exits.OK
    settings = config.resolve(url=args.url, token=args.token, config=args.config)
    masked = settings.token[:4] + "…" if len(settings.token) > 8 else "…"
    emit({"url": settings.url, "token": masked, "config_file": str(path)}, args.output,
         lambda d: f"url: {d['url']}\ntoken: {d['token']}\nconfig file: {d['config_file']}")
    return exits.OK


COMMANDS = {"graphs": graphs.run, "operations": operations.run, "benchmarks": benchmarks.run, "repos": repos.run,
            "sizing": sizing.run, "studies": studies.run_studies, "recommendations": studies.run_recommendations}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 0 for --help, 2 for a bad command line
        return int(exc.code or 0)
    for key, value in DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, value)
    args.progress = Progress(quiet=args.quiet)
    try:
        if args.group == "config":
            return do_config(args)
        if args.group == "login":
            return login.run(args)
        settings = config.resolve(url=args.url, token=args.token, config=args.config)
        client = Client(settings, timeout=args.request_timeout)
        try:
            return COMMANDS[args.group](args, client)
        finally:
            client.close()
    except CliError as exc:
        say(f"dynamo-cp: {exc.message}")
        for line in exc.details:
            say(f"  {line}")
        return exc.code
    except KeyboardInterrupt:
        say("dynamo-cp: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
