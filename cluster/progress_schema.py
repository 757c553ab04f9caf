"""What a progress report may hold: one definition for the node agent and the server.

A job writes reports with ``gpusched.job`` (one JSON object per line); the
agent parses each line with ``parse_line`` and forwards the latest valid one
as REPORT_PROGRESS; the server checks the report's fields again with
``check_report`` (an agent is trusted with its own jobs only, not with the
shape of what it relays). Both raise ``protocol.ProtocolError`` naming the
bad field, and nothing is stored then.

A report is a dict with any of: ``step`` (int 0..10^15), ``total_steps``
(int 1..10^15), ``epoch`` (finite number 0..10^9), ``metrics`` (at most
``MAX_METRICS`` names matching ``METRIC_NAME`` -> finite numbers),
``checkpoint`` ({"step": int, "path": str of at most 256 characters}) and
``t`` (when the job wrote it, Unix seconds). Pure Python, no Django.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from cluster.protocol import ProtocolError

MAX_LINE_BYTES = 4096
MAX_METRICS = 16
MAX_STEP = 10**15
MAX_EPOCH = 1e9
MAX_PATH_CHARS = 256
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")
FIELDS = frozenset({"t", "step", "total_steps", "epoch", "metrics", "checkpoint"})


def parse_line(line: bytes) -> dict[str, Any]:
    """One line the job wrote -> a checked report; ProtocolError for anything else.

    NaN and Infinity, which Python's json module accepts by default, are refused.
    """
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("line", f"{len(line)} bytes; at most {MAX_LINE_BYTES}")
    try:
        data = json.loads(line, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError("line", f"not JSON ({str(exc)[:80]})") from None
    return check_report(data)


def check_report(data: Any) -> dict[str, Any]:
    """The checked copy of ``data`` (a report dict); unknown or malformed fields raise ProtocolError."""
    if not isinstance(data, dict):
        raise ProtocolError("report", f"must be a JSON object, got {type(data).__name__}")
    unknown = sorted(str(k)[:40] for k in data if k not in FIELDS)
    if unknown:
        raise ProtocolError(unknown[0], "is not a progress field")
    out: dict[str, Any] = {}
    if data.get("t") is not None:
        out["t"] = _number(data["t"], "t", 0.0, 1e11)
    if data.get("step") is not None:
        out["step"] = _int(data["step"], "step", 0)
    if data.get("total_steps") is not None:
        out["total_steps"] = _int(data["total_steps"], "total_steps", 1)
    if data.get("epoch") is not None:
        out["epoch"] = _number(data["epoch"], "epoch", 0.0, MAX_EPOCH)
    if data.get("metrics") is not None:
        out["metrics"] = check_metrics(data["metrics"])
    if data.get("checkpoint") is not None:
        out["checkpoint"] = _checkpoint(data["checkpoint"])
    return out


def check_metrics(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ProtocolError("metrics", f"must be an object, got {type(value).__name__}")
    if len(value) > MAX_METRICS:
        raise ProtocolError("metrics", f"{len(value)} names; at most {MAX_METRICS}")
    out = {}
    for name, number in value.items():
        if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
            raise ProtocolError("metrics", f"bad name {str(name)[:70]!r}")
        out[name] = _number(number, f"metrics[{name}]", -1e300, 1e300)
    return out


def _checkpoint(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) - {"step", "path"}:
        raise ProtocolError("checkpoint", 'must be an object with "step" and/or "path"')
    out: dict[str, Any] = {}
    if value.get("step") is not None:
        out["step"] = _int(value["step"], "checkpoint.step", 0)
    if value.get("path") is not None:
        if not isinstance(value["path"], str) or len(value["path"]) > MAX_PATH_CHARS:
            raise ProtocolError("checkpoint.path", f"must be a string of at most {MAX_PATH_CHARS} characters")
        out["path"] = value["path"].replace("\x00", "")
    return out


def _int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_STEP:
        raise ProtocolError(name, f"must be an integer {minimum}..{MAX_STEP}, got {str(value)[:40]}")
    return value


def _number(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(name, f"must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        raise ProtocolError(name, f"must be a finite number {low:g}..{high:g}, got a {len(str(value))}-digit integer") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise ProtocolError(name, f"must be a finite number {low:g}..{high:g}, got {str(value)[:40]}")
    return number


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")
