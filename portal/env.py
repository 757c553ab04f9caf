"""Typed readers for settings that come from the environment.

Every reader raises ``ImproperlyConfigured`` naming the variable and the value
it could not use, so a bad deployment fails at start-up instead of behaving
oddly later.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true"}
_FALSE = {"0", "false"}


def env_str(name: str, default: str | None = None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The variable's value, or ``default`` when it is unset or empty."""
    value = environ.get(name, "")
    return value if value != "" else default


def env_bool(name: str, default: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """Strict boolean: 1/0/true/false (any case); anything else is an error."""
    raw = environ.get(name, "")
    if raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use 1, 0, true or false")


def env_int(
    name: str,
    default: int,
    environ: Mapping[str, str] = os.environ,
    minimum: int | None = None,
) -> int:
    """An integer, at least ``minimum`` when given."""
    raw = environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at least {minimum}")
    return value


def env_float(
    name: str,
    default: float,
    environ: Mapping[str, str] = os.environ,
    minimum: float | None = None,
    positive: bool = False,
) -> float:
    """A finite number, at least ``minimum`` when given, and > 0 when ``positive``."""
    raw = environ.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at least {minimum:g}")
    if positive and not value > 0:
        raise ImproperlyConfigured(f"{name}={raw!r} must be greater than 0")
    return value


def env_list(name: str, default: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """A comma-separated list; blanks around items are dropped, empty items are an error."""
    raw = environ.get(name, "")
    if raw == "":
        return list(default)
    items = [item.strip() for item in raw.split(",")]
    if any(item == "" for item in items):
        raise ImproperlyConfigured(f"{name}={raw!r} has an empty item; use comma-separated values")
    return items


def env_url(
    name: str,
    default: str,
    schemes: tuple[str, ...],
    environ: Mapping[str, str] = os.environ,
) -> str:
    """A URL whose scheme is one of ``schemes``."""
    value = env_str(name, default, environ) or default
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in schemes or not rest:
        raise ImproperlyConfigured(f"{name}={value!r} is not a URL with scheme {' or '.join(schemes)}")
    return value


def read_secret_file(name: str, path: str) -> str:
    """The first line of the file at ``path`` (``""`` when ``path`` is empty); ``name`` is the variable
    that named it, for the error when it cannot be read or is empty."""
    if not path:
        return ""
    try:
        value = Path(path).read_text(encoding="utf-8").splitlines()[0].strip() if Path(path).stat().st_size else ""
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}={path!r} cannot be read: {exc.strerror}") from None
    if not value:
        raise ImproperlyConfigured(f"{name}={path!r} is empty")
    return value


def redis_url_with_password(url: str, password: str) -> str:
    """``url`` with ``password`` put in when given and the URL has none (percent-encoded)."""
    if not password:
        return url
    parts = urlsplit(url)
    if parts.password or parts.scheme == "unix":
        return url if parts.password else f"{url}{'&' if parts.query else '?'}password={quote(password, safe='')}"
    user = quote(parts.username, safe="") if parts.username else ""
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    netloc = f"{user}:{quote(password, safe='')}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
