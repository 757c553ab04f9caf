"""Where the client finds the portal URL and API token.

Precedence, highest first: command-line flags (``--url``, ``--token``), the
environment (``GPUSCHED_URL``, ``GPUSCHED_TOKEN``), then a TOML config file:
``--config PATH``, else ``$GPUSCHED_CONFIG``, else
``$XDG_CONFIG_HOME/gpusched/config.toml`` (``~/.config/gpusched/config.toml``).
A missing default file is fine; a file named explicitly must exist.

The file holds top-level string keys only::

    url = "http://127.0.0.1:8000"
    token = "0123abcd..."
    timeout = 30   # seconds per HTTP request (optional)

Any problem is a :class:`ConfigError` whose message names the file, key or
variable at fault; the command line turns it into exit status 2.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ENV_URL = "GPUSCHED_URL"
ENV_TOKEN = "GPUSCHED_TOKEN"
ENV_CONFIG = "GPUSCHED_CONFIG"
DEFAULT_TIMEOUT = 30.0
FILE_KEYS = frozenset({"url", "token", "timeout"})


class ConfigError(Exception):
    """The client cannot be configured as asked (a usage error, exit 2)."""


@dataclass(frozen=True)
class Settings:
    """Resolved connection settings; ``url`` has no trailing slash."""

    url: str
    token: str
    timeout: float = DEFAULT_TIMEOUT


def default_config_path(env: Mapping[str, str]) -> Path:
    """The config file used when neither ``--config`` nor ``$GPUSCHED_CONFIG`` is given."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "gpusched" / "config.toml"


def read_config_file(path: Path, *, required: bool) -> dict[str, object]:
    """Parse ``path``; an absent file gives ``{}`` unless ``required``."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise ConfigError(f"config file {path} does not exist") from None
        return {}
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    unknown = sorted(set(data) - FILE_KEYS)
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(FILE_KEYS))})"
        )
    for key in ("url", "token"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"config file {path}: {key} must be a string")
    if "timeout" in data and (
        isinstance(data["timeout"], bool) or not isinstance(data["timeout"], int | float)
    ):
        raise ConfigError(f"config file {path}: timeout must be a number of seconds")
    return data


def validate_url(url: str, source: str) -> str:
    """Return ``url`` without trailing slash, or raise naming ``source``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{source}: {url!r} is not an http(s) URL such as http://127.0.0.1:8000")
    return url.strip().rstrip("/")


def resolve(
    *,
    flag_url: str | None = None,
    flag_token: str | None = None,
    flag_config: str | None = None,
    flag_timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Merge flags, environment and config file into :class:`Settings`.

    Raises :class:`ConfigError` when the URL or token is missing from every
    source, or when a value is malformed.
    """
    env = os.environ if env is None else env
    if flag_config:
        path, required = Path(flag_config), True
    elif env.get(ENV_CONFIG):
        path, required = Path(env[ENV_CONFIG]), True
    else:
        path, required = default_config_path(env), False
    data = read_config_file(path, required=required)

    url, url_source = _pick(flag_url, "--url", env.get(ENV_URL), ENV_URL, data.get("url"), str(path))
    token, _ = _pick(flag_token, "--token", env.get(ENV_TOKEN), ENV_TOKEN, data.get("token"), str(path))
    if not url:
        raise ConfigError(
            f"no portal URL: pass --url, set {ENV_URL}, or put url = \"...\" in {path}"
        )
    if not token:
        raise ConfigError(
            f"no API token: create one on the portal's /account/tokens/ page, then pass --token, "
            f"set {ENV_TOKEN}, or put token = \"...\" in {path}"
        )
    timeout = flag_timeout if flag_timeout is not None else float(data.get("timeout", DEFAULT_TIMEOUT))
    if timeout <= 0:
        raise ConfigError(f"timeout must be positive, got {timeout}")
    return Settings(url=validate_url(url, url_source), token=token.strip(), timeout=timeout)


def _pick(*candidates: object) -> tuple[str | None, str]:
    """First non-empty value among (value, source) pairs, with its source."""
    pairs = zip(candidates[0::2], candidates[1::2], strict=True)
    for value, source in pairs:
        if isinstance(value, str) and value.strip():
            return value, str(source)
    return None, ""
