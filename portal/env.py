"""Typed readers for settings that come from the environment.

Every reader raises ``ImproperlyConfigured`` naming the variable and the value
it could not use, so a bad deployment fails at start-up instead of behaving
oddly later.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

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
