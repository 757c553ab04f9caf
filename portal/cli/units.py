"""Parsing of the human-friendly quantities accepted on the command line.

The API speaks seconds and gigabytes; these functions convert what a user types
into those units and raise ``ValueError`` with a message that says what is
accepted (argparse shows it as a usage error).
"""

from __future__ import annotations

import re

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_PARTS = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_MEM = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_MEM_GB = {"k": 1 / 1024**2, "m": 1 / 1024, "g": 1.0, "t": 1024.0, "": 1.0}


def parse_duration(text: str) -> int:
    """Seconds in ``text``: ``90`` (seconds), ``90s``, ``30m``, ``2h``, ``1d``,
    combinations such as ``1h30m``, or clock forms ``MM:SS``, ``HH:MM:SS`` and
    ``D-HH:MM:SS`` (as in Slurm). Fractions of a second are rounded.
    """
    value = text.strip().lower()
    if not value:
        raise ValueError("empty duration")
    if value.isascii() and value.isdigit():
        return int(value)
    if value.startswith("-"):
        raise ValueError(f"invalid duration {text!r}: a duration cannot be negative")
    if ":" in value or "-" in value:
        return _parse_clock(value, text)
    pos, total = 0, 0.0
    for match in _DURATION_PARTS.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(value) or pos == 0:
        raise ValueError(
            f"invalid duration {text!r}: use seconds (90), units (90s, 30m, 2h, 1d, 1h30m) or HH:MM:SS"
        )
    return round(total)


def _parse_clock(value: str, original: str) -> int:
    """Slurm clock forms: ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``."""
    has_days = "-" in value
    days_text, _, clock = value.partition("-") if has_days else ("0", "", value)
    fields = clock.split(":")
    digits = all(f.isascii() and f.isdigit() for f in fields) and (
        not has_days or (days_text.isascii() and days_text.isdigit()))
    if not digits or len(fields) > 3 or (not has_days and len(fields) < 2):
        raise ValueError(
            f"invalid duration {original!r}: expected MM:SS, HH:MM:SS or D-HH[:MM[:SS]]"
        )
    numbers = [int(f) for f in fields]
    if any(n >= 60 for n in numbers[1:]):
        raise ValueError(f"invalid duration {original!r}: minutes and seconds must be below 60")
    if has_days:
        numbers += [0] * (3 - len(numbers))  # D-HH and D-HH:MM count from the hour
        return int(days_text) * 86400 + numbers[0] * 3600 + numbers[1] * 60 + numbers[2]
    if len(numbers) == 2:
        return numbers[0] * 60 + numbers[1]
    return numbers[0] * 3600 + numbers[1] * 60 + numbers[2]


def parse_memory_gb(text: str) -> float:
    """Gigabytes in ``text``: a plain number is GB; suffixes K, M, G, T
    (optionally followed by B or iB) are powers of 1024, as in ``--mem 512M``.
    """
    match = _MEM.fullmatch(text.strip())
    if not match:
        raise ValueError(f"invalid memory size {text!r}: use GB (16) or a suffix (512M, 16G, 1T)")
    return round(float(match.group(1)) * _MEM_GB[match.group(2).lower()], 6)


def format_duration(seconds: float | None) -> str:
    """``3725`` -> ``"1:02:05"``; days as ``"2-03:00:00"``; ``None`` -> ``"-"``."""
    if seconds is None:
        return "-"
    total = int(round(seconds))
    sign = "-" if total < 0 else ""
    days, rest = divmod(abs(total), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{sign}{days}-{hours:02d}:{minutes:02d}:{secs:02d}" if days else f"{sign}{clock}"
