"""Where the control plane is and which token to send: ``--url``/``--token`` first, then the
environment (DYNAMO_CP_URL, DYNAMO_CP_TOKEN or DYNAMO_CP_TOKEN_FILE), then the config file
(``--config``, DYNAMO_CP_CONFIG, or ~/.config/dynamo-cp/config.yaml, which ``dynamo-cp login``
writes)::

    url: https://dynamo-cp.example.com
    token: 0123abcd...          # or token_file: /run/secrets/dynamo-cp-token
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from .exits import USAGE, CliError

KEYS = ("url", "token", "token_file")


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def config_path(flag: str | None = None) -> Path:
    if flag:
        return Path(flag).expanduser()
    if os.environ.get("DYNAMO_CP_CONFIG"):
        return Path(os.environ["DYNAMO_CP_CONFIG"]).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "dynamo-cp" / "config.yaml"


def read_file(path: Path, *, required: bool) -> dict:
    if not path.exists():
        if required:
            raise CliError(USAGE, f"{path}: no such config file")
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise CliError(USAGE, f"{path}: cannot read the config file: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(USAGE, f"{path}: the config file must be a mapping with url and token")
    unknown = sorted(set(map(str, data)) - set(KEYS))
    if unknown:
        raise CliError(USAGE, f"{path}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    return {k: str(v) for k, v in data.items() if v is not None}


def _token_from_file(name: str, origin: str) -> str:
    try:
        return Path(name).expanduser().read_text().strip()
    except OSError as exc:
        raise CliError(USAGE, f"{origin}: cannot read the token file {name}: {exc.strerror}") from None


def resolve_url(*, url: str | None, config: str | None) -> str:
    """The control plane's URL alone (``dynamo-cp login`` has no token yet)."""
    file = read_file(config_path(config), required=bool(config))
    url = url or os.environ.get("DYNAMO_CP_URL") or file.get("url") or ""
    if not url:
        raise CliError(USAGE, "no control plane URL: pass --url, set DYNAMO_CP_URL, or run "
                              "`dynamo-cp config set --url URL`")
    return _checked_url(url)


def _checked_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(USAGE, f"the control plane URL must look like https://host[:port], not {url!r}")
    return url.rstrip("/")


def resolve(*, url: str | None, token: str | None, config: str | None) -> Settings:
    path = config_path(config)
    file = read_file(path, required=bool(config))
    env = os.environ
    url = url or env.get("DYNAMO_CP_URL") or file.get("url") or ""
    if not token:
        if env.get("DYNAMO_CP_TOKEN"):
            token = env["DYNAMO_CP_TOKEN"]
        elif env.get("DYNAMO_CP_TOKEN_FILE"):
            token = _token_from_file(env["DYNAMO_CP_TOKEN_FILE"], "DYNAMO_CP_TOKEN_FILE")
        elif file.get("token"):
            token = file["token"]
        elif file.get("token_file"):
            token = _token_from_file(file["token_file"], str(path))
    if not url:
        raise CliError(USAGE, "no control plane URL: pass --url, set DYNAMO_CP_URL, or run "
                              "`dynamo-cp config set --url URL --token TOKEN`")
    url = _checked_url(url)
    if not token:
        raise CliError(USAGE, "no API token: pass --token, set DYNAMO_CP_TOKEN (or DYNAMO_CP_TOKEN_FILE), run "
                              "`dynamo-cp login`, or `dynamo-cp config set --url URL --token TOKEN`")
    return Settings(url=url, token=token.strip())


def write(path: Path, values: dict) -> Path:
    """Merge ``values`` into the config file, readable by its owner only (it holds a token)."""
    current = read_file(path, required=False)
    current.update({k: v for k, v in values.items() if v})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(current, handle, default_flow_style=False, sort_keys=True)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    return path
