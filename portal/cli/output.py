"""Rendering API objects for people (aligned tables) and scripts (JSON).

Tables are plain text with two spaces between columns, a header row and no
borders, like ``squeue``. Missing or null values show as ``-``. Timestamps
from the API (ISO 8601) are shown in the local time zone to the second.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TextIO

from portal.cli.units import format_duration

Getter = Callable[[Mapping[str, Any]], Any]
Column = tuple[str, Getter]

NAME_WIDTH = 32


def dump_json(value: Any, out: TextIO) -> None:
    """Write ``value`` as indented JSON followed by a newline."""
    json.dump(value, out, indent=2, sort_keys=False)
    out.write("\n")


def render_table(columns: Sequence[Column], rows: Sequence[Mapping[str, Any]]) -> str:
    """Aligned text table; numbers are right-aligned, everything else left."""
    header = [title for title, _ in columns]
    cells = [[cell(getter(row)) for _, getter in columns] for row in rows]
    numeric = [
        all(_is_number(getter(row)) for row in rows) and bool(rows) for _, getter in columns
    ]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    lines = [_join(header, widths, numeric), *(_join(r, widths, numeric) for r in cells)]
    return "\n".join(lines)


def _join(values: Sequence[str], widths: Sequence[int], numeric: Sequence[bool]) -> str:
    parts = [v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric, strict=True)]
    return "  ".join(parts).rstrip()


def _is_number(value: Any) -> bool:
    """Numbers (and missing values, shown as ``-``) are right-aligned."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def cell(value: Any) -> str:
    """Text for one table cell."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return ",".join(f"{k}:{cell(v)}" for k, v in value.items()) or "-"
    return str(value)


def truncate(text: Any, width: int = NAME_WIDTH) -> str | None:
    """Shorten long text to ``width`` characters with a trailing ``...``."""
    if text is None:
        return None
    text = str(text)
    return text if len(text) <= width else text[: width - 3] + "..."


def local_time(value: str | None) -> str | None:
    """``"2025-01-02T03:04:05.123Z"`` -> ``"2025-01-02 04:04:05"`` (local zone).

    Unparseable text is returned unchanged so nothing the API says is hidden.
    """
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def job_ref(job: Mapping[str, Any]) -> Any:
    """How a job is addressed: ``12_3`` for task 3 of array 12 (as squeue and the web list show it),
    else its id."""
    array = job.get("array_id")
    return f"{array}_{job.get('array_index')}" if array is not None else job.get("id")


def seconds(value: Any) -> str | None:
    """A duration field (seconds) as ``H:MM:SS``; ``None`` stays ``None``."""
    return None if value is None else format_duration(float(value))


def key_values(pairs: Sequence[tuple[str, Any]]) -> str:
    """``Key: value`` lines with the values aligned."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{(k + ':').ljust(width + 1)} {cell(v)}" for k, v in pairs)


def tenths(value: Any) -> float | None:
    """A measured quantity (seconds of GPU or CPU time) to a tenth, halves up as the job page rounds them
    (4.25 -> 4.3): more digits are noise; None stays None."""
    if value is None:
        return None
    return float(Decimal(str(value)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def ended_because(events: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """Why a job ended, from its events in order: the reason of the last, with the message of the event
    that first gave that reason (``Cancelled``, ``cancelled by bob``, not the signal that stopped its
    process afterwards). ``("", "")`` without events."""
    if not events:
        return "", ""
    cause = len(events) - 1
    while cause > 0 and events[cause - 1].get("reason") == events[-1].get("reason"):
        cause -= 1
    return events[-1].get("reason") or "", events[cause].get("message") or ""


def job_reason(job: Mapping[str, Any], with_message: bool = True) -> str | None:
    """Why a job waits (its pending reason and message) or, once it has ended, why it ended
    (``ended_because``). ``with_message=False``: the reason alone."""
    reason, message = job.get("pending_reason"), job.get("pending_message")
    if not reason and job.get("ended_at"):
        reason, message = ended_because(job.get("events") or [])
    return f"{reason}: {message}" if reason and message and with_message else reason or None


def memory(value: Any) -> str | None:
    """Bytes as the largest binary unit that keeps a whole part (``1.5G``, ``300M``); None stays None."""
    if value is None:
        return None
    amount = float(value)
    for unit in ("", "K", "M", "G", "T"):
        if amount < 1024 or unit == "T":
            return f"{amount:.0f}{unit}" if unit == "" else f"{amount:.1f}{unit}"
        amount /= 1024
    return None


def node_messages(attempts: Sequence[Mapping[str, Any]]) -> list[str]:
    """``gpusched show``'s "Node messages" section (what the nodes said about how attempts ended), or none."""
    said = [f"attempt {a.get('number')}: {a['message']}" for a in attempts if a.get("message")]
    return ["Node messages:\n" + "\n".join(said)] if said else []


def format_quota(body: Mapping[str, Any]) -> str:
    """One row per limit with the caller's current usage beside it; a null limit
    is shown as ``unlimited``. Usage figures without a limit get their own rows.
    """
    limits: Mapping[str, Any] = body.get("limits") or {}
    usage: Mapping[str, Any] = body.get("usage") or {}
    rows = [{"name": k, "limit": "unlimited" if v is None else v, "usage": usage.get(k)}
            for k, v in limits.items()]
    rows += [{"name": k, "limit": "unlimited", "usage": v} for k, v in usage.items() if k not in limits]
    columns: list[Column] = [
        ("LIMIT", lambda r: r["name"]),
        ("VALUE", lambda r: r["limit"]),
        ("USAGE", lambda r: r["usage"]),
    ]
    table = render_table(columns, rows)
    scopes = [f"{s.get('scope')} {s.get('name')}" for s in body.get("scopes") or []]
    return table + (f"\n(the tightest of: {', '.join(scopes)})" if scopes else "")


def forecast_start(forecast: Mapping[str, Any] | None) -> str | None:
    """A job's forecast start in local time; ``> 14 days`` past the horizon; None: no forecast."""
    if not forecast:
        return None
    return local_time(forecast["start"]) if forecast.get("start") else "> 14 days"


def queue_order(factors: Mapping[str, Any] | None) -> str | None:
    """A pending job's priority factors (the API's ``priority_factors``) in the order the queue applies them,
    as the job page's "Queue order" line and Slurm's ``sprio`` give them; None for a job not pending."""
    if not factors:
        return None
    fair = factors.get("fair_share")
    return (f"class {factors.get('class')}{' (considered before BE)' if factors.get('class_first') else ''}; "
            f"fair share {'off' if fair is None else f'{fair:.3f}'}; priority {factors.get('priority')}; "
            f"waiting since {local_time(factors.get('waiting_since'))}")
