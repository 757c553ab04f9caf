"""``{{ seconds|duration }}``: a length of time as the command line writes it, with its seconds."""

from __future__ import annotations

from django import template

from portal.cli.units import format_duration

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    """``30`` -> ``30 s``; ``5400`` -> ``1:30:00 (5400 s)``; ``90000`` -> ``1-01:00:00 (90000 s)``;
    None -> ``none``: past a minute the clock form (``gpusched show``'s) with the exact seconds beside it."""
    if seconds is None:
        return "none"
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{format_duration(whole)} ({whole} s)"
